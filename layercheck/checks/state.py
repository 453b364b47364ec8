"""The layer's state (its buffers): valid after every call, reset by ``reset_state``, and
carried with the parameters by ``state_dict``."""

from __future__ import annotations

import torch
from torch import nn

from layercheck._sdk_internal import (
    Checkpoint,
    Target,
    assert_same_unless_random,
    describe_shapes,
    failing,
    forward_is_random,
    initialize,
    output_names,
    path_allowance,
    path_tolerances,
    rounding_allowance_of,
    rounding_tolerances,
    user_trace,
)
from layercheck.sdk import (
    FORWARD,
    PREDICT,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    Mode,
    Outputs,
    Subject,
    assert_close,
    check,
    identical,
    modules_only,
    nonfinite,
    predict_run,
    reference_forward,
    reference_predict,
)

_RESET_CALLS = 3  # forward calls before reset_state: enough for a recurrent state to move away from its start
_STATELESS = modules_only("operations (autograd.Function, custom operators, functions) have no state")


@check(
    "state_valid",
    title="after predict and forward, state keeps its dtype, device and size and stays finite",
    matlab="predictReturnsValidStates, forwardReturnsValidStates",
    uses=(PREDICT, FORWARD),
    applies=_STATELESS,
)
def state_valid(ctx: Context) -> str:
    """Compares every buffer after a predict and after a training forward with its value
    before: it must still exist, keep its dtype and device, hold finite values (where it
    did), be detached from the autograd graph, and keep its size unless it is resized to
    the batch (a recurrent hidden state) or takes its size on the first call and keeps it
    on the next (a per-channel observer's scale, sized lazily: noted).

    Invalid state breaks the next call, not this one: a running statistic turned NaN, a
    buffer reassigned as float32 or on the CPU, or a hidden state that keeps the whole
    graph of the previous step alive (memory grows, "backward through the graph a second
    time"). Fix: update state under ``torch.no_grad()`` (or ``.detach()``), in place
    (``buf.copy_(...)``, ``buf.mul_(...)``), and guard divisions.

    State kept in plain attributes (an int counting filled cache entries, a list of past
    inputs) is noted: ``state_dict()`` does not save it and ``.to()`` does not move it.
    """
    _note_hidden_state(ctx)
    initial = ctx.fresh().snapshot()
    if not initial:
        raise CheckSkipped("the layer has no state (no buffers)")
    batch = {layout.size[layout.batch_dim] for layout in ctx.layouts if layout.batch_dim is not None}
    for mode, run in (("predict", reference_predict(ctx)), ("forward", reference_forward(ctx))):
        for name in run.leaves:  # no graph held: not a leak, but a .grad nobody clears
            ctx.note(f"buffer {name!r} requires grad after {mode}: the layer made it require grad (requires_grad_() "
                     "on the buffer, or on a tensor that is the buffer itself), so each backward that reaches it "
                     "accumulates into its .grad, which no optimiser clears; compute with a copy (self.zero.clone()) "
                     "instead, or make it an nn.Parameter if it is meant to be learned")
        graphs = [name for name in run.attached if name not in run.leaves]
        if graphs:
            raise CheckFailed(
                f"state {graphs[0]!r} after {mode} is attached to the autograd graph (requires grad): the layer "
                "keeps its last call's graph alive (every call's, where the next call builds on it: memory grows "
                "and a second backward fails), and copy.deepcopy of the layer raises meanwhile. Fix: update state "
                "under torch.no_grad() or store .detach()",
                buffers=graphs, mode=mode,
            )
        for name, old in initial.items():
            new = run.state.get(name)
            if (old is not None and new is not None and new.shape != old.shape
                    and not _resized_to_batch(old, new, batch) and _keeps_size(ctx, Mode(mode), name, new.shape)):
                ctx.note(f"state {name!r} takes its size on the first {mode} ({tuple(old.shape)} became "
                         f"{tuple(new.shape)}) and keeps it on the next: sized lazily (a per-channel observer's "
                         "scale); a checkpoint then loads into a fresh layer only if its load_state_dict takes the "
                         "new size (FakeQuantize's resizes the buffer first)")
                old = None  # judged as a buffer filled in by the call
            _check_buffer(name, old, new, mode, batch)
    return f"{len(initial)} buffer(s) valid after predict and forward"


def _keeps_size(ctx: Context, mode: Mode, name: str, size: torch.Size) -> bool:
    """Whether a buffer that a call resized (not to the batch) keeps its new size through a
    second call: sized lazily on the first call, not growing with every call (a history)."""
    subject = ctx.fresh()
    for _ in range(2):
        try:
            subject.call(mode, subject.inputs(requires_grad=mode is Mode.FORWARD))
        except LayerRaised:
            return False
    after = subject.snapshot().get(name)
    return after is not None and after.shape == size


def _note_hidden_state(ctx: Context) -> None:
    """A note naming the plain attributes that predict or forward change (on the sample of the
    batch where there is one: which attributes change does not depend on the batch size)."""
    for mode in (Mode.PREDICT, Mode.FORWARD):
        subject = ctx.fresh(sample=True)
        before = subject.checkpoint()
        with failing(f"in {mode.value}"):
            subject.call(mode, subject.inputs(requires_grad=mode is Mode.FORWARD))
        changed = [c.removeprefix("attribute ") for c in subject.changes(before) if c.startswith("attribute")]
        if changed:
            ctx.note(f"{mode.value} changes {', '.join(changed)}, kept in plain attributes rather than buffers: "
                     "state_dict() does not save it, .to() does not move it, and reset_state must put it back")
            return


def _check_buffer(name: str, old: torch.Tensor | None, new: torch.Tensor | None, mode: str,
                  batch: set[int]) -> None:
    """One buffer after a call against before it (None: an empty slot, or gone)."""
    where = f"state {name!r} after {mode}"
    if new is None:
        if old is not None:
            raise CheckFailed(f"{where}: the buffer is gone (it held {describe_shapes([old])[0]})",
                              buffer=name, mode=mode)
        return
    if old is not None:
        if new.dtype != old.dtype:
            raise CheckFailed(f"{where}: dtype {old.dtype} became {new.dtype}", buffer=name, mode=mode,
                              before=str(old.dtype), after=str(new.dtype))
        if new.device != old.device:
            raise CheckFailed(f"{where}: device {old.device} became {new.device}", buffer=name, mode=mode,
                              before=str(old.device), after=str(new.device))
        if new.shape != old.shape and not _resized_to_batch(old, new, batch):
            raise CheckFailed(
                f"{where}: size {tuple(old.shape)} became {tuple(new.shape)}; state may change size only to follow the "
                f"batch ({', '.join(map(str, sorted(batch))) or 'no B dimension in the layouts'})",
                buffer=name, mode=mode, before=list(old.shape), after=list(new.shape),
            )
    # a value non-finite before and untouched by the call is a constant (an attention mask of -inf)
    untouched = (old == new) | (old != old) & (new != new) if old is not None and old.shape == new.shape else None
    problem = nonfinite(new, ignore=untouched)
    if problem is not None:
        raise CheckFailed(f"{where}: {problem}", buffer=name, mode=mode)


def _resized_to_batch(old: torch.Tensor, new: torch.Tensor, batch: set[int]) -> bool:
    """An empty state filled in, or one whose changed dimensions all take a batch size."""
    if old.numel() == 0:
        return True
    return old.dim() == new.dim() and all(
        o == n or n in batch for o, n in zip(old.shape, new.shape)
    )


@check(
    "reset_state",
    title="reset_state restores the initial state and the first output",
    matlab="resetStateDoesNotError",
    requires=("forward_runs",),
    applies=_STATELESS,
    tolerances=rounding_tolerances("relative difference between the state (and the first output) after reset_state "
                                   "and the fresh layer's"),
    any_batch=True,
)
def reset_state(ctx: Context) -> str:
    """Runs the training forward a few times so that the state moves, calls
    ``reset_state()``, and requires every buffer to equal its initial value and the next
    output to equal the first one.

    A network is reset between sequences or evaluation runs; a reset that forgets a
    buffer (a step counter, a second hidden state) leaks the previous sequence into the
    next, and results depend on what ran before. Fix: reset every buffer the forward
    writes, to the value the constructor gives it.
    """
    subject = ctx.fresh()
    module = subject.module
    assert module is not None
    hook = getattr(module, "reset_state", None)
    initial = subject.snapshot()
    if not callable(hook) and not initial:
        raise CheckSkipped("the layer has no state (no buffers) and no reset_state")
    inputs = subject.inputs()
    first = _forward(subject, inputs)
    for _ in range(_RESET_CALLS - 1):
        _forward(subject, inputs)
    moved = [name for name, old in initial.items() if not _same(old, subject.buffers().get(name))]
    if not callable(hook):
        if moved:
            raise CheckSkipped(
                f"the state changes in forward ({', '.join(moved)}) but the layer defines no reset_state: "
                "define reset_state(self) to restore the initial state (MATLAB resetState) so it can be tested"
            )
        raise CheckSkipped("the layer defines no reset_state (and its state does not change in forward)")
    try:
        hook()
    except Exception as exc:
        raise CheckFailed(f"reset_state raised {type(exc).__name__}: {exc}", traceback=user_trace(exc)) from exc
    after = subject.buffers()
    for name, old in initial.items():
        new = after.get(name)
        what = f"state {name!r} after reset_state vs its initial value"
        if old is None or new is None:
            if (old is None) != (new is None):
                raise CheckFailed(f"{what}: {'None' if new is None else 'a tensor'} instead of "
                                  f"{'None' if old is None else describe_shapes([old])[0]}", buffer=name)
            continue
        if old.shape != new.shape:
            raise CheckFailed(f"{what}: size {tuple(new.shape)} after reset_state, {tuple(old.shape)} initially",
                              buffer=name)
        assert_close([old], [new.detach()], what=what, names=[f"state {name!r}"],
                     allowance=rounding_allowance_of(ctx), labels=("initially", "after reset_state"))
    again = _forward(subject, inputs)
    assert_close(first, again, what="the first output after reset_state vs the first output of the fresh layer",
                 names=output_names(first), allowance=rounding_allowance_of(ctx),
                 labels=("the fresh layer", "after reset_state"))
    which = f" ({', '.join(moved)} moved)" if moved else ""
    return (f"reset_state after {_RESET_CALLS} forward calls restored {len(initial)} buffer(s){which} "
            "and the first output")


def _forward(subject: Subject, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach() for t in Outputs.of(subject.forward(inputs, grad=False)).tensors]


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return a is b if a is None or b is None else identical([a], [b])


@check(
    "state_dict",
    title="a state-dict round trip into a fresh instance reproduces the outputs",
    requires=("forward_runs",),
    uses=(PREDICT, FORWARD),  # the rounding floor of the predict outputs; forward_is_random
    applies=_STATELESS,
    tolerances=path_tolerances("relative difference between predict outputs of the saved layer and of a fresh "
                               "instance loaded from its state_dict"),
    any_batch=True,
)
def state_dict(ctx: Context) -> str:
    """Trains a copy a little (one forward, which updates running state, and a nudge to
    every learnable parameter), saves its ``state_dict()``, loads it into an instance
    constructed and initialised with another seed, and compares predict outputs.

    A checkpoint must reproduce the layer: weights kept as plain attributes, learned
    state in a ``persistent=False`` buffer, or a ``state_dict`` override that drops
    entries are lost on save and silently replaced by fresh values on load. Fix: keep
    everything the outputs depend on in parameters and persistent buffers.
    """
    source = ctx.fresh()
    assert source.module is not None
    inputs = source.inputs()
    if source.snapshot():
        source.forward(inputs, grad=False)  # running statistics, hidden state: what training leaves behind
    _nudge(source.module, ctx.seed)
    saved = source.module.state_dict()
    kept = {name: value.clone() if isinstance(value, torch.Tensor) else value for name, value in saved.items()}
    at_save = source.checkpoint()  # what the saved layer holds outside the state_dict too
    reborn = _construct(ctx, seed=ctx.seed + 1)
    _match_resized_state(reborn, saved)
    try:
        reborn.load_state_dict(saved)
    except Exception as exc:
        raise CheckFailed(f"loading the state dict into a fresh instance raised {type(exc).__name__}: {exc}",
                          traceback=user_trace(exc)) from exc
    # new input tensors of the same values: a layer may cache its output for the tensor it was last
    # called with (Pyro's transforms, cache_size=1), which the nudge has not invalidated
    expected = predict_run(source, source.inputs()).outputs
    actual = predict_run(Subject(ctx.target, reborn), source.inputs()).outputs
    assert_close(expected, actual, names=output_names(expected), allowance=path_allowance(ctx, PREDICT),
                 what="predict of the saved layer vs a fresh instance (other seed) loaded from its state_dict",
                 labels=("the saved layer", "the loaded instance"))
    _resumed_training(ctx, source, kept, at_save)
    return (f"{len(saved)} state-dict entries reproduce {len(expected)} output(s) in a fresh instance, in "
            "predict and in training")


# Note [training after a checkpoint]
#     Resuming training loads a state_dict into a freshly constructed layer and calls it in
#     training mode. What the layer keeps outside its state_dict is then as constructed: a
#     data-dependent initialisation whose "initialised" flag is a plain Python bool (Glow's
#     ActNorm in several ports) initialises again, from the next batch, over the trained
#     parameters. So the loaded instance is made as a resuming process makes it (constructor and
#     initialize, not the data-dependent first call every other check starts from, Note
#     [data-dependent initialisation] in building.py), and its first training forward must give
#     the saved layer's training forward (same input, same random stream: dropout draws the same
#     mask, batch statistics are the same) and leave its loaded parameters as they were. The saved
#     layer is put back as it was saved, plain attributes included: the predict round trip since
#     moved what it carries from call to call outside its state_dict (a spiking neuron's membrane
#     potential, spikingjelly's IFNode: by design not saved, and at rest in both at the save),
#     which a layer resumed from the checkpoint does not hold either.
def _resumed_training(ctx: Context, source: Subject, saved: dict[str, torch.Tensor], at_save: Checkpoint) -> None:
    """Note [training after a checkpoint]. ``saved``: the state_dict as it was saved (a copy);
    ``at_save``: the saved layer as it was then."""
    assert source.module is not None
    target = ctx.target
    other = Target(target.instance if target.instance is not None else target.cls, target.specs,
                   args=target.args, kwargs=target.kwargs, seed=ctx.seed + 1, name=target.name,
                   invocation=target.invocation, constants=target.constants, on=target.home)
    resumed = other.at_home(other.construct())
    initialize(resumed, other, ctx.seed + 1)
    resumed = other.at_home(resumed)
    _match_resized_state(resumed, saved)
    try:
        resumed.load_state_dict(saved)
    except Exception:
        return  # a layer that cannot load before its first call: the predict round trip above judged it
    source.rewind(at_save)  # the layer as saved: predict may have moved a recurrent state since
    _match_resized_state(source.module, saved)
    source.module.load_state_dict(saved)
    loaded = {name: p.detach().clone() for name, p in resumed.named_parameters()}
    own = {name: p.detach().clone() for name, p in source.module.named_parameters()}
    rng = ctx.seed + 7
    expected = _forward_seeded(source, source.inputs(), rng)
    actual = _forward_seeded(Subject(target, resumed), source.inputs(), rng)
    kept = dict(source.module.named_parameters())
    moved = [name for name, p in resumed.named_parameters()
             if name in own and name in kept and not torch.equal(p.detach(), loaded[name])
             and torch.equal(kept[name].detach(), own[name])]
    if moved:
        raise CheckFailed(f"a fresh instance loaded from the state_dict changed {', '.join(moved)} in its first "
                          "training forward, which the saved layer's training forward leaves as they are: something "
                          "kept outside the state_dict (a plain Python attribute, such as an 'initialised' flag) "
                          "makes a layer resumed from a checkpoint initialise again over its trained parameters. "
                          "Fix: keep it in a buffer (self.register_buffer('initialised', torch.tensor(False)))",
                          details={"changed": moved})
    assert_same_unless_random(expected, actual, random=lambda: forward_is_random(ctx), names=output_names(expected),
                              allowance=path_allowance(ctx, PREDICT), labels=("the saved layer", "the loaded instance"),
                              what="training forward of the saved layer vs a fresh instance loaded from its state_dict")


def _forward_seeded(subject: Subject, inputs: list[torch.Tensor], rng: int) -> list[torch.Tensor]:
    return [t.detach() for t in Outputs.of(subject.forward(inputs, grad=False, rng_seed=rng)).tensors]


def _nudge(module: nn.Module, seed: int) -> None:
    """Move every learnable parameter by about 1% of its tensor's scale, as a training step would."""
    gen = torch.Generator().manual_seed(seed + 31)
    with torch.no_grad():
        for p in module.parameters():
            if p.requires_grad and p.is_floating_point() and p.numel():
                noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.device, p.dtype)
                p.add_(noise * 0.01 * max(float(p.abs().max()), 1e-3))


def _construct(ctx: Context, *, seed: int) -> nn.Module:
    """A new instance from the same constructor call and ``initialize``, seeded ``seed``, on the
    device the checks run on (``--on``)."""
    target = ctx.target
    other = Target(target.instance if target.instance is not None else target.cls, target.specs,
                   args=target.args, kwargs=target.kwargs, seed=seed, name=target.name, invocation=target.invocation,
                   constants=target.constants, on=target.home)
    module = other.pristine()
    assert module is not None
    return module


def _match_resized_state(module: nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """Give buffers the size they have in the saved state (a hidden state resized to the
    batch), so that loading tests what is saved, not the batch size."""
    for prefix, sub in module.named_modules():
        for key, buf in list(sub._buffers.items()):
            name = f"{prefix}.{key}" if prefix else key
            if buf is not None and name in saved and saved[name].shape != buf.shape:
                sub._buffers[key] = torch.empty_like(saved[name], device=buf.device, dtype=buf.dtype)

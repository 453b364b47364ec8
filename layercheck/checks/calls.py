"""Can the layer be called at all: signatures, initialize, predict, forward, and their agreement."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from layercheck._sdk_internal import (
    describe_shapes,
    first_batch_checkpoint,
    forward_is_random,
    hand_over_first_batch,
    share_predict,
)
from layercheck.numerics.recording import training_forward
from layercheck.numerics.reference import FLOAT32_READERS
from layercheck.sdk import (
    EXACT,
    Allowance,
    CheckFailed,
    CheckSkipped,
    Context,
    Outputs,
    Subject,
    Tolerance,
    assert_close,
    check,
    mismatch,
    modules_only,
)
from layercheck.target.building import has_uninitialized_parameters, initialize, initialize_hook
from layercheck.target.calling import signature_accepts
from layercheck.target.tensors import custom_backward_nodes, leaves_in

# Predict and forward of a layer whose behaviour does not depend on the mode are the same
# operations on the same values: only the train/eval switch of a submodule that ignores it
# separates them. The absolute part of the allowance is a tenth of the relative one.
_AGREE = Tolerance("float32", 1e-5, "relative difference between predict and forward outputs of a layer that "
                   "shows no reason to depend on the mode")


@check(
    "signatures",
    title="forward/predict take the layouts' inputs; hooks have usable signatures",
    matlab="functionSyntaxesAreCorrect",
    needs_subject=False,
)
def signatures(ctx: Context) -> str:
    """Inspects the call signatures without calling anything.

    A layer whose ``forward`` (or ``predict``) cannot take one tensor per layout, or whose
    ``initialize``/``reset_state`` hooks cannot be called as layercheck and users call them,
    fails at the first real use. Fix: change the signature, or give the spec the right
    inputs. A call that cannot take the inputs is the one cause of what follows: the checks that call
    the layer are skipped naming this one.
    """
    n = len(ctx.target.positional)
    keywords = [spec.name for spec in ctx.target.specs if spec.name is not None] + list(ctx.target.constants)
    cls: Any = ctx.target.cls
    problems: list[str] = []
    if ctx.target.kind == "function":
        if _overrides(cls, torch.autograd.Function, "forward") is None:
            problems.append(f"{cls.__name__} defines no forward")
        else:
            has_ctx = _overrides(cls, torch.autograd.Function, "setup_context") is None
            problems.append(signature_accepts(cls.forward, n, skip_first=has_ctx) or "")
        if _overrides(cls, torch.autograd.Function, "backward") is None and \
                _overrides(cls, torch.autograd.Function, "vjp") is None:
            problems.append(f"{cls.__name__} defines no backward")
        checked = ["forward", "backward"]
    elif ctx.target.kind in ("operator", "callable"):
        function = getattr(cls, "_init_fn", cls)  # a custom operator: the function it was defined from
        problems.append(signature_accepts(function, n, keywords=keywords) or "")
        checked = ["the operator" if ctx.target.kind == "operator" else "the function"]
    else:
        layer: Any = cls if ctx.target.instance is None else ctx.target.instance
        problems.append(signature_accepts(layer.forward, n, skip_first=isinstance(layer, type),
                                          keywords=keywords) or "")
        checked = ["forward"]
        for hook, count, named in (("predict", n, keywords), ("initialize", n, []), ("reset_state", 0, [])):
            fn = initialize_hook(layer) if hook == "initialize" else getattr(layer, hook, None)
            if callable(fn):
                problems.append(signature_accepts(fn, count, skip_first=isinstance(layer, type), keywords=named) or "")
                checked.append(hook)
    # forward (and a module's predict): when they cannot take the inputs, nothing can call the layer
    calls = [p for p in problems[:2 if ctx.target.kind == "module" else 1] if p]
    problems = [p for p in problems if p]
    if problems:
        hint = ""
        if calls:
            hint = (f". {n} positional input(s) given: one --layout per positional input (or one entry of the "
                    "spec's inputs:), --call-kwarg NAME=... for a keyword one")
        raise CheckFailed("; ".join(problems) + hint, inputs=n, blocking=bool(calls))
    return f"{n} input(s) accepted by {', '.join(checked)}"


@check(
    "initialize",
    title="initialize creates what the layer needs and keeps what is already set",
    matlab="initializeDoesNotChangeLearnablesWhenTheyAreNotEmpty",
    applies=modules_only("operations (autograd.Function, custom operators, functions) have no initialize hook"),
    needs_subject=False,
)
def initialize_keeps_values(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Calls ``initialize(*layouts)`` on a freshly constructed layer, then again.

    ``initialize`` (or a lazy module's first call) must leave no parameter uninitialised, and
    must not change parameters or state that are already set: a second call, like a call on
    a layer loaded from a checkpoint, must change nothing. Fix: guard each creation
    with ``if self.weight is None`` (or similar), and create every parameter there.
    """
    layer = ctx.target.at_home(ctx.target.construct())
    hook = initialize_hook(layer)
    lazy = has_uninitialized_parameters(layer)
    if not callable(hook) and not lazy:
        ctx.target.pristine()
        if ctx.target.first_call_initialises:  # Note [data-dependent initialisation] in target/building.py
            return ("no initialize hook: the first training call sets the parameters from the data (a data-dependent "
                    "initialisation, as Glow's ActNorm) and the second leaves them, so every check starts from the "
                    "layer after one training call on the generated inputs, as after a user's first batch", {})
        if callable(getattr(layer, "initialize", None)):
            raise CheckSkipped(f"{type(layer).__name__}.initialize takes no layout: it is the layer's own method, not "
                               "the initialize(*layouts) hook, and layercheck does not call it")
        raise CheckSkipped("the layer defines no initialize hook and is not lazy")
    before = _values(layer)
    initialize(layer, ctx.target, ctx.seed)
    if has_uninitialized_parameters(layer):
        names = [n for n, p in layer.named_parameters() if isinstance(p, nn.parameter.UninitializedParameter)]
        raise CheckFailed(f"parameters still uninitialised after initialize: {', '.join(names)}")
    _assert_unchanged(before, _values(layer), "initialize changed {name}, which was already set")
    created = sorted(set(_values(layer)) - set(before))
    if callable(hook):
        after_first = _values(layer)
        initialize(layer, ctx.target, ctx.seed + 1)
        _assert_unchanged(after_first, _values(layer), "a second initialize call changed {name}, which was already set")
    how = "initialize" if callable(hook) else "lazy first call"
    return f"{how} created {len(created)} tensor(s), changed nothing already set", {"created": created}


@check(
    "predict_runs",
    title="predict runs on generated inputs and returns tensors",
    matlab="predictDoesNotError",
    requires=("signatures",),
)
def predict_runs(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Calls the prediction path (eval mode, ``predict`` if defined, no grad) on inputs
    generated for the layouts. A layer that raises here cannot be used for inference.
    Fix: make predict (or forward in eval mode under ``torch.no_grad()``) take the layouts'
    inputs (the traceback shows where it raised)."""
    subject = ctx.fresh()
    initial = first_batch_checkpoint(ctx, subject)  # Note [the layout's first batch] in support/runs.py
    out = _expect_tensors(subject.predict(subject.inputs()), "predict")
    share_predict(ctx, subject, out.tensors)  # the checks that read PREDICT need not call it again
    hand_over_first_batch(ctx, subject, initial, out.tensors)
    return f"outputs {', '.join(describe_shapes(out.tensors))}", {"outputs": describe_shapes(out.tensors)}


@check(
    "forward_runs",
    title="the training forward runs and returns tensors",
    matlab="forwardDoesNotError",
    requires=("signatures",),
)
def forward_runs(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Calls the training path (train mode, with grad) on the generated inputs, and notes
    whether the autograd graph contains a hand-written backward (an autograd.Function).
    Fix: make forward take the layouts' inputs in train mode (the traceback shows where it
    raised)."""
    # the float32 run's forward where that run follows (Note [the training forward handed over]
    # in numerics/recording.py): the same call, not made twice
    out = _expect_tensors(training_forward(ctx, FLOAT32_READERS), "forward")
    custom = custom_backward_nodes(out.tensors)
    ctx.fact("custom_backward", bool(custom))
    message = f"outputs {', '.join(describe_shapes(out.tensors))}"
    if custom:
        message += f"; hand-written backward: {', '.join(custom)}"
    return message, {"outputs": describe_shapes(out.tensors), "custom_backward": custom}


@check(
    "forward_predict_agree",
    title="forward and predict agree in number, size, dtype (and values unless mode-dependent)",
    matlab="forwardPredictAreConsistentInSize",
    requires=("predict_runs", "forward_runs"),
    tolerances=(_AGREE,),
    any_batch=True,
)
def forward_predict_agree(ctx: Context) -> str:
    """Compares the outputs of predict and of the training forward on the same inputs.

    Number, sizes and dtypes must always agree: a network built from the layer breaks when
    they do not. Values must agree too unless the layer's behaviour legitimately depends on
    the mode (dropout, batch statistics, a separate ``predict``, a forward that reads
    ``self.training``). Differing values with none of these reasons point at a bug in one path.
    Fix: compute the same thing in both paths (one function called by ``forward`` and
    ``predict``); a layer meant to differ by mode skips this check (``--skip forward_predict_agree``).
    """
    subject = ctx.fresh()
    # fresh inputs for each call: a layer that writes into its input is input_unchanged's to report
    predicted_out = Outputs.of(subject.predict(subject.inputs()))
    forwarded_out = Outputs.of(subject.forward(subject.inputs()))
    predicted, forwarded = predicted_out.tensors, [t.detach() for t in forwarded_out.tensors]
    extra = _training_only(predicted_out.raw, forwarded_out.raw)
    if extra:  # an auxiliary loss or the indices kept, which predict returns as None
        forwarded = [t for j, t in enumerate(forwarded) if j not in extra]
    if len(predicted) != len(forwarded):
        raise CheckFailed(
            f"predict returned {len(predicted)} tensor(s), forward {len(forwarded)}",
            predict=describe_shapes(predicted), forward=describe_shapes(forwarded),
        )
    shortened: list[str] = []  # token dropping: outputs the random training forward makes shorter
    for i, (p, f) in enumerate(zip(predicted, forwarded)):
        if p.shape != f.shape or p.dtype != f.dtype:
            dims = _shortened_dims(ctx, p, f)
            if dims and forward_is_random(ctx):
                along = ", ".join(f"{d} ({p.shape[d]} -> {f.shape[d]})" for d in dims)
                shortened.append(f"output {i} along dim {along}")
                continue
            raise CheckFailed(
                f"forward and predict return output {i} in another size or dtype: predict gives "
                f"{describe_shapes([p])[0]}, forward {describe_shapes([f])[0]}",
                output=i, predict=describe_shapes([p])[0], forward=describe_shapes([f])[0],
            )
    also = (f"; forward also returns {len(extra)} tensor(s) where predict returns None (computed in training "
            f"only: output(s) {', '.join(map(str, extra))} of forward's)" if extra else "")
    if shortened:
        # Values cannot be compared entry by entry once entries are dropped at random.
        return (f"{len(predicted)} output(s) agree in number and dtype; the training forward is random and drops "
                f"entries (token dropping, as in PatchDropout): {'; '.join(shortened)}{also}")
    rtol = ctx.tolerance(torch.float32)
    allowed = Allowance(rtol, rtol / 10)
    differing = [i for i, (p, f) in enumerate(zip(predicted, forwarded))
                 if (mismatch(p, f, allowed) is not None if p.is_floating_point() else not torch.equal(p, f))]
    if not differing:
        return f"{len(predicted)} output(s) agree in size, dtype and value{also}"
    reason = _mode_dependence(ctx, subject)
    if reason is not None:
        return f"{len(predicted)} output(s) agree in size and dtype; values differ as expected: {reason}{also}"
    readers = [type(sub).__name__ for sub in (subject.module.modules() if subject.module is not None else ())
               if not type(sub).__module__.startswith("torch.") and _reads_training(type(sub))]
    if readers and all(_auxiliary_loss(predicted[i]) for i in differing) and len(differing) < len(predicted):
        # a quantiser's commitment loss, a mixture of experts' balancing loss: computed when
        # training, returned as zero (or not computed) otherwise
        shown = ", ".join(f"output {i}" for i in differing)
        return (f"{len(predicted)} output(s) agree in size and dtype, and in value but for {shown}: a scalar (or a "
                f"few zeros in predict) {readers[0]}.forward computes in training only (it reads self.training), "
                "an auxiliary loss")
    why = ("The layer shows no reason to depend on the mode (it draws no random numbers, changes no state and "
           "reads no self.training)" if not readers else
           f"{readers[0]}.forward reads self.training, but its training forward draws no random numbers and "
           "changes no state: a branch taken in one mode only changes the result (a mask or a term applied in "
           "training only?), which is intended only for a layer meant to differ by mode (label smoothing, an "
           "auxiliary term)")
    try:
        assert_close(predicted, forwarded, what="forward and predict disagree", allowance=allowed,
                     labels=("predict", "forward"))
    except CheckFailed as exc:
        raise CheckFailed(f"{exc.message}. {why}", **exc.details) from None
    raise CheckFailed("forward and predict differ")  # unreachable: assert_close raised


# -- helpers ----------------------------------------------------------------------------------

AUXILIARY_ELEMENTS = 64  # at most this many: one loss per quantiser of a residual stack, not a batch's outputs


def _auxiliary_loss(predicted: torch.Tensor) -> bool:
    """Whether a predict output that differs from forward's looks like an auxiliary loss: a
    floating scalar, or a few floating zeros (one per quantiser of a residual stack)."""
    if not predicted.is_floating_point():
        return False
    return predicted.dim() == 0 or (predicted.numel() <= AUXILIARY_ELEMENTS and not bool(predicted.any()))


def _training_only(predicted: Any, forwarded: Any) -> list[int]:
    """The positions, among forward's tensors, of those where predict's result has None in the
    same place of the same structure (``return x, (aux if self.training else None)``); empty
    when the structures differ in any other way."""
    p_leaves, f_leaves = leaves_in(predicted), leaves_in(forwarded)
    if len(p_leaves) != len(f_leaves):
        return []
    extra, position = [], 0
    for p, f in zip(p_leaves, f_leaves):
        if isinstance(f, torch.Tensor):
            if p is None:
                extra.append(position)
            elif not isinstance(p, torch.Tensor):
                return []
            position += 1
        elif isinstance(p, torch.Tensor):
            return []
    return extra


def _shortened_dims(ctx: Context, predicted: torch.Tensor, forwarded: torch.Tensor) -> list[int]:
    """The dimensions along which the training output is shorter than predict's, when that is
    all that differs and none of them is the batch's: the shape a layer that drops tokens (or
    patches, or time steps) at random in training gives. Empty otherwise."""
    if predicted.dtype != forwarded.dtype or predicted.dim() != forwarded.dim():
        return []
    batch = ctx.layouts[0].batch_dim if ctx.layouts else None
    dims = [d for d, (a, b) in enumerate(zip(predicted.shape, forwarded.shape)) if a != b]
    if batch in dims or any(forwarded.shape[d] > predicted.shape[d] for d in dims):
        return []
    return dims


def _mode_dependence(ctx: Context, subject: Subject) -> str | None:
    """Why predict and forward may legitimately differ for this layer, or None."""
    if subject.has_predict:
        return "the layer defines a separate predict"
    module = subject.module
    if module is None:
        return None
    for name, sub in module.named_modules():
        if isinstance(sub, nn.modules.batchnorm._NormBase) and sub.track_running_stats:
            return f"{name or 'the layer'} ({type(sub).__name__}) normalises with batch statistics in training"
        if isinstance(sub, nn.modules.dropout._DropoutNd) and sub.p > 0:
            return f"{name or 'the layer'} ({type(sub).__name__}) drops out in training"
        if isinstance(sub, (nn.MultiheadAttention, nn.RNNBase)) and float(getattr(sub, "dropout", 0) or 0) > 0:
            return f"{name or 'the layer'} ({type(sub).__name__}) has dropout"
    fresh = ctx.fresh()
    assert fresh.module is not None
    inputs = fresh.inputs()
    start = fresh.checkpoint()
    # A parameter the training forward writes (running statistics kept in a frozen parameter:
    # train_step's to report) is state here too.
    weights = {name: p.detach().clone() for name, p in fresh.module.named_parameters()}
    a = Outputs.of(fresh.forward(inputs)).tensors
    if fresh.drew_random:
        return "the training forward is random (it draws random numbers: dropout-like)"
    changed = fresh.changes(start) + [f"parameter {name!r}" for name, p in fresh.module.named_parameters()
                                      if name in weights and not torch.equal(p.detach(), weights[name])]
    if changed:
        return f"the training forward updates the layer's state ({', '.join(changed[:3])})"
    fresh.rewind(start)
    b = Outputs.of(fresh.forward(inputs, rng_seed=ctx.seed + 1)).tensors
    if any(not torch.equal(x.detach(), y.detach()) for x, y in zip(a, b)):
        return "the training forward is random (dropout-like)"
    return None


def _reads_training(cls: type) -> bool:
    for klass in cls.__mro__:
        if klass is nn.Module or klass.__module__.startswith("torch."):
            break
        for attr in ("forward", "__call__"):
            fn = vars(klass).get(attr)
            if fn is None:
                continue
            try:
                if ".training" in inspect.getsource(fn):
                    return True
            except (OSError, TypeError):
                continue
    return False


def _expect_tensors(raw: Any, phase: str) -> Outputs:
    out = Outputs.of(raw)
    if not out.tensors:
        raise CheckFailed(f"{phase} returned no tensor (got {type(raw).__name__})", blocking=True,
                          returned=type(raw).__name__)
    return out


def _values(layer: nn.Module) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {f"parameter {n}": p for n, p in layer.named_parameters()}
    tensors.update({f"state {n}": b for n, b in layer.named_buffers()})
    return {
        k: v.detach().clone() for k, v in tensors.items() if not is_lazy(v)
    }


def _assert_unchanged(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], template: str) -> None:
    for name, old in before.items():
        what = template.format(name=repr(name))
        if name not in after:
            raise CheckFailed(f"{what}: it is gone", tensor=name)
        new = after[name]
        if new.shape != old.shape or new.dtype != old.dtype:
            raise CheckFailed(f"{what}: {describe_shapes([old])[0]} became {describe_shapes([new])[0]}", tensor=name)
        found = mismatch(old, new, EXACT)
        if found is not None:
            raise CheckFailed(
                f"{what}: at index {tuple(found['index'])} {found['expected']:.6g} became {found['actual']:.6g}",
                tensor=name, **found,
            )


def _overrides(cls: type, base: type, name: str) -> Any:
    """The attribute ``name`` if ``cls`` defines it itself (not inherited from ``base``)."""
    for klass in cls.__mro__:
        if klass is base:
            return None
        if name in vars(klass):
            return vars(klass)[name]
    return None

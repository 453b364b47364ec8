"""The layer under PyTorch's transforms (opt-in): mixed precision with ``torch.autocast``, and
``torch.func`` — ``functional_call``, ``vmap`` over the batch and per-sample gradients with
``vmap(grad(...))``. A custom ``autograd.Function`` needs something of its own for each: the
``custom_fwd``/``custom_bwd`` decorators for autocast, ``setup_context`` and a vmap rule for
torch.func."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import torch

from layercheck._sdk_internal import (
    assert_same_unless_random,
    cotangents,
    custom_functions,
    failing,
    forward_is_random,
    output_names,
    path_allowance,
    path_tolerances,
    predict_is_random,
    scaled_allowance,
    user_trace,
)
from layercheck.sdk import (
    FORWARD,
    PREDICT,
    Allowance,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    Outputs,
    Subject,
    Tolerance,
    accelerators,
    assert_close,
    check,
    dtype_name,
    identical,
    largest,
    needs_batch,
    reference_forward,
    reference_predict,
    seeded,
)
from layercheck.target.calling import backpropagate

Explain = Callable[[], tuple[str, str]]
"""What leads a failure (the Functions that lack what a transform needs) and what to do about it."""


# -- autocast ---------------------------------------------------------------------------------

# The dtype torch.autocast uses by default on each device type.
_AUTOCAST_DTYPE = {"cpu": torch.bfloat16, "cuda": torch.float16, "mps": torch.float16}
_VARIANTS = ("cpu", *dict.fromkeys(torch.device(name).type for name in accelerators()))


@check(
    "autocast",
    title="under torch.autocast the layer runs, keeps float32 parameters and gradients, and agrees with float32",
    default=False,
    uses=(PREDICT, FORWARD),
    variants=_VARIANTS,
    tolerances=(
        Tolerance("bfloat16", 5e-2, "relative difference between outputs under bfloat16 autocast and in float32 "
                                    "(the absolute part scaled to the output's largest magnitude)"),
        Tolerance("float16", 1e-2, "relative difference between outputs under float16 autocast and in float32 "
                                   "(the absolute part scaled to the output's largest magnitude)"),
    ),
)
def autocast(ctx: Context) -> str:
    """Runs predict and the training forward of a float32 layer on float32 inputs inside
    ``torch.autocast`` (the variant's device type with its default dtype: bfloat16 on the CPU,
    float16 on CUDA and MPS), then backward outside it, as mixed-precision training does. Every
    floating output must be float32 or the autocast dtype, parameters and buffers must keep
    their dtype, every gradient must have the dtype of its input or parameter, and the outputs
    must agree with the float32 runs within the autocast dtype's tolerance.

    Mixed precision is how large models train: a layer that raises under autocast, casts its own
    parameters, returns float16 under bfloat16 autocast or loses its accuracy there cannot be used
    in it. The usual culprit is a custom ``autograd.Function`` whose forward computes in the
    autocast dtype (its matmuls are cast) while its backward runs outside autocast on a mix of
    dtypes. Fix: decorate its forward with ``@torch.amp.custom_fwd(device_type=...)`` (with
    ``cast_inputs=torch.float32`` to run it in float32) and its backward with
    ``@torch.amp.custom_bwd(device_type=...)``; keep parameters float32 (autocast casts copies).
    """
    device_type = ctx.variant
    home = ctx.target.home
    if home.type != "cpu" and device_type != home.type:
        raise CheckSkipped(f"the layer is checked on {home} (--on): autocast is checked there "
                           f"(autocast:{home.type}), not on {device_type}")
    dtype = _AUTOCAST_DTYPE[device_type]
    device = home if device_type == home.type else next(a for a in accelerators() if a.startswith(device_type))
    where = f"under torch.autocast({device_type!r}, dtype=torch.{dtype_name(dtype)})"
    allowed = {torch.float32, dtype}
    explain = functools.partial(_amp_hint, ctx, device_type)  # asked only when something fails
    subject = ctx.fresh(device=device)
    before = _dtypes(subject)
    with _autocast_call(where, explain, device_type, dtype):
        predicted = Outputs.of(subject.predict(subject.inputs())).tensors
    _assert_types(where, "predict", predicted, allowed, subject, before)
    subject = ctx.fresh(device=device)
    inputs = subject.inputs(requires_grad=True)
    with _autocast_call(where, explain, device_type, dtype):
        forwarded = Outputs.of(subject.forward(inputs)).tensors
    _assert_types(where, "forward", forwarded, allowed, subject, before)
    differentiable = [y for y in forwarded if y.is_floating_point() and y.requires_grad]
    leaves = [*inputs, *(p for _, p in subject.parameters())]
    names = [*(f"input {i}" for i in range(len(inputs))), *(f"parameter {n!r}" for n, _ in subject.parameters())]
    with _autocast_call(f"after a forward {where}", explain, device_type, dtype, enabled=False), \
            seeded(ctx.seed, subject.device):
        grads = backpropagate(list(zip(differentiable, cotangents(ctx, differentiable))), leaves) \
            if differentiable else []
    for name, leaf, grad in zip(names, leaves, grads):
        if grad is not None and grad.dtype != leaf.dtype:
            lead, hint = explain()
            raise CheckFailed(f"{lead}after a forward {where}, the gradient of {name} is {dtype_name(grad.dtype)}, not "
                              f"{dtype_name(leaf.dtype)} like {name}: an optimizer step would mix types{hint}",
                              tensor=f"gradient of {name}", actual=dtype_name(grad.dtype))
    random = _assert_agree(ctx, where, dtype, predicted, forwarded)
    note = f" (values of {' and '.join(random)} differ: the layer draws random numbers)" if random else ""
    return (f"{where}: predict and forward give {', '.join(sorted({dtype_name(t.dtype) for t in forwarded}))} "
            f"outputs within {ctx.tolerance(dtype):g} of float32{note}, parameters keep their dtype, and "
            f"{sum(g is not None for g in grads)} gradient(s) have their tensor's dtype")


def _dtypes(subject: Subject) -> dict[str, torch.dtype]:
    if subject.module is None:
        return {}
    tensors = [*(("parameter", n, p) for n, p in subject.module.named_parameters()),
               *(("state", n, b) for n, b in subject.module.named_buffers())]
    return {f"{kind} {name!r}": t.dtype for kind, name, t in tensors}


def _assert_types(where: str, mode: str, outputs: Sequence[torch.Tensor], allowed: set[torch.dtype],
                  subject: Subject, before: dict[str, torch.dtype]) -> None:
    for name, out in zip(output_names(outputs), outputs):
        if out.is_floating_point() and out.dtype not in allowed:
            raise CheckFailed(f"{where}, {mode} {name} is {dtype_name(out.dtype)}: autocast gives "
                              f"{' or '.join(sorted(dtype_name(d) for d in allowed))} (a hard-coded .half(), .double() "
                              "or dtype=?). Derive types from the input, or let autocast choose",
                              tensor=name, mode=mode, actual=dtype_name(out.dtype))
    for name, dtype in _dtypes(subject).items():
        if before.get(name, dtype) != dtype:
            why = ("autocast casts copies for its operations; the layer must not cast its own parameters (the "
                   "optimizer then steps in low precision)" if name.startswith("parameter") else
                   "a state assigned from a result computed under autocast takes the autocast dtype, and breaks the "
                   "next call outside autocast; store it in its own dtype (self.h = h.to(self.h.dtype))")
            raise CheckFailed(f"{where}, {mode} changed {name} from {dtype_name(before[name])} to {dtype_name(dtype)}: "
                              f"{why}", tensor=name, mode=mode)


def _assert_agree(ctx: Context, where: str, dtype: torch.dtype, predicted: list[torch.Tensor],
                  forwarded: list[torch.Tensor]) -> list[str]:
    """Floating outputs against the shared float32 runs (integer outputs, an argmax, may flip
    where low precision ties values: only their sizes are compared); returns the modes whose
    values were not compared because the layer draws random numbers."""

    def allowance(name: str, expected: torch.Tensor) -> Allowance:
        return scaled_allowance(expected, ctx.tolerance(dtype))

    random = []
    for mode, reference, got, is_random in (
        ("predict", reference_predict(ctx).outputs, predicted, lambda: predict_is_random(ctx)),
        ("forward", reference_forward(ctx).outputs, forwarded, lambda: forward_is_random(ctx)),
    ):
        names = output_names(reference)
        pairs = [(n, e, a) for n, e, a in zip(names, reference, got) if e.is_floating_point()]
        if len(got) != len(reference):
            raise CheckFailed(f"{where}, {mode} gives {len(got)} output(s), in float32 {len(reference)}", mode=mode)
        if not assert_same_unless_random(
                [e for _, e, _ in pairs], [a.detach().to(e.dtype).cpu() for _, e, a in pairs], random=is_random,
                names=[n for n, _, _ in pairs], allowance=allowance, labels=("float32", "autocast"),
                what=f"{mode} {where} vs in float32"):
            random.append(mode)
    return random


def _amp_hint(ctx: Context, device_type: str) -> tuple[str, str]:
    """What leads a failure, and what to do, about the user's Functions that lack the autocast
    decorators, or have them for another device type (found from the graph of one ordinary
    training forward)."""
    devices = {cls: _amp_device(cls) for cls in _functions(ctx)}
    lacking = [cls.__name__ for cls, device in devices.items() if device is None]
    elsewhere = sorted({device for device in devices.values() if device not in (None, device_type)})
    decorate = (f"Fix: decorate forward with @torch.amp.custom_fwd(device_type={device_type!r}) "
                f"(cast_inputs=torch.float32 runs it in float32) and backward with "
                f"@torch.amp.custom_bwd(device_type={device_type!r})")
    if lacking:
        return (f"{', '.join(lacking)} (torch.autograd.Function) has no @torch.amp.custom_fwd/@torch.amp.custom_bwd: ",
                ". Under autocast its forward computes in the autocast dtype where autocast casts (matmul, linear, "
                f"conv) and its backward runs outside autocast on a mix of dtypes. {decorate}")
    if elsewhere:
        names = ", ".join(cls.__name__ for cls, device in devices.items() if device in elsewhere)
        return (f"{names} (torch.autograd.Function) has @torch.amp.custom_fwd/@torch.amp.custom_bwd for "
                f"device_type={' and '.join(map(repr, elsewhere))}, not {device_type!r}: ",
                f". The decorators act on their own device type's autocast only: under autocast({device_type!r}) "
                "the forward computes in the autocast dtype where autocast casts (matmul, linear, conv) and the "
                f"backward runs outside autocast on a mix of dtypes. Fix: for a layer that trains on {device_type} "
                f"too, {decorate.removeprefix('Fix: ')} (one Function per device type, chosen by the input's "
                "device, where it must run on several)")
    return "", ""


def _amp_device(cls: type[torch.autograd.Function]) -> str | None:
    """The device type a Function's ``@torch.amp.custom_fwd``/``custom_bwd`` are for; None
    without both."""
    devices = []
    for method, wrapper in ((cls.forward, "decorate_fwd"), (cls.backward, "decorate_bwd")):
        code = getattr(method, "__code__", None)
        if code is None or code.co_name != wrapper:
            return None
        devices.append(inspect.getclosurevars(method).nonlocals.get("device_type"))
    return devices[0] if devices[0] == devices[1] and isinstance(devices[0], str) else None


@contextlib.contextmanager
def _failing(what: str, explain: Explain) -> Iterator[None]:
    """The layer raising (or torch.func around it) is this check's failure, led by the Functions
    that lack what the transform needs, with what to do."""
    try:
        yield
    except LayerRaised as exc:
        lead, advice = explain()
        raise CheckFailed(f"{lead}{what}, {str(exc).rstrip('.')}{_batching_rule(exc.exc) or advice}", phase=exc.phase,
                          traceback=exc.trace) from exc
    except (CheckFailed, CheckSkipped):
        raise
    except Exception as exc:  # torch.func raising outside the layer's own call (the grad transform)
        lead, advice = explain()
        raise CheckFailed(f"{lead}{what} raised {type(exc).__name__}: {str(exc).rstrip('.')}"
                          f"{_batching_rule(exc) or advice}",
                          traceback=user_trace(exc)) from exc


def _batching_rule(exc: BaseException) -> str:
    """torch's own limit: an operation without a vmap batching rule."""
    if "Batching rule not implemented" not in str(exc):
        return ""
    return (". torch has no vmap batching rule for that operation, so torch.func cannot map the layer over "
            "observations: a limit of torch, not a mistake in the layer's code; compute per-sample results another "
            "way (a loop, or hooks as Opacus does), or leave vmap off for this layer")


def _functions(ctx: Context) -> list[type[torch.autograd.Function]]:
    """The user's autograd.Function classes the layer calls, from one ordinary training forward."""
    subject = ctx.fresh()
    try:
        return custom_functions(Outputs.of(subject.forward(subject.inputs(requires_grad=True))).tensors)
    except LayerRaised:
        return []


@contextlib.contextmanager
def _autocast_call(what: str, explain: Explain, device_type: str, dtype: torch.dtype, *,
                   enabled: bool = True) -> Iterator[None]:
    """A block under autocast (``enabled``) whose raising is this check's failure or, for an
    operation without a kernel for ``dtype``, a skip."""
    with _failing(what, explain), _unsupported_skipped(dtype, device_type), \
            torch.autocast(device_type, dtype=dtype, enabled=enabled):
        yield


@contextlib.contextmanager
def _unsupported_skipped(dtype: torch.dtype, device_type: str) -> Iterator[None]:
    """An operation without a kernel for the autocast dtype on this device is torch's limit, not the
    layer's fault: a skip with the reason (as the dtype check does for float16 on the CPU)."""
    try:
        yield
    except LayerRaised as exc:
        text = str(exc.exc)
        if ("Half" in text or "BFloat16" in text) and any(
                phrase in text.lower() for phrase in ("not implemented", "not supported", "unsupported")):
            raise CheckSkipped(f"an operation the layer uses has no {dtype_name(dtype)} kernel on {device_type} "
                               f"({exc}); run this variant where it has one", applies=True) from exc
        raise


# -- vmap -------------------------------------------------------------------------------------

_PER_SAMPLE = 3  # observations whose per-sample gradients are compared with a loop (first, middle, last)


@check(
    "vmap",
    title="torch.func.functional_call and torch.vmap over the batch reproduce the layer; per-sample gradients agree",
    default=False,
    requires=("forward_runs", "backward_runs"),
    uses=(PREDICT, FORWARD),  # the rounding floors of the outputs and of the gradients
    applies=needs_batch,
    tolerances=path_tolerances("relative difference between the batched call and vmap over its observations, "
                               "between functional_call and the layer, and between per-sample gradients from "
                               "vmap(grad(...)) and from single observations"),
    any_batch=True,
)
def vmap(ctx: Context) -> str:
    """In eval mode (as per-sample gradients are taken): ``torch.func.functional_call`` with other
    parameter values must give what the layer gives with those values loaded; ``torch.vmap`` over
    the B dimension of the inputs — each observation a batch of one inside, as in PyTorch's
    per-sample-gradient tutorial — must give the batched call's outputs; and per-sample gradients
    of every learnable parameter and input from ``vmap(grad(...))`` must equal the gradients of a
    few observations run alone. An operation's inputs without B are passed whole to each
    observation.

    ``torch.func`` is how per-sample gradients (differential privacy), model ensembles, meta-learning
    and Jacobians are computed. A layer that reads a parameter through a reference kept elsewhere
    (a list of its weights) ignores the values functional_call gives it; one that mixes
    observations, reads values in Python (``.item()``, ``if x.sum() > 0``) or calls a custom
    ``autograd.Function`` without a vmap rule cannot be vmapped. Fix: read parameters from their
    attributes at call time; give each Function ``setup_context`` (forward without ``ctx``) and
    ``generate_vmap_rule = True`` (or a ``vmap`` staticmethod).
    """
    subject = ctx.fresh()
    if subject.module is not None:
        subject.module.eval()
    inputs = subject.inputs()
    batch_dims = [layout.batch_dim for layout in ctx.layouts]
    size = next(layout.size[b] for layout, b in zip(ctx.layouts, batch_dims) if b is not None)
    if size < 2:
        raise CheckSkipped("the batch has one observation: vmap over it shows nothing")
    explain = functools.partial(_vmap_hint, ctx)  # asked only when something fails
    called = _functional_call_agrees(ctx, inputs) if subject.module is not None else ""
    params = {n: p.detach() for n, p in subject.parameters()}
    constants = _constants(subject)
    call = _caller(subject, constants)
    with torch.no_grad(), failing("in eval mode"):
        batched = call(params, inputs)
        random = not identical(batched, call(params, inputs, seed=ctx.seed + 1))
    # a layer that draws random numbers in its eval forward gets its own draws per observation,
    # as in a batch, and is compared in size only
    randomness = "different" if random else "error"
    out_dims = _output_batch_dims(call, params, inputs, batch_dims, batched, size)
    per_sample = _per_sample(call, batch_dims, out_dims)
    with _failing("torch.vmap over the batch", explain), torch.no_grad():
        mapped = torch.func.vmap(lambda *xs: per_sample(params, xs), in_dims=tuple(batch_dims),
                                 out_dims=tuple(out_dims), randomness=randomness)(*inputs)
    assert_same_unless_random(batched, list(mapped), random=lambda: random, names=output_names(batched),
                              labels=("batched call", "vmap"), allowance=path_allowance(ctx, PREDICT),
                              what="torch.vmap over the observations (each a batch of one) vs the batched call, in "
                                   "eval mode")
    with _failing("vmap(grad(...)) for per-sample gradients", explain):
        compared = _per_sample_gradients(ctx, subject, call, params, inputs, batch_dims, batched, out_dims,
                                         randomness)
    note = " (in size only: the layer's eval forward draws random numbers)" if random else ""
    return (f"{called}torch.vmap over {size} observations reproduces the batched call, and per-sample gradients "
            f"from vmap(grad(...)) agree with {compared}{note}")


def _constants(subject: Subject) -> dict[str, torch.Tensor]:
    """Buffers and frozen parameters: what functional_call is given unchanged."""
    if subject.module is None:
        return {}
    learnable = {n for n, _ in subject.parameters()}
    frozen = {n: p.detach() for n, p in subject.module.named_parameters() if n not in learnable}
    return {**frozen, **dict(subject.module.named_buffers())}


class Call(Protocol):
    def __call__(self, params: dict[str, torch.Tensor], inputs: Sequence[torch.Tensor], *,
                 seed: int | None = None) -> list[torch.Tensor]: ...


def _caller(subject: Subject, constants: dict[str, torch.Tensor]) -> Call:
    """The layer as a function of its learnable parameters and inputs: its tensor outputs."""

    def call(params: dict[str, torch.Tensor], inputs: Sequence[torch.Tensor], *,
             seed: int | None = None) -> list[torch.Tensor]:
        with seeded(subject.target.seed if seed is None else seed):
            try:
                if subject.module is None:
                    raw = subject.target.call(*inputs)
                else:
                    raw = torch.func.functional_call(subject.module, {**params, **constants}, tuple(inputs))
            except Exception as exc:
                raise LayerRaised("eval forward", exc, user_trace(exc)) from exc
        return Outputs.of(raw).tensors

    return call


def _functional_call_agrees(ctx: Context, inputs: list[torch.Tensor]) -> str:
    """functional_call with nudged parameters vs a fresh layer with them loaded."""
    subject, loaded = ctx.fresh(), ctx.fresh()
    assert subject.module is not None and loaded.module is not None
    gen = torch.Generator().manual_seed(ctx.seed + 97)
    nudged = {}
    for name, p in subject.parameters():
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.device, p.dtype)
        nudged[name] = p.detach() + noise * 0.1 * max(largest(p), 1e-2)
    with torch.no_grad():
        for name, p in loaded.parameters():
            p.copy_(nudged[name])
    subject.module.eval()
    loaded.module.eval()
    with torch.no_grad(), failing("in eval mode"), seeded(ctx.seed):
        expected = Outputs.of(loaded.module(*inputs)).tensors
        actual = _caller(subject, _constants(subject))(nudged, inputs)
    try:
        assert_close(expected, actual, names=output_names(expected), allowance=path_allowance(ctx, PREDICT),
                     labels=("the layer with them loaded", "functional_call"),
                     what="torch.func.functional_call with other parameter values vs the layer with those values "
                          "loaded")
    except CheckFailed as exc:
        raise CheckFailed(f"{exc.message}. functional_call replaces the parameters' attributes for the call: the layer "
                          "reads a parameter through a reference kept elsewhere (a list or dict of its weights, a "
                          "tensor derived in __init__). Fix: read parameters from their attributes (self.weight) at "
                          "call time", **exc.details) from None
    if not nudged:
        return "functional_call (no learnable parameter to vary) matches the layer; "
    return f"functional_call with other values of {len(nudged)} parameter(s) matches the layer loaded with them; "


def _output_batch_dims(call: Call, params: dict[str, torch.Tensor], inputs: list[torch.Tensor],
                       batch_dims: list[int | None], batched: list[torch.Tensor], size: int) -> list[int]:
    """Each output's batch dimension: where a batch of one differs from the batch."""
    single = [x.narrow(b, 0, 1) if b is not None else x for x, b in zip(inputs, batch_dims)]
    with torch.no_grad(), failing("with a batch of one observation"):
        one = call(params, single)
    dims = []
    for k, (big, small) in enumerate(zip(batched, one)):
        found = [d for d in range(big.dim()) if big.dim() == small.dim() and big.shape[d] == size
                 and small.shape[d] == 1 and big.shape[:d] + big.shape[d + 1:] == small.shape[:d] + small.shape[d + 1:]]
        if len(found) != 1:
            raise CheckSkipped(f"output {k} ({tuple(big.shape)}, {tuple(small.shape)} for one observation) has no "
                               "single batch dimension to vmap over (observations reports outputs that mix "
                               "observations)", applies=True)
        dims.append(found[0])
    return dims


def _per_sample(call: Call, batch_dims: list[int | None],
                out_dims: list[int]) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The layer on one observation (what vmap maps): each batched input made a batch of one, each
    output's batch dimension of one taken out again."""

    def one(params: dict[str, torch.Tensor], xs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        batch = [x.unsqueeze(b) if b is not None else x for x, b in zip(xs, batch_dims)]
        return tuple(y.squeeze(d) for y, d in zip(call(params, batch), out_dims))

    return one


def _per_sample_gradients(ctx: Context, subject: Subject, call: Call, params: dict[str, torch.Tensor],
                          inputs: list[torch.Tensor], batch_dims: list[int | None], batched: list[torch.Tensor],
                          out_dims: list[int], randomness: str) -> str:
    """vmap(grad(<w_i, y_i>)) over the observations against autograd on a few observations alone,
    each from the state the layer had before (a recurrent state is not carried from one to the next)."""
    start = subject.checkpoint()
    floating = [k for k, y in enumerate(batched) if y.is_floating_point()]
    differentiable = [i for i, x in enumerate(inputs) if x.is_floating_point()]
    ws = cotangents(ctx, [batched[k] for k in floating])
    per_sample = _per_sample(call, batch_dims, out_dims)

    def loss(p: dict[str, torch.Tensor], xs: tuple[torch.Tensor, ...], w: tuple[torch.Tensor, ...]) -> torch.Tensor:
        outputs = per_sample(p, xs)
        return sum(((outputs[k] * wk).sum() for k, wk in zip(floating, w)), torch.zeros(()))

    in_dims = (None, tuple(batch_dims), tuple(out_dims[k] for k in floating))
    grads_p, grads_x = torch.func.vmap(torch.func.grad(loss, argnums=(0, 1)), in_dims=in_dims,
                                       randomness=randomness)(params, tuple(inputs), tuple(ws))
    size = batched[floating[0]].shape[out_dims[floating[0]]] if floating else 0
    picked = sorted({0, size // 2, size - 1})[:_PER_SAMPLE]
    compared = 0
    for i in picked:
        subject.rewind(start)
        alone = _alone(subject, inputs, batch_dims, [(ws[j], out_dims[k]) for j, k in enumerate(floating)], floating,
                       i)
        # named as the shared run names them, so that a gradient zero by cancellation (a bias
        # before an instance normalisation) gets the rounding floor measured there
        names, expected, actual = [], [], []
        for name, grad in zip(params, alone[:len(params)]):
            names.append(f"gradient of parameter {name!r}")
            expected.append(grad if grad is not None else torch.zeros_like(params[name]))
            actual.append(grads_p[name][i])
        for j in differentiable:
            grad = alone[len(params) + j]
            b = batch_dims[j]
            want = torch.zeros_like(inputs[j].narrow(b, 0, 1) if b is not None else inputs[j]) if grad is None else grad
            names.append(f"gradient of input {j}")
            expected.append(want.squeeze(b) if b is not None else want)
            actual.append(grads_x[j][i])
        assert_same_unless_random(expected, actual, random=lambda: randomness != "error", names=names,
                                  labels=("observation alone", "vmap(grad)"), allowance=path_allowance(ctx, FORWARD),
                                  what=f"per-sample gradients of observation {i} from vmap(grad(...)) vs the "
                                       "observation alone")
        compared += len(names)
    subject.rewind(start)
    return f"{len(picked)} observation(s) run alone ({compared} gradient(s))"


def _alone(subject: Subject, inputs: list[torch.Tensor], batch_dims: list[int | None],
           ws: list[tuple[torch.Tensor, int]], floating: list[int], i: int) -> list[torch.Tensor | None]:
    """Gradients of <w_i, y_i> of parameters, then inputs, for observation ``i`` run alone (eval mode)."""
    assert subject.module is None or not subject.module.training
    xs = [(x.narrow(b, i, 1) if b is not None else x).detach().clone().requires_grad_(x.is_floating_point())
          for x, b in zip(inputs, batch_dims)]
    params = [p for _, p in subject.parameters()]
    with seeded(subject.target.seed), failing("with one observation alone"):
        try:
            fn: Any = subject.module if subject.module is not None else subject.target.call
            outputs = Outputs.of(fn(*xs)).tensors
        except Exception as exc:
            raise LayerRaised("eval forward", exc, user_trace(exc)) from exc
    pairs = [(outputs[k], w.narrow(d, i, 1)) for k, (w, d) in zip(floating, ws)]
    with failing("in backward, one observation alone"):
        return backpropagate(pairs, [*params, *xs])


def _vmap_hint(ctx: Context) -> tuple[str, str]:
    """What leads a failure, and what to do, about the user's Functions that torch.func cannot run."""
    lacking = []
    for cls in _functions(ctx):
        no_context = cls.setup_context is torch.autograd.Function.setup_context
        no_rule = not getattr(cls, "generate_vmap_rule", False) and cls.vmap is torch.autograd.Function.vmap
        if no_context or no_rule:
            lacking.append((cls.__name__, no_context, no_rule))
    if not lacking:
        return "", ""
    missing = " and ".join(part for part, needed in (("setup_context", any(c for _, c, _ in lacking)),
                                                      ("a vmap rule", any(r for _, _, r in lacking))) if needed)
    return (f"{', '.join(name for name, _, _ in lacking)} (torch.autograd.Function) lacks {missing}: ",
            ". torch.func (vmap, grad) runs a Function only when its forward takes no ctx, a @staticmethod "
            "setup_context(ctx, inputs, output) saves what backward needs, and it has generate_vmap_rule = True (or "
            "a vmap staticmethod)")

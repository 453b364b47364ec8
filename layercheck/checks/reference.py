"""Reference: the layer against the implementation it replaces, in every precision it runs in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from layercheck._sdk_internal import Run, Target
from layercheck.reference.rule import Judged, judge, judge_float64
from layercheck.reference.unwrapped import Seen, unwrapped_functions
from layercheck.sdk import CheckFailed, CheckSkipped, Context, LayerRaised, Tolerance, check, forward_run
from layercheck.target.seeding import second_draw_seed

if TYPE_CHECKING:
    from layercheck.target.subject import Subject

# measured with Triton 3.9 on CPU tensors (docs/howto/gpu.md): loads and stores are right, arithmetic
# and tl.sum give wrong values without an error, tl.atomic_add raises
INTERPRETED_BFLOAT16 = ("Triton's interpreter does not compute bfloat16 on CPU tensors (its arithmetic and tl.sum "
                        "give wrong values, tl.atomic_add raises): bfloat16 is compared on a GPU (--on cuda)")
_K = "k: the layer's error from the float64 reference is at most k times the reference's own error in this dtype"


def _named(target: Target) -> str | None:
    if getattr(target, "reference", None) is None:
        return "no reference implementation named (reference: in a spec, --reference, check_layer(reference=...))"
    return None


@check(
    "reference",
    title="outputs, gradients and state agree with a reference implementation in every precision",
    default=False,  # run wherever a reference is named (TargetPlan.of enables it); else nothing to compare
    requires=("forward_runs", "backward_runs"),
    applies=_named,
    variants=("float64", "float32", "bfloat16", "float16"),
    tolerances=(
        Tolerance("float64", 1e-10, "relative difference (largest, and of norms) from the float64 reference"),
        Tolerance("float32", 2.0, _K),
        Tolerance("bfloat16", 2.0, _K),
        Tolerance("float16", 2.0, _K),
    ),
)
def reference(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Runs wherever the target names a reference (``reference:`` in a spec, ``--reference``,
    ``check_layer(..., reference=...)``); without one it has nothing to compare. Runs the
    training forward and a backward with seeded output gradients of the layer and of the
    reference, which holds the layer's parameter values, on the same inputs, and compares every
    output, every input and parameter gradient and every buffer afterwards. In float64 they must
    agree to a tight relative tolerance. In float32, bfloat16 and float16 it applies
    flash-attention's rule per tensor: the layer's error against the reference in float64 (on
    the same inputs and parameters, rounded to the dtype) is at most k (2 by default;
    ``reference.bfloat16=4`` raises it) times the reference's own error in that dtype, plus a
    floor at the tensor's scale (half a unit in the last place of the dtype, and 64 of
    float32's: a float32 accumulation in another order), on the largest difference and on the
    relative difference of norms; a failure there is confirmed on a second draw of the inputs
    (the reference's own error on a small tensor is one sample). Under Triton's interpreter
    bfloat16 is not compared (its bfloat16 arithmetic is wrong on CPU tensors).

    Finite differences cannot judge float16 or bfloat16; a reference can. A kernel that
    accumulates in float16 where the reference accumulates in float32, a backward that loses
    precision the forward keeps, or a masked case the kernel drops all pass the other checks and
    fail this one. ``reference: autograd`` judges a hand-written ``backward`` against autograd's
    derivative of the same forward, run as plain PyTorch (surrogates by design, such as a
    straight-through estimator or a gradient reversal, are kept as they are). Fix: accumulate in
    float32 (``acc = tl.zeros(..., tl.float32)``, ``x.float()`` before a sum), and make the
    kernel compute what the reference computes in every case it handles.
    """
    bound = ctx.target.reference
    dtype = getattr(torch, ctx.variant)
    if dtype is torch.bfloat16 and ctx.target.interpreter is not None:
        raise CheckSkipped(INTERPRETED_BFLOAT16, applies=True)
    layer = _built(ctx, dtype, "the layer")
    k = ctx.tolerance(dtype)
    verdicts, seen = _judged(ctx, layer, layer.inputs(requires_grad=True), dtype, k)
    details: dict[str, Any] = {"reference": bound.name, "dtype": ctx.variant, "k": k,
                               "tensors": [_detail(v) for v in verdicts]}
    if seen.surrogates:
        details["surrogates"] = dict(seen.surrogates)
        for name, why in seen.surrogates.items():
            ctx.note(f"{name}: not held to autograd's derivative of its forward: {why}")
    failed = [v for v in verdicts if v.failing is not None]
    if failed and layer.drew_random:
        raise CheckSkipped(f"{_said(failed[0], ctx.variant, k)}; the layer draws random numbers, which the reference "
                           "may draw differently: not judged", applies=True)
    if failed and dtype is not torch.float64:  # confirmed on a second draw (Note [a second draw in low precision])
        again = _built(ctx, dtype, "the layer")
        seed = second_draw_seed(ctx.seed)
        second, _ = _judged(ctx, again, ctx.target.inputs(dtype, again.device, requires_grad=True, seed=seed), dtype, k)
        if not any(v.failing is not None for v in second):
            ctx.note(f"on the first draw of the inputs {_said(max(failed, key=lambda v: v.ratio), ctx.variant, k)}; "
                     f"within the rule on a second draw (seed {seed}), so rounding on a few elements, not the layer")
            verdicts, failed = second, []
            details["tensors"] = [_detail(v) for v in verdicts]
    if failed:
        worst = max(failed, key=lambda v: v.ratio)
        more = [v.name for v in failed if v is not worst]
        tail = f" (also: {', '.join(more[:4])}{', ...' if len(more) > 4 else ''})" if more else ""
        raise CheckFailed(f"{_said(worst, ctx.variant, k)}{tail}", tensor=worst.name, **details)
    if dtype is torch.float64:
        return (f"{len(verdicts)} tensor(s) agree with {bound.name} in float64 within {k:g} (relative)", details)
    top = max(verdicts, key=lambda v: v.ratio, default=None)
    said = ""
    if top is not None:
        said = f" (largest ratio: {top.name}, {top.ratio:.1f}x{', within the floor' if top.ratio > k else ''})"
    return (f"{len(verdicts)} tensor(s) within {k:g}x the error of {bound.name} itself in {ctx.variant}, or the "
            f"floor{said}", details)


# Note [a second draw in low precision]
#     The reference's own error in a low dtype is one sample of what rounding costs, and on a
#     small tensor it can by luck be a tenth of a unit in the last place, so that a correct
#     layer written in another order stands at several times it on one draw in a few (the same
#     as gradients[float16|bfloat16] against autograd: Note [autograd in the same dtype] in
#     reference/per_dtype.py). A kernel that accumulates in the low dtype is past the rule at
#     every draw. A failure in float32, float16 or bfloat16 is therefore confirmed on a second
#     draw of the inputs before it is reported; float64 is judged on one draw, to a tolerance.


def _judged(ctx: Context, layer: Subject, inputs: Sequence[torch.Tensor], dtype: torch.dtype,
            k: float) -> tuple[list[Judged], Seen]:
    """Every output, gradient and buffer of ``layer`` on ``inputs`` judged against the reference
    (float64: to the tolerance ``k``; a low dtype: by the rule), and what ``reference: autograd``
    saw of the hand-written backwards."""
    bound = ctx.target.reference
    mine = _run(ctx, layer, inputs, "the layer", dtype)
    seen = Seen()
    widened = [_widened(x, dtype) for x in inputs]
    expected = _run(ctx, bound.build(ctx.target, layer, torch.float64), widened, "the reference", torch.float64,
                    seen=seen if bound.autograd else None)
    if bound.autograd:
        _judged_at_all(seen)
    own = None
    if dtype is not torch.float64:
        own = _run(ctx, bound.build(ctx.target, layer, dtype), [_copy(x) for x in inputs], "the reference", dtype,
                   seen=Seen() if bound.autograd else None)
    names, ours, theirs, exact = _paired(mine, expected, own, bound.mapping)
    if own is None:
        return [judge_float64(n, a, e, tolerance=k) for n, a, e in zip(names, ours, exact)], seen
    return [judge(n, a, o, e, dtype=dtype, k=k) for n, a, o, e in zip(names, ours, theirs, exact)], seen


def _said(verdict: Judged, dtype: str, k: float) -> str:
    if verdict.own.max_abs == 0 and verdict.own.rel_norm == 0 and dtype == "float64":
        measure = verdict.failing or "max_abs"
        return (f"{verdict.name}: {getattr(verdict.layer, measure):.2g} from the float64 reference "
                f"({'largest difference' if measure == 'max_abs' else 'relative, of norms'}; allowed "
                f"{getattr(verdict.allowed, measure):.2g})")
    return verdict.message(dtype, k)


def _detail(v: Judged) -> dict[str, Any]:
    return {"tensor": v.name, "max_abs": v.layer.max_abs, "rel_norm": v.layer.rel_norm,
            "reference_max_abs": v.own.max_abs, "reference_rel_norm": v.own.rel_norm,
            "passed": v.failing is None}


def _built(ctx: Context, dtype: torch.dtype, who: str) -> Subject:
    try:
        return ctx.fresh(dtype)
    except Exception as exc:
        raise CheckSkipped(f"{who} cannot be cast to {dtype}: {type(exc).__name__}: {exc}") from exc


def _run(ctx: Context, subject: Subject, inputs: Sequence[torch.Tensor], who: str, dtype: torch.dtype, *,
         seen: Seen | None = None) -> Run:
    """Forward and backward (seeded output gradients) on ``inputs``; a layer or a reference that
    does not run in a low dtype does not apply there, and in float32 or float64 fails."""
    try:
        if seen is None:
            return forward_run(ctx, subject, inputs)
        with unwrapped_functions(seen):
            return forward_run(ctx, subject, inputs)
    except LayerRaised as exc:
        name = str(dtype).removeprefix("torch.")
        if dtype in (torch.float16, torch.bfloat16):
            raise CheckSkipped(f"{who} does not run in {name} ({exc}): not compared in {name}") from exc
        if who == "the layer":
            raise
        raise CheckFailed(f"{who} ({ctx.target.reference.name}) raised in {name} where the layer runs: {exc}",
                          blocking=True) from exc


def _judged_at_all(seen: Seen) -> None:
    """``reference: autograd`` has something to judge: a hand-written backward autograd can redo."""
    if seen.unwrapped:
        return
    if seen.opaque:
        raise CheckSkipped(f"the forward of {', '.join(seen.opaque)} is not differentiable PyTorch (a Triton or CUDA "
                           "kernel, NumPy, no_grad): autograd cannot redo its derivative; name a PyTorch reference "
                           "(reference: ref.py:MyLayerRef)", applies=True)
    if seen.surrogates:
        whys = "; ".join(f"{name}: {why}" for name, why in seen.surrogates.items())
        raise CheckSkipped(f"every hand-written backward is a surrogate by design, not meant to be the derivative of "
                           f"its forward ({whys})")
    raise CheckSkipped("the layer calls no hand-written autograd.Function: autograd computes its gradients already, "
                       "and reference: autograd has nothing to compare")


def _widened(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An input of the layer's run as the float64 reference takes it: its values in ``dtype``, widened."""
    if not x.is_floating_point() or x.dtype != dtype:
        return _copy(x)
    return x.detach().to(torch.float64).requires_grad_(x.requires_grad)


def _copy(x: torch.Tensor) -> torch.Tensor:
    return x.detach().clone().requires_grad_(x.requires_grad)


def _paired(mine: Run, expected: Run, own: Run | None, mapping: Any
            ) -> tuple[list[str], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """Names and values (the layer's, the reference's in the dtype, the float64 reference's) of the
    outputs, the gradients and the floating buffers after the training forward. A size that differs,
    or a tensor one side lacks, fails here."""
    other = own if own is not None else expected
    if len(mine.outputs) != len(expected.outputs):
        raise CheckFailed(f"the layer returns {len(mine.outputs)} tensor output(s), the reference "
                          f"{len(expected.outputs)}", blocking=True)
    names = [f"output {i}" for i in range(len(mine.outputs))]
    ours, theirs, exact = list(mine.outputs), list(other.outputs), list(expected.outputs)
    by_name = {_renamed(name, mapping): g for name, g in expected.grads}
    own_by_name = {_renamed(name, mapping): g for name, g in other.grads}
    for name, grad in mine.grads:
        key = _renamed(name, mapping)
        if grad is None and by_name.get(key) is None:
            continue
        if key not in by_name:
            raise CheckFailed(f"the layer's {name} has no counterpart in the reference", blocking=True)
        ref, ref_own = by_name[key], own_by_name.get(key)
        if grad is None:
            grad = torch.zeros_like(ref if ref is not None else mine.outputs[0])
        names.append(f"gradient of {name}")
        ours.append(grad)
        exact.append(ref if ref is not None else torch.zeros_like(grad, dtype=torch.float64))
        theirs.append(ref_own if ref_own is not None else torch.zeros_like(grad))
    for name, value in mine.state.items():
        key = mapping.get(name, name)
        ref = expected.state.get(key)
        if value is None or ref is None or not value.is_floating_point():
            continue
        names.append(f"state {name!r}")
        ours.append(value)
        exact.append(ref)
        ref_own = other.state.get(key)
        theirs.append(ref_own if ref_own is not None else ref)
    for name, a, e in zip(names, ours, exact):
        if tuple(a.shape) != tuple(e.shape):
            raise CheckFailed(f"{name}: size {list(a.shape)}, the reference's {list(e.shape)}", tensor=name)
    return names, ours, theirs, exact


def _renamed(name: str, mapping: Any) -> str:
    """A gradient's name (``input 0``, ``parameter 'w'``) in the reference's naming."""
    if name.startswith("parameter '"):
        inner = name[len("parameter '"):-1]
        return f"parameter '{mapping.get(inner, inner)}'"
    return name

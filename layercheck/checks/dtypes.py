"""Floating-point types: outputs, gradients and state keep the type of the input."""

from __future__ import annotations

import contextlib

import torch

from layercheck._sdk_internal import Run, layer_is_float32
from layercheck.reference.precision import SilentDowncast
from layercheck.sdk import (
    DTYPES,
    FORWARD,
    PREDICT,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    check,
    dtype_name,
    forward_run,
    layer_failure,
    predict_run,
    reference_forward,
    reference_predict,
)


@check(
    "dtype",
    title="outputs, gradients and state keep the input's floating-point type",
    matlab="predictIsConsistentInType, forwardIsConsistentInType, backwardIsConsistentInType",
    uses=(PREDICT, FORWARD),
    variants=("float32", "float64"),
    optional_variants=("float16", "bfloat16"),
    any_batch=True,
)
def dtype(ctx: Context) -> str:
    """Casts the layer to the variant's type (``layer.double()``, ``.float()``…), feeds inputs of that
    type, and requires every floating output of predict and forward, every gradient and
    every floating buffer afterwards to have that type. Integer outputs and buffers (an
    index, BatchNorm's ``num_batches_tracked``) are left alone.

    A layer that returns float32 in a float64 model loses precision silently (and breaks
    the gradient check); in a float16 model it doubles memory and breaks the next layer.
    Usual causes: ``.float()`` in forward, a constant made with ``torch.ones(n)`` (float32)
    instead of ``x.new_ones(n)``, state stored with a fixed dtype. Fix: derive the type
    from the input (``dtype=x.dtype``, ``torch.ones_like``, ``x.new_*``).

    In float64 it also fails a layer that writes float64 values into a lower-precision tensor
    in place (``buf.copy_(y)``, ``buf[i] = y``, ``acc += y`` on a buffer made with
    ``torch.zeros(n)``): PyTorch rounds them silently, and the float64 output is then only
    float32-accurate although its type is right. A cast written out (``x.float()``, the
    compute-in-float32 idiom of LLaMA's RMSNorm) is by design and passes.
    """
    want = DTYPES[ctx.variant]
    watching = SilentDowncast(want) if want is torch.float64 else contextlib.nullcontext()
    with watching as downcast:  # Note [silent downcasts] in reference/precision.py
        predicted = _dtypes(_run(ctx, want, predict=True))  # only their types: its tensors go before forward's come
        forwarded = _run(ctx, want, predict=False)
    grads = [(f"gradient of {name}", g.dtype) for name, g in forwarded.grads if g is not None and g.is_floating_point()]
    trained = _dtypes(forwarded)
    groups = [
        ("predict", predicted["outputs"]),
        ("forward", trained["outputs"]),
        ("backward", grads),
        ("predict", predicted["state"]),
        ("forward", trained["state"]),
    ]
    checked = 0
    for phase, types in groups:
        for name, found in types:
            checked += 1
            if found != want:
                raise CheckFailed(
                    f"with {ctx.variant} inputs and layer, {phase} {name} is {dtype_name(found)}",
                    phase=phase, tensor=name, expected=ctx.variant, actual=dtype_name(found),
                )
    if isinstance(downcast, SilentDowncast) and downcast.found is not None:
        operation, lower, where = downcast.found
        raise CheckFailed(
            f"with float64 inputs and layer, the layer writes float64 values into a {lower} tensor in place "
            f"(aten.{operation}{f' at {where}' if where else ''}): they are rounded to {lower} silently, so its "
            f"float64 outputs and gradients are only {lower}-accurate. Usual cause: a buffer or accumulator made in "
            "the default dtype (torch.zeros(n), torch.empty(...)) and filled from the input. Fix: make it in the "
            "input's dtype (x.new_zeros(n), torch.zeros(n, dtype=x.dtype, device=x.device))",
            operation=operation, written_into=lower, location=where)
    return f"{checked} output, gradient and state tensor(s) stay {ctx.variant}"


def _dtypes(run: Run) -> dict[str, list[tuple[str, torch.dtype]]]:
    """The floating types of a run's outputs and state, by name."""
    return {
        "outputs": [(f"output {i}", t.dtype) for i, t in enumerate(run.outputs) if t.is_floating_point()],
        "state": [(f"state {name!r}", t.dtype) for name, t in run.state.items()
                  if t is not None and t.is_floating_point()],
    }


def _run(ctx: Context, want: torch.dtype, *, predict: bool) -> Run:
    """Predict, or forward+backward, in ``want``; the shared float32 run when the layer is
    float32 already (casting it would change nothing)."""
    if want is torch.float32 and layer_is_float32(ctx):
        return reference_predict(ctx) if predict else reference_forward(ctx)
    try:
        return predict_run(ctx.fresh(dtype=want)) if predict else forward_run(ctx, ctx.fresh(dtype=want))
    except LayerRaised as exc:
        name = dtype_name(want)
        if want in (torch.float16, torch.bfloat16) and _unsupported_on_cpu(exc.exc):
            raise CheckSkipped(
                f"{name} is not supported on the CPU by an operation the layer uses ({exc}); "
                f"run this variant where {name} kernels exist (e.g. a GPU)",
                applies=True,
            ) from exc
        raise layer_failure(exc, f"with {name} inputs and layer") from exc


def _unsupported_on_cpu(exc: BaseException) -> bool:
    """Whether an error says an operation has no half-precision CPU kernel ("cholesky_cpu"
    not implemented for 'Half', "Low precision dtypes not supported", "Unsupported dtype
    Half"), as opposed to a type mix-up in the layer ("expected ... Half but found Float")."""
    text = str(exc)
    lowered = text.lower()
    return ("Half" in text or "BFloat16" in text) and any(
        phrase in lowered for phrase in ("not implemented", "not supported", "unsupported")
    )

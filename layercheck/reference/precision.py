"""float64 held to float64 accuracy: a hand-written backward against autograd's derivative of the
same forward, or what float64 finite differences resolve (Note [float64 backward precision]), and
float64 values written into a float32 tensor in place (Note [silent downcasts])."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from layercheck.parent.errors import LayerRaised
from layercheck.reference.unwrapped import Seen, unwrapped_functions
from layercheck.support.runs import gradients
from layercheck.target.frames import calling_user_frame
from layercheck.target.tensors import Outputs, custom_functions

if TYPE_CHECKING:
    from layercheck.support.context import Context

# Note [float64 backward precision]
#     Finite differences in float64 resolve a derivative to about 1e-8 relative at best (the
#     step's rounding against its truncation), so the gradient check's float64 tolerance, 1e-6,
#     lets through a hand-written float64 backward that computes in float32 inside: its
#     gradients are right to 1e-7, and every float64 comparison the user makes downstream is
#     silently float32-accurate. Where the backward belongs to autograd.Functions whose forward
#     is differentiable PyTorch, autograd's derivative of that same forward (Note [autograd of
#     the same forward] in unwrapped.py) is a float64 yardstick: two float64 computations of
#     one derivative agree to rounding, some 1e-15 relative. They need not agree further where
#     the forward is an iteration whose limit the backward differentiates implicitly (entmax's
#     bisections: autograd differentiates the steps taken, the backward the exact solution; on
#     benchmarks/mutants.py --third-party two originals were further apart than PRECISION),
#     so a gradient fails gradients[float64] only when it is further than PRECISION from
#     autograd's, relative to its norm, and every value of it is a float32
#     number where autograd's are not: float32 computed inside, cast back at the end. Not
#     judged: a layer that computes in a lower precision inside even in float64 (autograd's
#     derivative is then no more precise), a Function whose forward autograd cannot follow, and
#     surrogates by design (kept as Functions: what they give is the same on both sides).
PRECISION = 1e-9

# What float64 finite differences resolve, asked only where needed: (the gradient's relative
# error against them, their resolution, the step), or None (numerics/resolution.py)
Differences = Callable[[], "tuple[float, float, float] | None"]


def _float32_values(t: torch.Tensor) -> bool:
    """Whether every value of a float64 tensor is a float32 number (and not all of them zero)."""
    values = t.detach()
    return bool(values.any()) and torch.equal(values.to(torch.float32).to(values.dtype), values)


class _LowerPrecision(TorchFunctionMode):
    """Whether an operation inside returned a floating tensor below float64 (float32 computed inside)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        if not self.seen:
            for t in result if isinstance(result, (tuple, list)) else (result,):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64 \
                        and t.numel() > 0:
                    self.seen = True
        return result


class _LowerBackward(TorchDispatchMode):
    """The first lower floating dtype an operation returned while inside (a backward's casts), or ""."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = ""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = func(*args, **(kwargs or {}))
        if not self.seen:
            for t in result if isinstance(result, (tuple, list)) else (result,):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype in _LOWER and t.numel() > 0:
                    self.seen = str(t.dtype).removeprefix("torch.")
        return result


_LOWER = (torch.float32, torch.float16, torch.bfloat16)


def imprecise_backward(ctx: Context, differences: Differences | None = None) -> tuple[str, dict[str, Any]] | None:
    """Why the layer's float64 gradients are less precise than float64 (the message and its
    details), judged against autograd's derivative of the same forward, or where autograd cannot
    follow that forward against what float64 finite differences resolve (``differences``, Note
    [what finite differences resolve] in numerics/resolution.py); None where they are as
    precise, or where neither yardstick serves (Note [float64 backward precision])."""
    # on the runner's sample of the batch where it made one: a cast inside the backward is in every
    # observation, and autograd of the plain forward keeps what the hand-written one does not
    layer = ctx.fresh(torch.float64, sample=True)
    inputs = layer.inputs(requires_grad=True)
    seen = Seen()
    try:
        outputs = Outputs.of(layer.forward(inputs)).tensors
        if not custom_functions(outputs):
            return None  # no hand-written backward: autograd's is the layer's own
        with _LowerBackward() as low:  # a dispatch mode: a torch function mode does not reach a backward
            mine = gradients(ctx, layer, inputs, outputs)
    except (LayerRaised, RuntimeError, TypeError, ValueError):
        return None  # the finite differences have judged
    try:
        other = ctx.fresh(torch.float64, sample=True)
        again = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
        with unwrapped_functions(seen), _LowerPrecision() as lower:
            outputs = Outputs.of(other.forward(again)).tensors
        theirs = gradients(ctx, other, again, outputs)
    except (LayerRaised, RuntimeError, TypeError, ValueError):
        return _against_differences(mine, low.seen, differences)  # autograd cannot follow the forward
    if lower.seen:
        return None  # the forward computes in a lower precision: autograd's derivative is no more precise
    if seen.opaque:
        return _against_differences(mine, low.seen, differences)
    if not seen.unwrapped:
        return None  # surrogates by design only
    worst: tuple[float, str] | None = None
    errors = {}
    for (name, grad), (_, expected) in zip(mine, theirs):
        if grad is None or expected is None or grad.shape != expected.shape or not grad.is_floating_point():
            continue
        norm = float(torch.linalg.vector_norm(expected.detach()))
        if norm == 0 or not torch.isfinite(grad).all() or not torch.isfinite(expected).all():
            continue
        error = float(torch.linalg.vector_norm((grad - expected).detach())) / norm
        errors[name] = error
        if (worst is None or error > worst[0]) and (_float32_values(grad) or low.seen) \
                and not _float32_values(expected):
            worst = (error, name)
    if worst is None or worst[0] <= PRECISION:
        return None
    functions = ", ".join(seen.unwrapped)
    found = dict(mine)[worst[1]]
    evidence = ("every value of it is a float32 number" if found is not None and _float32_values(found) else
                f"an operation of the backward returned {low.seen} (cast back to float64 after)")
    return (f"gradient of {worst[1]}: float64 gradients agree with autograd's derivative of the same forward "
            f"(the forward of {functions} run as plain PyTorch) only to {worst[0]:.2g} relative, where two float64 "
            f"computations of one derivative agree to about 1e-15 (allowed {PRECISION:g}), and {evidence}: the "
            "backward computes in float32 inside (a .float(), a float32 constant)",
            {"autograd_relative_errors": errors, "autograd_tolerance": PRECISION})


def _against_differences(mine: list[tuple[str, torch.Tensor | None]], low: str, differences: Differences | None,
                         ) -> tuple[str, dict[str, Any]] | None:
    """The float64 gradients of a hand-written backward whose forward autograd cannot follow,
    held to what float64 finite differences resolve (Note [what finite differences resolve] in
    numerics/resolution.py), where the backward shows float32 inside: a gradient whose every
    value is a float32 number, or an operation of it that returned a lower dtype."""
    cast = [name for name, grad in mine if grad is not None and grad.is_floating_point() and _float32_values(grad)]
    if differences is None or not (cast or low):
        return None
    found = differences()  # (error, resolution, step)
    if found is None or found[0] <= max(PRECISION, 10 * found[1]):
        return None
    error, resolution, step = found
    named = " and ".join([", ".join(cast[:-1]), cast[-1]] if len(cast) > 1 else cast)
    evidence = (f"every value of the gradient{'s' * (len(cast) > 1)} of {named} is a float32 number" if cast else
                f"an operation of the backward returned {low} (cast back to float64 after)")
    return (f"float64 gradients agree with float64 finite differences only to {error:.2g} relative, where "
            f"float64 finite differences resolve {resolution:.1g} here (extrapolated from steps of "
            f"{step:g}, {2 * step:g} and {4 * step:g} of each tensor's scale), and {evidence}: "
            "the backward computes in float32 inside (a .float(), a float32 constant)? Autograd cannot follow the "
            "forward (it works on detached tensors or outside PyTorch), so there is no autograd derivative to "
            "compare with",
            {"differences_relative_error": error, "differences_resolve": resolution,
             "float32_gradients": cast, "autograd_tolerance": PRECISION})


# Note [silent downcasts]
#     A float64 value written into a float32 tensor in place (``buf.copy_(x)``, ``buf[i] = x``,
#     ``acc += x``, an ``out=`` argument) is rounded to float32 without a word: PyTorch casts
#     within a kind silently. The float64 output that comes of it is float64 in type and float32
#     in precision, and nothing else sees it (the dtype is right, and the gradient check takes the
#     rounding for noise). Nobody writes it on purpose: the buffer or accumulator was made in the
#     default dtype (``torch.zeros(n)``, ``torch.empty(...)``). A cast written out (``x.float()``,
#     ``.to(torch.float32)``) is another matter: it is the idiom of LLaMA's and Gemma's RMSNorm
#     (compute in at least float32 whatever the input), by design, and only noted. While the
#     dtype check's float64 forward and backward run, a dispatch mode watches every operation
#     that writes into one of its arguments (the schema's write annotations) for one that writes
#     a float64 tensor's values into a lower floating dtype; a 0-d source written into a larger
#     destination (a scalar fill) does not count.
class SilentDowncast(TorchDispatchMode):
    """The first operation that wrote ``dtype`` values into a lower floating dtype in place, as
    ``(the operation, the dtype written into, the user's line)``; None while there is none."""

    def __init__(self, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.dtype = dtype
        self.found: tuple[str, str, str | None] | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.found is None:
            self._look(func, args, kwargs)
        return func(*args, **kwargs)

    def _look(self, func: Any, args: Any, kwargs: dict[str, Any]) -> None:
        written: list[Any] = []
        read: list[Any] = []
        for index, argument in enumerate(func._schema.arguments):
            value = args[index] if index < len(args) else kwargs.get(argument.name)
            alias = argument.alias_info
            (written if alias is not None and alias.is_write else read).append(value)
        eps = torch.finfo(self.dtype).eps
        lower = [t for t in tree_leaves(written) if isinstance(t, torch.Tensor) and t.is_floating_point()
                 and torch.finfo(t.dtype).eps > eps]
        if not lower:
            return
        sources = [t for t in tree_leaves(read) if isinstance(t, torch.Tensor) and t.dtype == self.dtype
                   and t.numel() > 0]
        for low in lower:
            if any(source.dim() > 0 or low.dim() == 0 for source in sources):
                name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
                self.found = (name, str(low.dtype).removeprefix("torch."), calling_user_frame())
                return

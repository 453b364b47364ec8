"""What a wrong gradient looks like, in words a layer author can act on: off by a constant
factor (a mean where a sum belongs, a missing 2), of the wrong sign, transposed, or another
tensor's gradient (returned in the wrong order).

Each pattern is a hypothesis about the true gradient: "it is the analytic one divided by k",
"it is the analytic one transposed", ... A hypothesis holds when the gradient it predicts
agrees with the finite differences along PATTERN_DRAWS independent random directions over
the whole tensor, at the gradient check's own tolerance. Random directions make a false
match all but impossible: a gradient that is off by k on only part of its elements, or
transposed but also wrong elsewhere, fails the other directions. Only run once a tensor is
known to be wrong; it costs two evaluations per direction beyond those already taken.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

import torch

from layercheck.numerics.engine import FiniteDifferences
from layercheck.numerics.probes import DifferentiableFunction, Probe

PATTERN_DRAWS = 3  # random directions a hypothesis must agree along (the first two are cached)
FACTOR_MATCH = 1e-4  # how close a measured factor must be to a size (1/8) to be named after it


def explain(fd: FiniteDifferences[DifferentiableFunction], grads: Sequence[torch.Tensor | None], slot: int,
            tolerance: float, step: float, sizes: Mapping[int, str] | None = None) -> str | None:
    """A sentence saying how the analytic gradient of ``fd.fn.names[slot]`` relates to the
    true one, or None when no simple pattern explains the disagreement. ``sizes`` names the
    sizes a factor may come from ({8: "the batch size"})."""
    grad = grads[slot]
    if grad is None:
        return None
    grad = grad.detach().to(torch.float64)
    probes = [Probe(d, step, slot) for d in range(PATTERN_DRAWS)]

    def holds(candidate: torch.Tensor) -> bool:
        replaced = [candidate if i == slot else g for i, g in enumerate(grads)]
        return all(fd.compare(p, replaced, tolerance).agrees for p in probes)

    elements = f"all {grad.numel()} elements" if grad.numel() > 1 else "its one element"
    if not bool(grad.abs().sum() > 0):
        return (f"the gradient is zero over {elements}, but the output depends on it: a path detached "
                "or computed under no_grad, or a gradient never filled in?")
    if holds(torch.zeros_like(grad)):
        return (f"the right gradient is zero over {elements} (the loss does not depend on it: e.g. a bias "
                "removed by a normalisation after it; or the forward is piecewise constant in it, a round or a "
                "quantiser, and a straight-through backward passes a gradient on purpose, which is not the "
                "derivative: skip this check for such a layer, --skip gradients), but the layer's is not")
    first = fd.compare(probes[0], grads, tolerance)
    if first.numeric != 0:
        factor = first.analytic / first.numeric
        if math.isfinite(factor) and holds(grad / factor):
            return _factor_text(factor, elements, sizes or {})
    for other_slot, other in enumerate(grads):
        if other_slot != slot and other is not None and other.shape == grad.shape and holds(other.detach()):
            return (f"its gradient is the one {fd.fn.names[other_slot]} should get, over {elements}: "
                    "gradients returned in the wrong order?")
    for description, transform in _rearrangements(grad):
        if holds(transform(grad)):
            return f"its gradient is {description} of the right one, over {elements}"
    return None


def _factor_text(factor: float, elements: str, sizes: Mapping[int, str]) -> str:
    if abs(factor + 1) <= FACTOR_MATCH:
        return (f"the gradient is −1 × what finite differences give, over {elements}: the sign is flipped (on purpose "
                "only in a gradient-reversal "
                "layer, whose backward is not the derivative: skip this check for such a layer, --skip gradients)")
    return f"the gradient is {factor:.4g} × what finite differences give, over {elements} ({_origin(factor, sizes)})"


def _origin(factor: float, sizes: Mapping[int, str]) -> str:
    """Where a factor likely comes from: a size of the input (1/8 = 1/batch size) or a small
    fraction (a missing 1/2)."""
    sign = "−" if factor < 0 else ""
    magnitude = abs(factor)
    for size, what in sorted(sizes.items()):
        if size < 2:
            continue
        if abs(magnitude * size - 1) <= FACTOR_MATCH:
            hint = ": a mean where a sum belongs?" if "batch" in what or "elements" in what else ""
            return f"{factor:.4g} = {sign}1/{size}, {what}{hint}"
        if abs(magnitude / size - 1) <= FACTOR_MATCH:
            return f"{factor:.4g} = {sign}{size}, {what}: a sum where a mean belongs?"
    simple = Fraction(magnitude).limit_denominator(4)
    if simple and abs(float(simple) / magnitude - 1) <= FACTOR_MATCH:
        return f"a constant factor {sign}{simple} missing or extra in the derivative"
    return "the same factor everywhere: a scale missing or extra in the derivative"


def _rearrangements(grad: torch.Tensor) -> list[tuple[str, Callable[[torch.Tensor], torch.Tensor]]]:
    """Transposes of two dimensions of equal size and flips of one dimension: the gradient
    computed right but laid out wrong."""
    found: list[tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = []
    shape = grad.shape
    for i in range(grad.dim()):
        for j in range(i + 1, grad.dim()):
            if shape[i] == shape[j] > 1:
                found.append((f"the transpose (dims {i} and {j} swapped)", functools.partial(_swapped, i=i, j=j)))
    for i in range(grad.dim()):
        if shape[i] > 1:
            found.append((f"the mirror image along dim {i} (reversed)", functools.partial(torch.flip, dims=(i,))))
    return found


def _swapped(g: torch.Tensor, *, i: int, j: int) -> torch.Tensor:
    return g.transpose(i, j).contiguous()

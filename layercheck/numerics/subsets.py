"""A wrong gradient that is off by a constant factor on part of a tensor only: one branch of a
``torch.where`` (the elements whose value is negative), one half of a dimension (the gate of a
gated unit), or both together.

Each candidate part is a hypothesis, as in numerics/patterns.py: "the right gradient is the
layer's, divided by k on this part". Its k is solved from one random direction over the whole
tensor (along u, finite differences give <g outside, u> + <g inside, u> / k), and the hypothesis
holds when the gradient it predicts agrees with finite differences along every one of
PATTERN_DRAWS random directions at the check's tolerance: a part or a factor that is not the
right one fails the other directions. The directions are those the tensor-wide patterns already
differenced, so trying every part costs dot products, not evaluations of the layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from itertools import pairwise

import torch

from layercheck.numerics.engine import FiniteDifferences
from layercheck.numerics.patterns import PATTERN_DRAWS
from layercheck.numerics.probes import DifferentiableFunction, Probe

SPLITS = (2, 4)  # a dimension is cut into halves, then quarters
DIMENSIONS = 2  # the largest dimensions are cut
CONDITIONS: tuple[tuple[str, Callable[[torch.Tensor], torch.Tensor]], ...] = (
    ("is negative", lambda value: value < 0),
    ("is positive", lambda value: value > 0),
)
SAME = 1e-3  # a factor this close to 1 is no factor


def parts(value: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """The candidate parts of a tensor, simplest first, as (words, mask): a sign of the value,
    then slabs of the largest dimensions, then a slab and a sign together. Neither empty nor whole."""
    slabs: list[tuple[str, torch.Tensor]] = []
    for dim in sorted(range(value.dim()), key=lambda d: -value.shape[d])[:DIMENSIONS]:
        size = value.shape[dim]
        for count in SPLITS:
            if size < count:
                continue
            bounds = [round(i * size / count) for i in range(count + 1)]
            for start, stop in pairwise(bounds):
                mask = torch.zeros(value.shape, dtype=torch.bool, device=value.device)
                mask.narrow(dim, start, stop - start).fill_(True)
                slabs.append((f"at indices {start}..{stop - 1} of dimension {dim}", mask))
    signs = [(f"where the value {words}", condition(value)) for words, condition in CONDITIONS]
    found = [*signs, *slabs, *((f"{where} {sign}", slab & mask) for where, slab in slabs for sign, mask in signs)]
    for words, mask in found:
        if bool(mask.any()) and not bool(mask.all()):
            yield words, mask


def factor_on_part(fd: FiniteDifferences[DifferentiableFunction], grads: Sequence[torch.Tensor | None], slot: int,
                   tolerance: float, step: float) -> tuple[str, torch.Tensor] | None:
    """A sentence saying on which part of ``fd.fn.names[slot]`` the gradient is off by which
    constant factor (and that it agrees elsewhere), and that part (a mask of the tensor's
    elements); None when no part explains it."""
    grad = grads[slot]
    if grad is None:
        return None
    grad = grad.detach().to(torch.float64)
    value = fd.fn.point[slot].detach()
    probes = [Probe(draw, step, slot) for draw in range(PATTERN_DRAWS)]
    numeric = fd.compare(probes[0], grads, tolerance).numeric

    def with_gradient(candidate: torch.Tensor) -> list[torch.Tensor | None]:
        return [candidate if i == slot else g for i, g in enumerate(grads)]

    for words, mask in parts(value):
        mask = mask.to(grad.device)
        inside, outside = grad * mask, grad * ~mask
        rest = numeric - fd.analytic(probes[0], with_gradient(outside))
        along = fd.analytic(probes[0], with_gradient(inside))
        if rest == 0 or along == 0:
            continue
        factor = along / rest
        if not math.isfinite(factor) or abs(factor - 1) <= SAME:
            continue
        candidate = with_gradient(outside + inside / factor)
        if all(fd.compare(probe, candidate, tolerance).agrees for probe in probes):
            share = float(mask.double().mean())
            return (f"the gradient is {factor:.4g} × what finite differences give on the {share:.2%} of its elements "
                    f"{words}, and agrees on the others ({_why(factor)})", mask)
    return None


def _why(factor: float) -> str:
    simple = Fraction(abs(factor)).limit_denominator(4)
    named = f"{'−' if factor < 0 else ''}{simple}" if simple and abs(float(simple) / abs(factor) - 1) <= 1e-4 \
        else f"{factor:.4g}"
    return (f"a factor {named} missing or extra in the derivative on one branch only: a torch.where, a mask or an "
            "if that the backward gets wrong on one side?")

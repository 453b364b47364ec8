"""What the finite-difference engine (:mod:`~layercheck.numerics.engine`) differences, and where:
the protocol of a function it differences (:class:`DifferentiableFunction`), a point moved along
a direction (:class:`Moved`), a scalar as ``CHUNKS`` partial sums (:func:`chunk_sums`: the samples
of the noise estimate), and where a pair of evaluations perturbs and what it found
(:class:`Region`, :class:`Probe`, :class:`Comparison`). Plain records and one reduction; the
engine's search over steps and directions is in engine.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from layercheck.support.compare import ratio

CHUNKS = 16  # partial sums per output: samples for the noise estimate


@dataclass(frozen=True)
class Moved:
    """One tensor of the point moved along a direction: ``value + step·direction``, in the
    value's dtype. A function may compute it where its call needs it (a LayerFunction adds it
    into the layer's input: one pass, and no copy to keep the point from the layer's writes);
    :meth:`tensor` computes it on its own."""

    value: torch.Tensor
    direction: torch.Tensor
    step: float

    def tensor(self) -> torch.Tensor:
        return (self.direction * self.step).add_(self.value).to(self.value.dtype)


def materialized(values: Sequence[torch.Tensor | Moved]) -> list[torch.Tensor]:
    """``values`` with every :class:`Moved` computed."""
    return [v.tensor() if isinstance(v, Moved) else v for v in values]


class DifferentiableFunction(Protocol):
    """What the engine, the verdict and the localisation read from a function they difference
    (:class:`~layercheck.numerics.functions.LayerFunction`, ``GradientFunction``)."""

    @property
    def point(self) -> Sequence[torch.Tensor]:
        """The tensors it is differentiated at, one per slot."""

    @property
    def names(self) -> Sequence[str]:
        """One per slot, for messages."""

    def terms(self, values: Sequence[torch.Tensor | Moved], cotangents: Sequence[torch.Tensor]) -> torch.Tensor:
        """Partial sums of the scalar at ``values`` in float64, a row of ``CHUNKS`` per cotangent.
        Raises NotDifferentiable when the outputs change in number or size there."""

    def reset(self) -> None:
        """Put back what an evaluation changed (parameters, state)."""


def chunk_sums(y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """<w, y> in float64 as ``CHUNKS`` partial sums over consecutive elements (the last ones
    zero where there are fewer elements than chunks).

    Computed ``_ROWS`` chunks at a time, so that no full-size float64 product is held: a
    reduction over the rows of a (rows, length) tensor sums each row whole whatever the number
    of rows (two or more) and of threads, so the sums are bit for bit those of all chunks at once."""
    flat_y, flat_w = y.detach().reshape(-1), w.reshape(-1)
    n = flat_y.numel()
    length = max(1, math.ceil(n / CHUNKS))
    block = torch.empty(_ROWS * length, dtype=torch.float64, device=y.device)  # reused: one allocation
    sums = []
    for first in range(0, CHUNKS, _ROWS):
        rows = min(_ROWS, CHUNKS - first)
        start, stop = min(n, first * length), min(n, (first + rows) * length)
        part = block[:rows * length]
        if stop > start:
            torch.mul(flat_y[start:stop].to(torch.float64), flat_w[start:stop].to(torch.float64),
                      out=part[:stop - start])
        part[stop - start:].zero_()  # padding past the last element
        sums.append(part.view(rows, length).sum(dim=1))
    return torch.cat(sums)


# Chunks whose partial sums chunk_sums computes together: at least two, so that the reduction
# runs over rows (one row alone is split between threads, and sums in another order).
_ROWS = 2


def chunks_used(elements: int) -> int:
    """How many of the CHUNKS partial sums hold elements (the rest sum padding)."""
    if elements == 0:
        return 0
    return math.ceil(elements / math.ceil(elements / CHUNKS))


# -- where a probe perturbs -------------------------------------------------------------------


@dataclass(frozen=True)
class Region:
    """Part of one tensor: elements with values in [low, high], a slab along one dimension,
    or a single element (flat index)."""

    slot: int
    low: float = -math.inf
    high: float = math.inf
    dim: int | None = None
    start: int = 0
    stop: int = 0
    element: int | None = None

    def mask(self, value: torch.Tensor) -> torch.Tensor:
        if self.element is not None:
            mask = torch.zeros(value.numel(), dtype=torch.bool)
            mask[self.element] = True
            return mask.reshape(value.shape)
        if self.dim is not None:
            mask = torch.zeros(value.shape, dtype=torch.bool)
            mask.narrow(self.dim, self.start, self.stop - self.start).fill_(True)
            return mask
        return (value >= self.low) & (value <= self.high)

    def describe(self, shape: Sequence[int]) -> str:
        if self.element is not None:
            return f"element {element_index(self.element, shape)}"
        if self.dim is not None:
            return f"indices {self.start}..{self.stop - 1} of dimension {self.dim}"
        return f"values in [{self.low:.4g}, {self.high:.4g}]"


def element_index(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(shape))) if len(shape) else ()


@dataclass(frozen=True)
class Probe:
    """Where and how far a pair of evaluations perturbs: every tensor (``slot`` None), one
    tensor, a group of them (a tuple of slots), or a region of one; ``draw`` numbers
    independent random directions."""

    draw: int
    step: float
    slot: int | tuple[int, ...] | None = None
    region: Region | None = None

    def leaves(self, index: int) -> bool:
        """Whether the probe leaves the tensor in slot ``index`` alone (None: it perturbs all)."""
        slot = self.region.slot if self.region is not None else self.slot
        if slot is None:
            return False
        return index not in slot if isinstance(slot, tuple) else index != slot

    @property
    def key(self) -> str:
        return f"{self.draw}/{self.step:.3e}/{self.slot}/{self.region}"


@dataclass(frozen=True)
class Comparison:
    """One directional derivative, analytic against numeric."""

    probe: Probe
    analytic: float
    numeric: float  # central difference
    one_sided: tuple[float, float]  # forward, backward differences
    spread: float  # standard deviation of the analytic side over random directions
    bound: float  # allowed |numeric - analytic|
    # failed on a steep layer with extrapolations still moving where rounding stops the steps:
    # finite differences cannot tell its gradient right or wrong (Note [steep at the base step]
    # in numerics/engine.py)
    unresolved: bool = False
    # the step ``numeric`` was taken at, when it is not the probe's (Note [steep below the base
    # step] in numerics/engine.py)
    taken_at: float | None = None

    @property
    def central_error(self) -> float:
        return abs(self.numeric - self.analytic)

    @property
    def agrees(self) -> bool:
        if self.taken_at is not None:  # below the base step: agreed there, or judges nothing (unresolved)
            return not self.unresolved
        return self.central_error <= self.bound or one_sided_agrees(self.one_sided, self.analytic, self.bound)

    @property
    def kink_crossed(self) -> bool:
        """The central difference failed but a one-sided one agrees: the step crossed a kink."""
        return self.central_error > self.bound and self.agrees

    @property
    def relative_error(self) -> float:
        """The error relative to the spread: of the one-sided difference that agrees when the
        step crossed a kink, else of the central difference."""
        if self.kink_crossed:
            return ratio(min(abs(d - self.analytic) for d in self.one_sided), self.spread)
        return ratio(self.central_error, self.spread)

    def to_dict(self) -> dict[str, Any]:
        return {"analytic": self.analytic, "numeric": self.numeric, "one_sided": list(self.one_sided),
                "relative_error": self.relative_error, "step": self.taken_at or self.probe.step,
                "kink_crossed": self.kink_crossed}


def one_sided_agrees(one_sided: tuple[float, float], analytic: float, bound: float) -> bool:
    """Whether a one-sided difference agrees with ``analytic`` (Note [kinks]): held to twice the
    central difference's ``bound``, as its noise is twice the central's."""
    return any(abs(d - analytic) <= 2 * bound for d in one_sided)


def second_difference(base: torch.Tensor, up: torch.Tensor, down: torch.Tensor, inward: bool) -> torch.Tensor:
    """S(h) of the partial sums along a direction: L(x+h) + L(x-h) - 2 L(x) from the sums at the
    point (``base``) and a step up and down, or for a direction differenced on one side (Note
    [domains] in engine.py, ``up`` and ``down`` at one and two steps) L(x+2h) - 2 L(x+h) + L(x)."""
    return down - 2 * up + base if inward else up + down - 2 * base

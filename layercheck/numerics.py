"""Finite differences along random directions: the float64 reference that analytic
gradients are compared against, and the per-dtype gradient tolerances.

Note [directional derivatives]
    MATLAB differences every input element (four forward passes each) and gradcheck's slow
    mode builds the whole Jacobian. Here the layer is reduced to one scalar, the sum over its
    floating outputs y_k of <w_k, y_k> with fixed random cotangents w_k, and differenced
    along one random direction u over every input and parameter at once:

        numeric  = (L(θ + h·u) − L(θ − h·u)) / 2h      analytic = <∇L, u>

    Two forward passes check every element. A gradient wrong by δ anywhere moves the analytic
    side by <δ, u>, a normal variable with standard deviation ‖δ‖, while <∇L, u> itself
    spreads by ‖∇L‖: errors are reported relative to that spread. A derivative wrong on 0.6%
    of 1.5 million elements gives a relative error of a few percent, more than three orders
    above the float64 tolerance, so one direction nearly always sees it and two are used.

Note [step]
    u = scale·v per tensor, v standard normal and scale the tensor's largest magnitude, so
    the step is relative to each tensor. h = 1e-8: the truncation error of a central
    difference is O(h²), nothing in float64, and the rounding error about eps·‖w∘y‖ / h stays
    near 1e-9 of the spread on the bundled layers (measured, tests/test_numerics.py). A step
    this small also makes kink crossings rare (Note [kinks]). The analytic side is dotted
    with u, not with the rounded ((x + h·u) − (x − h·u)) / 2h; they differ by eps·|x| / h
    per element at random, ~5e-9 of the spread: two hundred times below the tolerance.

Note [kinks]
    ReLU, abs, clamp, max-pooling and SReLU are not differentiable where an element sits on a
    kink; a difference step that crosses one compares the analytic slope of one side with a
    secant across both. At 1.5 million standard-normal elements and h = 1e-8 a step crosses
    one of SReLU's two kinks in about 6% of directions. Three things keep this from being a
    false alarm while leaving bugs visible:
    - L(θ) is evaluated too, so each direction gives the central difference and both
      one-sided ones. An element crosses on one side only, and the one-sided difference on
      the other side is exact: a direction passes when any of the three agrees. A wrong
      gradient makes all three disagree by the same amount.
    - A failing pair of directions is retried with two fresh ones, which must pass too
      for the layer to pass. Crossings on both sides in both rounds are needed for a false
      alarm: about 1e-6 at that size.
    - The rounding-noise estimate (Note [precision]) is a median over output chunks, which
      a crossing in one chunk does not move.

Note [precision]
    The float64 copy may still compute in lower precision (``x.float()`` inside, a float32
    constant), which makes finite differences with a tiny step pure noise. The noise of one
    evaluation is measured from second differences at h and 2h along the same direction,
    4·S(h) − S(2h), in which the curvature term cancels and only rounding remains; it is
    taken per chunk of each output and combined through the median (robust to a kink in one
    chunk). The bound a difference is held to is tolerance × spread + 6 standard deviations
    of that noise. When the noise at h would use more than a tenth of the tolerance, the
    step grows (up to 1e-3) until it does not, the noise is measured again at that step, and
    the central difference is extrapolated from h and 2h (Richardson), which removes its h²
    truncation error: such layers are still checked, at the precision they have.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from layercheck.errors import CheckSkipped, LayerRaised
from layercheck.subject import Outputs, Subject, backward_nodes, seeded, user_trace

# Tolerances on relative errors, per dtype of the analytic gradient (overridable per dtype
# in the spec's ``tolerance:`` and with ``--tolerance``).
# - float64: error of the directional derivative relative to its spread (Note [directional
#   derivatives]). Correct layers measure below 1e-8 (rounding only), broken ones at least
#   1e-3: 1e-6 sits between with two orders to spare on each side.
# - lower precisions: ‖g − g64‖ / ‖g64‖ per tensor against the float64 analytic gradient,
#   which the float64 differences vouch for. float32 rounding gives 1e-7..1e-5; an element
#   on the other side of a kink in float32 (|x − kink| < 1e-7) moves a tensor's gradient by
#   about 1/sqrt(elements), and such elements only exist in tensors of a million elements
#   or more, where that is 1e-3. 1e-2 stays clear of both.
GRADIENT_TOLERANCE: dict[torch.dtype, float] = {
    torch.float64: 1e-6,
    torch.float32: 1e-2,
    torch.float16: 1e-1,
    torch.bfloat16: 2e-1,
}

BASE_STEP = 1e-8  # Note [step]
MAX_STEP = 1e-3  # Note [precision]: larger steps turn truncation error into the problem
CHUNKS = 16  # partial sums per output: samples for the noise estimate
NOISE_SIGMAS = 6.0
NOISE_SHARE = 0.1  # of the tolerance that rounding noise may use before the step grows
EPS64 = torch.finfo(torch.float64).eps
KEPT_DIRECTIONS = 4


def gradient_tolerance(dtype: torch.dtype) -> float:
    return GRADIENT_TOLERANCE.get(dtype, 1e-1)


# -- the layer as a function ------------------------------------------------------------------


class LayerFunction:
    """A layer as a fixed function of its floating inputs and learnable parameters.

    Every evaluation starts from the same state (buffers restored) and the same random
    stream (the subject reseeds each call), so dropout, running statistics and recurrent
    state do not change the function between evaluations.
    """

    def __init__(self, subject: Subject, inputs: Sequence[torch.Tensor]) -> None:
        self.subject = subject
        self.inputs = [x.detach() for x in inputs]
        self.parameters = subject.parameters()
        self.input_slots = [i for i, x in enumerate(self.inputs) if x.is_floating_point()]
        self.names = [f"input {i}" for i in self.input_slots] + [f"parameter {n!r}" for n, _ in self.parameters]
        self.point = [self.inputs[i] for i in self.input_slots] + [p.detach().clone() for _, p in self.parameters]
        self.state = subject.snapshot()

    def __len__(self) -> int:
        return len(self.point)

    def call(self, values: Sequence[torch.Tensor] | None = None, *,
             requires: Sequence[bool] | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Run the training forward at ``values`` (the point by default), tensors flagged in
        ``requires`` requiring grad (all by default). Returns the floating outputs and the
        tensors that stand for the slots (input leaves, then the parameters)."""
        values = self.point if values is None else values
        requires = [True] * len(self) if requires is None else list(requires)
        self.subject.restore(self.state)
        inputs = list(self.inputs)
        leaves = []
        for slot, index in enumerate(self.input_slots):
            value = values[slot].detach()
            leaf = (value.clone() if value is self.point[slot] else value).requires_grad_(requires[slot])
            inputs[index] = leaf
            leaves.append(leaf)
        offset = len(self.input_slots)
        flags = [p.requires_grad for _, p in self.parameters]
        try:
            with torch.no_grad():
                for (_, p), value in zip(self.parameters, values[offset:]):
                    p.copy_(value)
            for (_, p), flag in zip(self.parameters, requires[offset:]):
                p.requires_grad_(flag)
            raw = self.subject.forward(inputs)
        finally:
            for (_, p), flag in zip(self.parameters, flags):
                p.requires_grad_(flag)
        return Outputs.of(raw).floating, leaves + [p for _, p in self.parameters]

    def reset(self) -> None:
        """Put the parameters and the state back at the point."""
        with torch.no_grad():
            for (_, p), value in zip(self.parameters, self.point[len(self.input_slots):]):
                p.copy_(value)
        self.subject.restore(self.state)

    def gradient(self, cotangents: Sequence[torch.Tensor | None] | Callable[[list[torch.Tensor]], list[torch.Tensor]],
                 *, requires: Sequence[bool] | None = None,
                 watch: Callable[[list[torch.Tensor]], AbstractContextManager[Any]] | None = None) -> Backprop:
        """One forward and backward at the point: the analytic gradient of sum_k <w_k, y_k> for
        every slot flagged in ``requires`` (None where autograd gives none, and for slots not
        flagged). ``cotangents`` has one entry per floating output (None leaves an output out),
        or makes them from the outputs. ``watch(outputs)`` is entered around the backward.
        Raises LayerRaised (phase "forward" or "backward")."""
        requires = [True] * len(self) if requires is None else list(requires)
        outputs, leaves = self.call(requires=requires)
        given = list(cotangents(outputs) if callable(cotangents) else cotangents)
        if len(given) != len(outputs):
            raise ValueError(f"{len(given)} cotangents for {len(outputs)} floating outputs")
        pairs = [(y, w) for y, w in zip(outputs, given) if w is not None and y.requires_grad]
        wanted = [slot for slot, flag in enumerate(requires) if flag]
        grads: list[torch.Tensor | None] = [None] * len(self)
        if pairs and wanted:
            with seeded(self.subject.target.seed, self.subject.device), (watch or _no_watch)(outputs):
                try:
                    found = torch.autograd.grad([y for y, _ in pairs], [leaves[s] for s in wanted],
                                                [w.to(y.dtype) for y, w in pairs], allow_unused=True)
                except Exception as exc:
                    raise LayerRaised("backward", exc, user_trace(exc)) from exc
            for slot, g in zip(wanted, found):
                grads[slot] = None if g is None else g.detach()
        return Backprop(grads, [y.detach() for y in outputs], [y.requires_grad for y in outputs], given)

    def terms(self, values: Sequence[torch.Tensor], cotangents: Sequence[torch.Tensor]) -> torch.Tensor:
        """Partial sums of <w_k, y_k> in float64, ``CHUNKS`` per output: shape (outputs, CHUNKS)."""
        outputs, _ = self.call(values)
        if len(outputs) != len(cotangents) or any(y.shape != w.shape for y, w in zip(outputs, cotangents)):
            raise CheckSkipped("the number or sizes of the floating outputs change when the inputs move by "
                               "a relative 1e-8: finite differences do not apply to this layer")
        return torch.stack([_chunk_sums(y, w) for y, w in zip(outputs, cotangents)])


@dataclass(frozen=True)
class Backprop:
    """The result of :meth:`LayerFunction.gradient`."""

    grads: list[torch.Tensor | None]  # per slot
    outputs: list[torch.Tensor]  # floating outputs, detached
    differentiable: list[bool]  # per floating output: did it require grad
    cotangents: list[torch.Tensor | None]


class GradientFunction:
    """A layer's first gradient as a function one derivative up: F(θ, w) = <∇_θ <w, y(θ)>, u>,
    of the inputs and parameters θ and the output cotangents w, for a fixed contraction u over
    θ (see ``layercheck/checks/higher_order.py``, Note [second derivatives]).

    :class:`FiniteDifferences` differences it exactly as it does a :class:`LayerFunction` (it
    reads ``point``, ``names``, ``terms`` and ``reset``); its analytic gradient, which those
    differences judge, is the double backward (:meth:`gradient`). F is one row of partial
    sums over every tensor's elements together, so that a jump of the first gradient where a
    step crosses a kink lands in one or two of the CHUNKS and leaves the median of the noise
    estimate alone (a tensor of its own, e.g. a per-channel threshold, would be all its row)."""

    def __init__(self, fn: LayerFunction, cotangents: Sequence[torch.Tensor | None],
                 contraction: Sequence[torch.Tensor]) -> None:
        """``cotangents``: one per floating output (None leaves one out); ``contraction``: u, one
        per slot of ``fn``."""
        self.fn = fn
        self.cotangents = list(cotangents)
        self.outputs = [k for k, w in enumerate(self.cotangents) if w is not None]
        self.contraction = torch.cat([u.detach().to(torch.float64).reshape(-1) for u in contraction])
        self.point = list(fn.point) + [self.cotangents[k].detach() for k in self.outputs]  # type: ignore[union-attr]
        self.names = list(fn.names) + [f"grad_output {k}" for k in self.outputs]
        self.detached = False  # set by gradient(): no slot of the first gradient required grad
        self.delayed = False  # set by gradient(): the first gradient's graph holds a node that raises

    def __len__(self) -> int:
        return len(self.point)

    def first(self, values: Sequence[torch.Tensor], *,
              create_graph: bool = False) -> tuple[list[torch.Tensor | None], list[torch.Tensor]]:
        """The first gradient at ``values`` (θ, then one cotangent per kept output) and the
        tensors that stand for θ. Raises LayerRaised("backward")."""
        count = len(self.fn)
        outputs, leaves = self.fn.call(values[:count])
        given = list(self.cotangents)
        for k, w in zip(self.outputs, values[count:]):
            given[k] = w
        if len(outputs) != len(given) or any(w is not None and y.shape != w.shape for y, w in zip(outputs, given)):
            raise CheckSkipped("the number or sizes of the floating outputs change when the inputs move by "
                               "a relative 1e-8: finite differences do not apply to this layer")
        pairs = [(y, w) for y, w in zip(outputs, given) if w is not None and y.requires_grad]
        if not pairs:
            return [None] * count, leaves
        with seeded(self.fn.subject.target.seed, self.fn.subject.device):
            try:
                found = torch.autograd.grad([y for y, _ in pairs], leaves, [w.to(y.dtype) for y, w in pairs],
                                            allow_unused=True, create_graph=create_graph)
            except Exception as exc:
                raise LayerRaised("backward", exc, user_trace(exc)) from exc
        return list(found), leaves

    def reset(self) -> None:
        self.fn.reset()

    def terms(self, values: Sequence[torch.Tensor], cotangents: Sequence[torch.Tensor]) -> torch.Tensor:
        """Partial sums of <first gradient, u> in float64: shape (1, CHUNKS)."""
        grads, _ = self.first(values)
        flat = torch.cat([(torch.zeros_like(v) if g is None else g.detach()).to(torch.float64).reshape(-1)
                          for g, v in zip(grads, self.fn.point)])
        return _chunk_sums(flat, cotangents[0]).unsqueeze(0)

    def gradient(self) -> list[torch.Tensor | None]:
        """The double backward at the point: the gradient of F over θ and the cotangents (None
        where F does not depend on a tensor through autograd). Raises LayerRaised: phase
        "backward" (the first one, with ``create_graph=True``) or "double backward"."""
        count = len(self.fn)
        ws = [w.clone().requires_grad_(True) for w in self.point[count:]]
        try:
            grads, leaves = self.first(self.fn.point[:count] + ws, create_graph=True)
            pieces = [(g.reshape(-1) * u).sum() for g, u in zip(grads, self._split(self.contraction))
                      if g is not None and g.requires_grad]
            self.detached = not pieces
            if self.detached:
                return [None] * len(self)
            # @once_differentiable (and a missing double-backward formula) gives the first gradient
            # a node that raises when reached; a gradient over the layer's tensors never reaches
            # the once_differentiable one (it hangs off stand-in leaves), so it would pass for a
            # zero second derivative: look for such nodes instead.
            self.delayed = any(type(node).__name__ in ("DelayedError", "Error") for node in backward_nodes(pieces))
            with seeded(self.fn.subject.target.seed, self.fn.subject.device):
                try:
                    found = torch.autograd.grad(sum(pieces), leaves + ws, allow_unused=True)
                except Exception as exc:
                    raise LayerRaised("double backward", exc, user_trace(exc)) from exc
        finally:
            self.fn.reset()
        return [None if g is None else g.detach() for g in found]

    def _split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return list(flat.split([v.numel() for v in self.fn.point]))


def _no_watch(outputs: list[torch.Tensor]) -> AbstractContextManager[Any]:
    return nullcontext()


def _chunks_used(elements: int) -> int:
    """How many of the CHUNKS partial sums hold elements (the rest sum padding)."""
    if elements == 0:
        return 0
    return math.ceil(elements / math.ceil(elements / CHUNKS))


def _chunk_sums(y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    flat = (y.detach().to(torch.float64) * w.to(torch.float64)).reshape(-1)
    pad = (-flat.numel()) % CHUNKS
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    return flat.reshape(CHUNKS, -1).sum(dim=1)


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
    tensor, or a region of one; ``draw`` numbers independent random directions."""

    draw: int
    step: float
    slot: int | None = None
    region: Region | None = None

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

    @property
    def central_error(self) -> float:
        return abs(self.numeric - self.analytic)

    @property
    def agrees(self) -> bool:
        # A one-sided difference is held to twice the bound: its noise is twice the central's.
        return self.central_error <= self.bound or any(abs(d - self.analytic) <= 2 * self.bound for d in self.one_sided)

    @property
    def kink_crossed(self) -> bool:
        """The central difference failed but a one-sided one agrees: the step crossed a kink."""
        return self.central_error > self.bound and self.agrees

    @property
    def relative_error(self) -> float:
        """The error relative to the spread: of the one-sided difference that agrees when the
        step crossed a kink, else of the central difference."""
        if self.kink_crossed:
            return _ratio(min(abs(d - self.analytic) for d in self.one_sided), self.spread)
        return _ratio(self.central_error, self.spread)

    def to_dict(self) -> dict[str, Any]:
        return {"analytic": self.analytic, "numeric": self.numeric, "one_sided": list(self.one_sided),
                "relative_error": self.relative_error, "step": self.probe.step, "kink_crossed": self.kink_crossed}


def _ratio(a: float, b: float) -> float:
    if b > 0:
        return a / b
    return 0.0 if a == 0 else math.inf


# -- the engine -------------------------------------------------------------------------------


class FiniteDifferences:
    """Directional finite differences of a :class:`LayerFunction` (in float64) with fixed
    cotangents, deterministic for a seed. Numeric results are cached per probe, so checks that
    share an instance (through ``ctx.shared``) never evaluate a direction twice."""

    def __init__(self, fn: LayerFunction, cotangents: Sequence[torch.Tensor], *, seed: int,
                 outputs: Sequence[torch.Tensor] | None = None) -> None:
        """``outputs``: the floating outputs at the point, when a forward there has been run
        already (the analytic pass runs the very same call: same state, stream and flags)."""
        self.fn = fn
        self.cotangents = [w.to(torch.float64) for w in cotangents]
        self.seed = seed
        self.scales = [_scale(v) for v in fn.point]
        self.evaluations = 0
        self._terms: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._directions: dict[str, list[torch.Tensor | None]] = {}
        self._base: torch.Tensor | None = None
        if outputs is not None and len(outputs) == len(self.cotangents):
            self._base = torch.stack([_chunk_sums(y, w) for y, w in zip(outputs, self.cotangents)])
        self._noise: dict[tuple[float, bool, bool], float] = {}

    # -- evaluating --------------------------------------------------------------------------

    def base(self) -> torch.Tensor:
        """Partial sums at the point itself."""
        if self._base is None:
            self._base = self._evaluate(self.fn.point)
        return self._base

    def _evaluate(self, values: Sequence[torch.Tensor]) -> torch.Tensor:
        self.evaluations += 1
        try:
            return self.fn.terms(values, self.cotangents)
        finally:
            self.fn.reset()

    def directions(self, probe: Probe) -> list[torch.Tensor | None]:
        """The perturbation per slot for a unit step (None where the probe leaves a slot alone).
        The last few are kept: a direction is used at several steps and by several checks."""
        key = f"{probe.draw}|{probe.slot}|{probe.region}"
        if key not in self._directions:
            if len(self._directions) >= KEPT_DIRECTIONS:
                self._directions.pop(next(iter(self._directions)))
            self._directions[key] = self._draw(probe)
        return self._directions[key]

    def _draw(self, probe: Probe) -> list[torch.Tensor | None]:
        gen = torch.Generator().manual_seed(zlib.crc32(f"{self.seed}|{probe.draw}|{probe.slot}|{probe.region}".encode()))
        slot = probe.region.slot if probe.region is not None else probe.slot
        result: list[torch.Tensor | None] = []
        for index, (value, scale) in enumerate(zip(self.fn.point, self.scales)):
            if slot is not None and index != slot:
                result.append(None)
                continue
            # Drawn in float32 (seven times faster than float64 on a CPU); a direction only
            # has to be random, and it is exact once widened.
            if probe.region is None:
                u = torch.randn(value.shape, generator=gen).to(torch.float64)
            else:
                u = torch.zeros(value.shape, dtype=torch.float64)
                mask = probe.region.mask(value).cpu()
                u[mask] = 1.0 if probe.region.element is not None else torch.randn(
                    int(mask.sum()), generator=gen).to(torch.float64)
            result.append(u.to(value.device) * scale)
        return result

    def measure(self, probe: Probe) -> tuple[torch.Tensor, torch.Tensor]:
        """Partial sums at the point plus and minus ``step`` along the probe's direction."""
        if probe.key not in self._terms:
            directions = self.directions(probe)
            plus = [v if u is None else v + probe.step * u for v, u in zip(self.fn.point, directions)]
            minus = [v if u is None else v - probe.step * u for v, u in zip(self.fn.point, directions)]
            self._terms[probe.key] = (self._evaluate(plus), self._evaluate(minus))
        return self._terms[probe.key]

    # -- noise -------------------------------------------------------------------------------

    def noise(self, step: float = BASE_STEP, *, refined: bool = False, correlated: bool = False) -> float:
        """Standard deviation of the rounding noise of one evaluation of L (Note [precision]),
        from the second difference S(h) along direction 0 (curvature included: an overestimate
        that costs no evaluation beyond the first direction's), or ``refined`` from
        4·S(h) − S(2h), in which the curvature cancels. Chunks are taken as independent, or
        with ``correlated`` as possibly fully correlated (a rounded intermediate shared by many
        outputs, e.g. a row's norm): then their deviations add up, an upper bound."""
        key = (step, refined, correlated)
        if key not in self._noise:
            base = self.base()
            up, down = self.measure(Probe(0, step))
            residual = up + down - 2 * base
            variance_ratio = 6  # S(h) sums four evaluations' noise: 1 + 1 + 4
            if refined:
                up2, down2 = self.measure(Probe(0, 2 * step))
                residual = 4 * residual - (up2 + down2 - 2 * base)
                variance_ratio = 70  # 16 + 16 + 36 + 1 + 1
            total = 0.0
            for k, w in enumerate(self.cotangents):
                used = _chunks_used(w.numel())
                if used == 0:
                    continue
                # 0.455: the median of a chi-square with one degree of freedom
                chunk = float(residual[k, :used].square().median()) / (variance_ratio * 0.455)
                total += used * math.sqrt(chunk) if correlated else used * chunk
            magnitude = math.sqrt(sum(float(c.square().sum()) for c in base))
            self._noise[key] = max(total if correlated else math.sqrt(total), EPS64 * magnitude)
        return self._noise[key]

    def noise_bound(self, step: float) -> float:
        """Allowed |numeric − analytic| of a central difference from rounding alone. Past the
        base step the noise is measured at the step itself (a layer that rounds to float32
        inside hardly moves under a 1e-8 perturbation, so the base step undercounts it) and
        taken as correlated across chunks: measured on tests/zoo/good_grad_float32_inside.py,
        the independent estimate is 2x low there."""
        if step <= BASE_STEP:
            refined = (BASE_STEP, True, False)
            noise = self._noise[refined] if refined in self._noise else self.noise()
        else:
            noise = max(self.noise(refined=True), self.noise(step, refined=True, correlated=True))
        return _sigmas(noise, step)

    def step_for(self, spread: float, tolerance: float) -> float:
        """The smallest step from BASE_STEP up at which rounding uses at most a tenth of the
        tolerance. The cheap noise estimate decides when it is small enough; else the refined
        one (two more evaluations) sets the step."""
        share = NOISE_SHARE * tolerance * spread
        if spread <= 0 or _sigmas(self.noise(), BASE_STEP) <= share:
            return BASE_STEP
        wanted = BASE_STEP * _sigmas(self.noise(refined=True), BASE_STEP) / share
        return min(max(BASE_STEP, wanted), MAX_STEP)

    # -- comparing ---------------------------------------------------------------------------

    def spread(self, probe: Probe, grads: Sequence[torch.Tensor | None]) -> float:
        """Standard deviation of the analytic directional derivative over the probe's random
        directions: the norm of scale·gradient over the elements the probe perturbs."""
        slot = probe.region.slot if probe.region is not None else probe.slot
        total = 0.0
        for index, (g, value, scale) in enumerate(zip(grads, self.fn.point, self.scales)):
            if g is None or (slot is not None and index != slot):
                continue
            scaled = g.detach().to(torch.float64) * scale
            if probe.region is not None:
                scaled = scaled[probe.region.mask(value).to(scaled.device)]
            total += float(scaled.square().sum())
        return math.sqrt(total)

    def compare(self, probe: Probe, grads: Sequence[torch.Tensor | None], tolerance: float, *,
                outputs: Sequence[int] | None = None, spread: float | None = None) -> Comparison:
        """Analytic directional derivative from ``grads`` against the differences along ``probe``
        (restricted to the output rows in ``outputs`` when given).

        The analytic side is dotted with the direction u itself, not with the perturbation
        (x + h·u) − (x − h·u) as rounded: the two differ by about eps·|x| / h per element,
        which moves the result by ~5e-9 of the spread at h = 1e-8, far below any tolerance.
        Past the base step (Note [precision]) the central difference is extrapolated from h and
        2h, (4·c(h) − c(2h)) / 3, which removes its h² truncation error."""
        rows = slice(None) if outputs is None else list(outputs)

        def sums(step: float) -> tuple[float, float]:
            up, down = self.measure(Probe(probe.draw, step, probe.slot, probe.region))
            return float(up[rows].sum()), float(down[rows].sum())

        h = probe.step
        up, down = sums(h)
        base = float(self.base()[rows].sum())
        numeric = (up - down) / (2 * h)
        noise = self.noise_bound(h)
        if h > BASE_STEP:
            up2, down2 = sums(2 * h)
            numeric = (4 * numeric - (up2 - down2) / (4 * h)) / 3
            noise *= 1.35  # the extrapolation's noise: sqrt(8 + 1/8) / 3 over the central's 1 / sqrt(2)
        one_sided = ((up - base) / h, (base - down) / h)
        analytic = sum(float((g.detach().to(u.device, torch.float64) * u).sum())
                       for g, u in zip(grads, self.directions(probe)) if g is not None and u is not None)
        spread = self.spread(probe, grads) if spread is None else spread
        return Comparison(probe, analytic, numeric, one_sided, spread, tolerance * spread + noise)


def _sigmas(noise: float, step: float) -> float:
    """NOISE_SIGMAS standard deviations of a central difference whose evaluations have ``noise``."""
    return NOISE_SIGMAS * math.sqrt(2) * noise / (2 * step)


def _scale(value: torch.Tensor) -> float:
    """How far a tensor is perturbed, per unit step: its largest finite magnitude, or 1 for zeros."""
    value = value.detach()
    largest = float(value.abs().max()) if value.numel() else 0.0
    if not math.isfinite(largest):
        finite = value[torch.isfinite(value)]
        largest = float(finite.abs().max()) if finite.numel() else 0.0
    return largest if largest > 0 else 1.0


# -- judging a gradient -----------------------------------------------------------------------


@dataclass
class Verdict:
    """Whether an analytic gradient agrees with the differences, and the evidence."""

    passed: bool
    comparisons: list[Comparison]
    step: float
    tolerance: float
    noise: float  # noise bound at ``step`` relative to the spread
    retried: bool = False

    @property
    def worst(self) -> Comparison:
        return max(self.comparisons, key=lambda c: c.relative_error)

    @property
    def precision_limited(self) -> bool:
        return self.step > BASE_STEP

    def summary(self) -> str:
        worst = self.worst
        text = (f"analytic {worst.analytic:.9g} vs numeric {worst.numeric:.9g}, relative error "
                f"{worst.relative_error:.2g} {'<=' if self.passed else '>'} tolerance {self.tolerance:g}")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "tolerance": self.tolerance,
            "step": self.step,
            "noise": self.noise,
            "directions": [c.to_dict() for c in self.comparisons],
            "retried_with_fresh_directions": self.retried,
        }


def judge(fd: FiniteDifferences, grads: Sequence[torch.Tensor | None], tolerance: float, *,
          slot: int | None = None, region: Region | None = None, outputs: Sequence[int] | None = None,
          draws: int = 2, retry: bool = True, step: float | None = None) -> Verdict:
    """Compare ``grads`` with the differences along ``draws`` random directions (over every
    slot, one slot, or a region); a failing set is retried once with fresh directions
    (Note [kinks]). Unless ``step`` is given, the step grows for layers that compute in lower
    precision (Note [precision])."""
    spread = fd.spread(Probe(0, BASE_STEP, slot, region), grads)
    step = fd.step_for(spread, tolerance) if step is None else step
    first = [Probe(d, step, slot, region) for d in range(draws)]

    def compare(probe: Probe) -> Comparison:
        return fd.compare(probe, grads, tolerance, outputs=outputs, spread=spread)

    comparisons = [compare(p) for p in first]
    retried = False
    if retry and not all(c.agrees for c in comparisons):
        retried = True
        fresh = [Probe(draws + d, step, slot, region) for d in range(draws)]
        again = [compare(p) for p in fresh]
        if all(c.agrees for c in again):
            comparisons = again
        else:
            comparisons = comparisons + again
    passed = all(c.agrees for c in comparisons)
    noise = _ratio(fd.noise_bound(step), comparisons[0].spread)
    return Verdict(passed, comparisons, step, tolerance, noise, retried)


# -- finding where a gradient is wrong ----------------------------------------------------------

# What narrowing a wrong tensor down may cost, only when the check has already failed: about
# 40 evaluations (0.6 s for SReLU at 24,24,20,128).
ELEMENTWISE_LIMIT = 24  # tensors up to this size are differenced element by element
VALUE_BINS = 6
SLAB_DIMENSIONS = 2  # the largest dimensions, split into SLABS each
SLABS = 4
SAMPLED_ELEMENTS = 4


@dataclass
class Finding:
    """Where a tensor's gradient disagrees: regions that fail and the worst elements seen."""

    name: str
    verdict: Verdict
    regions: list[str] = field(default_factory=list)
    elements: list[dict[str, Any]] = field(default_factory=list)
    checked_elements: int = 0

    def describe(self, *, brief: bool = False) -> str:
        text = f"{self.name}: directional derivative {self.verdict.summary()}"
        if self.regions:
            text += "; disagreement confined to " + ", ".join(self.regions)
        if self.elements and not brief:
            shown = "; ".join(
                f"{tuple(e['index'])} analytic {e['analytic']:.6g} vs numeric {e['numeric']:.6g}"
                for e in self.elements[:3])
            text += (f"; {len(self.elements)} of {self.checked_elements} element(s) differenced one by one "
                     f"disagree: {shown}")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.name, **self.verdict.to_dict(), "regions": self.regions,
                "elements": self.elements[:10], "checked_elements": self.checked_elements}


def locate(fd: FiniteDifferences, grads: Sequence[torch.Tensor | None], slot: int, tolerance: float,
           verdict: Verdict) -> Finding:
    """Narrow a tensor's disagreement down: element by element for small tensors; for large
    ones by value range (two rounds of quantile bins), else by slabs along the largest
    dimensions, then a few elements sampled from the narrowest failing value range."""
    value = fd.fn.point[slot]
    finding = Finding(fd.fn.names[slot], verdict)
    step = verdict.step
    if value.numel() <= ELEMENTWISE_LIMIT:
        _check_elements(fd, grads, slot, range(value.numel()), tolerance, step, finding)
        return finding
    narrowest: Region | None = None
    low, high = float(value.min()), float(value.max())
    for _ in range(2):
        bins = _value_bins(value, slot, low, high)
        fails = [_region_fails(fd, grads, r, tolerance, step) for r in bins]
        failing = [r for r, f in zip(bins, fails) if f]
        if not failing or len(failing) == len(bins):
            break
        first, last = fails.index(True), len(fails) - 1 - fails[::-1].index(True)
        if not all(fails[first:last + 1]):  # scattered over several value ranges: name them
            finding.regions.append(_shares(failing, value))
            break
        narrowest = Region(slot, low=bins[first].low, high=bins[last].high)
        low, high = narrowest.low, narrowest.high
        if last > first:
            break
    if narrowest is not None and bool(narrowest.mask(value).all()):
        narrowest = None  # every element has that value (a constant tensor): no narrowing
    if narrowest is not None:
        finding.regions.append(_shares([narrowest], value))
    # Slabs only where the values did not explain it (a wrong channel, a wrong time step).
    dims = [] if narrowest is not None else sorted(range(value.dim()), key=lambda d: -value.shape[d])
    for dim in dims[:SLAB_DIMENSIONS]:
        if value.shape[dim] < 2:
            continue
        slabs = _slabs(value, slot, dim)
        failing = [r for r in slabs if _region_fails(fd, grads, r, tolerance, step)]
        if failing and len(failing) < len(slabs):
            finding.regions.append(", ".join(r.describe(value.shape) for r in failing))
    pool = (narrowest.mask(value) if narrowest is not None else torch.ones(value.shape, dtype=torch.bool)).reshape(-1)
    candidates = pool.nonzero().reshape(-1)
    gen = torch.Generator().manual_seed(zlib.crc32(f"{fd.seed}|sample|{slot}".encode()))
    picked = candidates[torch.randperm(candidates.numel(), generator=gen)[:SAMPLED_ELEMENTS]]
    _check_elements(fd, grads, slot, sorted(int(i) for i in picked), tolerance, step, finding)
    return finding


def _shares(regions: Sequence[Region], value: torch.Tensor) -> str:
    return ", ".join(f"{r.describe(value.shape)} ({float(r.mask(value).double().mean()):.2%} of the elements)"
                     for r in regions)


def _value_bins(value: torch.Tensor, slot: int, low: float, high: float) -> list[Region]:
    inside = value[(value >= low) & (value <= high)].reshape(-1).to(torch.float64)
    if inside.numel() > 100_000:
        gen = torch.Generator().manual_seed(slot)
        inside = inside[torch.randint(inside.numel(), (100_000,), generator=gen)]
    edges = torch.quantile(inside, torch.linspace(0, 1, VALUE_BINS + 1, dtype=torch.float64)).tolist()
    edges[0], edges[-1] = low, high
    regions = []
    for a, b in zip(edges[:-1], edges[1:]):
        # Neighbouring bins share an edge value; nudge the upper edge down so none overlap.
        regions.append(Region(slot, low=a, high=b if b == high else math.nextafter(b, -math.inf)))
    return regions


def _slabs(value: torch.Tensor, slot: int, dim: int) -> list[Region]:
    size = value.shape[dim]
    count = min(size, SLABS)
    bounds = [round(i * size / count) for i in range(count + 1)]
    return [Region(slot, dim=dim, start=a, stop=b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _region_fails(fd: FiniteDifferences, grads: Sequence[torch.Tensor | None], region: Region,
                  tolerance: float, step: float) -> bool:
    # One direction and no retry: a kink crossed here only blurs the narrowing a little.
    if not bool(region.mask(fd.fn.point[region.slot]).any()):
        return False
    return not judge(fd, grads, tolerance, region=region, draws=1, retry=False, step=step).passed


def _check_elements(fd: FiniteDifferences, grads: Sequence[torch.Tensor | None], slot: int, elements: Iterable[int],
                    tolerance: float, step: float, finding: Finding) -> None:
    value = fd.fn.point[slot]
    # One element's derivative is judged loosely (1e-3): it only has to tell wrong elements
    # (off by their whole size) from right ones.
    loose = max(tolerance, 1e-3)
    for flat in elements:
        finding.checked_elements += 1
        verdict = judge(fd, grads, loose, region=Region(slot, element=flat), draws=1, retry=False, step=step)
        if not verdict.passed:
            # The probe moved the element by scale per unit step: divide it out to report
            # the derivative with respect to the element itself.
            worst, scale = verdict.worst, fd.scales[slot]
            finding.elements.append({"index": list(element_index(flat, value.shape)),
                                     "analytic": worst.analytic / scale, "numeric": worst.numeric / scale,
                                     "relative_error": worst.relative_error})
    finding.elements.sort(key=lambda e: -abs(e["numeric"] - e["analytic"]))


LOCATED_TENSORS = 2  # tensors whose disagreement is narrowed down (each costs dozens of evaluations)


def diagnose(fd: FiniteDifferences, grads: Sequence[torch.Tensor | None], tolerance: float,
             ) -> tuple[list[Finding], list[str]]:
    """Judge every tensor on its own and narrow down where the failing ones disagree.
    Returns the findings for the wrong tensors and the names of the tensors that agree."""
    wrong: list[Finding] = []
    right: list[str] = []
    step = judge(fd, grads, tolerance).step  # cached: the joint judgement's step
    for slot, name in enumerate(fd.fn.names):
        verdict = judge(fd, grads, tolerance, slot=slot, draws=1, step=step)
        if verdict.passed:
            right.append(name)
        elif len(wrong) < LOCATED_TENSORS:
            wrong.append(locate(fd, grads, slot, tolerance, verdict))
        else:
            wrong.append(Finding(name, verdict))
    return wrong, right

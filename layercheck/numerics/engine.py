"""The finite-difference engine: directional differences of a function in float64, deterministic
for a seed, with the rounding-noise model that bounds how far they may stray.

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

Note [steep at the base step]
    The h² truncation error of a central difference is nothing in float64 unless the layer is
    steep at the point: BatchNorm in training over two values (a network's last stage at one
    pixel, batch of two) maps them to about ±1 through a transition a few 1e-6 wide, where the
    third derivative is ~1e11 times the first. At h = 1e-8 the central difference then strays
    (a whole GhostNet at 32×32 in training: 4% off at 1e-8, 0.04% at 1e-9, right to seven digits
    at 1e-10) while the analytic gradient is right.

    Such curvature also swamps the second differences the rounding noise is measured from (Note
    [precision]), which would grow the step: the wrong way. Rounding noise is the same at any
    spacing, while curvature's share falls as the spacing's square or faster, and a singularity
    within the smallest step by a power between (kornia's DenseSIFTDescriptor takes
    sqrt(p + 1e-10) of its empty histogram bins: 30-50x over two decades; the step grew to 1e-3
    and the layer failed there, analytic 1e5 against differences of 1e2). So when the estimate
    at a hundredth of the base step is below 1/STEEP_FALL of the base step's (and well above
    float64 rounding of the sums), and the point does not sit on kinks (Note [kinks at the
    point], 100x exactly), the layer is steep, not noisy (``steep``): it keeps the base step,
    and its rounding noise is the smaller estimate (GhostNet: 1.5e-4 at 1e-8, 1.2e-11 at 1e-10).
    A layer that rounds to float32 inside, unseen by the trace, also looks less noisy at a
    smaller spacing, where fewer roundings flip, but its estimate falls as the square root of
    the spacing (10x), or to nothing once none flips: it still grows the step.

    A direction that fails at the base step is extrapolated from h and 2h (Richardson, as past
    the base step), then from h/10 and h/100, four evaluations each, for as long as the
    extrapolation's rounding noise (which grows as 1/h) stays within the tolerance itself; it
    passes at the first that agrees within that noise. A wrong gradient is as wrong at every step
    and fails all of them: on a layer not found steep, once two successive differences agree
    with each other (ten times closer than to the analytic value: settled) no smaller step is
    tried, so a wrong gradient costs the two evaluations of the first extrapolation only. A steep
    layer tries every step, and its failure must be settled between two extrapolations: its
    central difference at h can agree with its own extrapolation far from the derivative (a
    segmentation_models_pytorch FPN at 32x32: 112502 and 112682 at 1e-8 against an analytic
    118706, which the central difference at 1e-9 gives to six digits, while the rounding it
    amplifies keeps every extrapolation below 1e-8 from the tolerance). Differences still
    moving when the noise stops the steps (a whole EfficientNet-B0 at 32×32, batch of two: its central
    differences settle only near 1e-12) judge nothing, and the check says so (TooNoisy: a skip)
    rather than blame the gradient.

Note [curvature over large sums]
    steep() asks that the second differences at a hundredth of the base step stay ten times above
    float64's rounding of the sums, so that a layer rounding to float32 inside, whose estimate
    falls to that floor once no rounding flips, is not taken for steep. A layer whose sums are
    large hides its curvature there: sin(3e6·x) + 1e8·x has rounding 2e-7 (its floor), and second
    differences of 6.5e-3 at 1e-8, 6.5e-5 at 1e-9 and 5e-7 at 1e-10, within the floor's tenfold.
    Taken for rounding, they grew the step to 1.9e-7, where the curvature counted as noise took
    3.4% of the derivative: a gradient 3% wrong passed. Curvature falls as the spacing's square,
    a hundredfold a decade; a lower precision's rounding as its square root (threefold), or to
    the floor at once. So second differences that fall at least STEEP_FALL times from the base
    step to its tenth, and stay ten times above the floor there, are curvature too (``_curved``):
    the layer is steep, and its rounding the smallest estimate, at least the floor. The toy now
    passes at 1.6e-7 and a 0.1% error fails.

Note [a grown step that has not settled]
    The step grows where the second differences at the base step are taken for rounding noise.
    Where they are curvature that steep() cannot tell from rounding (at a hundredth of the base
    step they sink into float64's rounding of the sums), it grows into the curvature: a whole
    segmentation_models_pytorch FPN at 32×32, batch of two, whose deepest BatchNorms normalise
    two values each, failed its correct gradient by 0.3-5% at 3.7e-8 (one-sided slopes 7%
    apart). So a direction that fails past the base step is extrapolated at twice the step too
    (two more evaluations, on failing directions only). Truncation left after extrapolation grows
    as the step's fourth power, so between h and 2h it moves fifteen times what it is at h: a
    disagreement within twice that movement (beyond the tolerance and the noise) is the layer's
    steepness and judges nothing, and the direction is unresolved (TooNoisy when every failing
    direction is). A wrong gradient is as wrong at both steps, and fails: on a layer that
    computes in float32 inside (step 1e-3), a 1% error moves 0.18 off the analytic value while
    the two extrapolations move 0.002 apart.

Note [steep below the base step]
    A layer can be linear only far below the base step: a segmentation_models_pytorch U-Net on
    MobileNetV2 at 32×32, batch of two, whose deepest BatchNorms each normalise two nearly equal
    values (the ReLU6 before them clipped both alike), multiplies its input gradient by about
    1/sqrt(eps) per such stage. Its second differences at 1e-8 are its saturation, not rounding,
    and fall only twofold a decade to 1e-10 (a saturated step gives the same second difference at
    any spacing, as rounding does): steep() says no and the step grows to 1e-3, where the saturated
    differences settle at 1e3 against an analytic 3e9, and the right gradient failed ("the right
    gradient is zero") after five minutes of per-tensor diagnosis. Measured along one direction:
    central differences 1e8 at 1e-8, -1e9 at 1e-10, 1.8e9 at 1e-12, and 1.6148e9 at 1e-13 against
    the analytic 1.6139e9.
    So a float64 function whose direction fails past the base step is differenced at the base
    step and every decade below it down to 1e-14 (extrapolated from each step and twice it, with
    the refined noise estimate at that step; two to four evaluations each; once a direction has
    found nothing there, later ones skip the walk). It agrees at the first step where the
    difference and its noise are within the tolerance (a toy saturating within 1e-11: right to
    1e-12 at 1e-14). Two successive differences that agree with each other, the last precise, ten
    times closer than to the analytic value, and not growing tenfold a decade (a saturated
    layer's are all far below its derivative), settle it: the failure stands. A difference that
    comes ten times closer to the analytic value than the failing one, noise included, without
    either, judges nothing: the direction is unresolved (TooNoisy when every failing one is). A
    direction whose one-sided difference agrees crossed a kink: it is not walked. The U-Net's
    rounding, amplified as its gradient is, keeps every step from the tolerance (0.5% off at
    1e-14): skipped in 24 s, saying so. A wrong gradient is as wrong below the base step: it
    settles away, or (the toy: 2x, 1%, 0.01%) fails where it failed.

Note [kinks at the point]
    A point that sits exactly on kinks (ReLUs whose input is exactly 0 there: a residual
    branch whose last BatchNorm weight is initialised to 0 adds exactly nothing, so the next
    ReLU sees the previous one's exact zeros) makes the second differences |h| times the change
    of slope: the noise estimate, taken for rounding, grows the step until it gives up (a whole
    timm ResNet-18: 8.29e-9 at 1e-8, 8.29e-10 at 1e-9, 8.29e-11 at 1e-10). No difference can
    judge there (neither one-sided slope is the subgradient torch picks for every element): the
    verdict raises OnKinks, and the gradient check judges the layer beside the point instead
    (Note [beside the kinks] in reference.py), or skips saying it is kinks, and where they
    come from, instead of rounding noise.

Note [domains]
    An input declared on a domain (``values: positive``, ``uniform`` in [low, high)) must never be
    stepped out of it: a log or sqrt layer gives NaN there. Elements within reach of a bound
    (four times the largest step the engine may take, along the direction drawn for them) get
    their direction turned inward, and a direction that has such elements is differenced on one
    side only, with the second-order one-sided formula (−3·L(x) + 4·L(x + h·u) − L(x + 2h·u)) / 2h:
    the elements near the bound, where a backward wrong near the bound is wrong, are still
    differenced, from inside. Its rounding noise is sqrt(26)/sqrt(2) times the central
    difference's, and the noise estimate uses the one-sided second difference.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import torch

from layercheck.numerics.probes import (
    Comparison,
    DifferentiableFunction,
    Moved,
    Probe,
    chunk_sums,
    chunks_used,
    one_sided_agrees,
    second_difference,
)
from layercheck.support.compare import largest

BASE_STEP = 1e-8  # Note [step]
MAX_STEP = 1e-3  # Note [precision]: larger steps turn truncation error into the problem
# Richardson's extrapolation from h and 2h has this much more noise than the central difference
# at h: sqrt(8 + 1/8) / 3 over the central's 1 / sqrt(2)
RICHARDSON_NOISE = 1.35
# Note [steep at the base step]: the smaller steps a failing direction is extrapolated at, as
# divisors of the base step, for as long as their rounding noise stays within the tolerance
SMALLER_STEPS = (10, 100)
# How much faster than a lower precision's rounding (10x over two decades) the second
# differences must fall from the base step to its hundredth to be the layer's own (steep).
STEEP_FALL = 20
# Note [steep below the base step]: how many steps, in decades from the base step down, a float64
# function that failed past the base step is differenced at (the last, 1e-14, still moves every
# element of a tensor by many units in the last place of its largest)
BELOW_STEPS = 7
FEW_CHUNKS = 8  # an output of fewer elements gives the noise estimate fewer samples than this
NOISE_SIGMAS = 6.0
NOISE_SHARE = 0.1  # of the tolerance that rounding noise may use before the step grows
EPS64 = torch.finfo(torch.float64).eps
# Note [float32 islands] in trace.py: a layer that computes part of its float64 path in a
# lower precision is differenced at a step where every rounding of that precision flips, so
# that the noise estimate sees them all: eps^(1/3), the central difference's optimum (4.9e-3
# for float32), capped so that float16 (0.1) does not step across the layer's curvature.
ISLAND_STEP_LIMIT = 2e-2
# Note [noise ceiling]: differences whose rounding noise would take more than this share of
# the derivative's spread judge nothing; the check says so instead of allowing the noise.
NOISE_CEILING = 0.05
# Two evaluations at the same point differ by less than this (relative to the magnitude of
# the terms) when the layer is a fixed function: on the CPU they are bit-identical.
STABLE = 1e3 * EPS64
# Note [stable at the base step]
#     check_stable took a full-size evaluation at the point itself. But a float64 verdict always
#     evaluates the first direction at the base step, and those two evaluations, second-differenced
#     against the base sums, give 0 for a fixed function up to rounding and the curvature over
#     1e-8 of each tensor's scale (some 1e-16 of the terms, below STABLE), while a function changed
#     since the base sums (by the analytic run's backward, or by every call) moves them by twice
#     that change or more. So where they agree within STABLE no evaluation is made; elsewhere (a
#     change, a steep curvature, a kink crossed, sizes that move) the evaluation at the point
#     decides, as before. A lower-precision function starts at a larger step: always asked so.
# Directions kept for reuse (full-size float64 tensors each): the one a verdict measures and
# then compares with; a direction needed again later is drawn again (seeded, the same values).
KEPT_DIRECTIONS = 1


class TooNoisy(Exception):
    """The layer's rounding noise swamps finite differences at every usable step."""


class OnKinks(TooNoisy):
    """The point sits exactly on kinks (Note [kinks at the point]): no step judges there."""


class Unstable(Exception):
    """The layer gives another output at the same point on another evaluation: something it
    reads was changed between calls. ``change``: the relative difference of the two."""

    def __init__(self, change: float) -> None:
        super().__init__(f"relative change {change:.2g}")
        self.change = change


class NotDifferentiable(Exception):
    """Finite differences do not apply: the function's outputs change in number or size
    when its tensors move by a difference step."""


# -- the engine -------------------------------------------------------------------------------


# Covariant: the engine only reads its function, so differences of a LayerFunction are
# differences of a DifferentiableFunction, and callers keep the concrete type of ``fd.fn``.
F_co = TypeVar("F_co", bound=DifferentiableFunction, covariant=True)


class FiniteDifferences(Generic[F_co]):
    """Directional finite differences of a :class:`DifferentiableFunction` (in float64) with
    fixed cotangents, deterministic for a seed. Numeric results are cached per probe, so checks
    that share an instance (through ``ctx.shared``) never evaluate a direction twice."""

    def __init__(self, fn: F_co, cotangents: Sequence[torch.Tensor], *, seed: int,
                 outputs: Sequence[torch.Tensor] | None = None, precision: torch.dtype = torch.float64) -> None:
        """``outputs``: the floating outputs at the point, when a forward there has been run
        already (the analytic pass runs the very same call: same state, stream and flags).
        ``precision``: the lowest precision the function computes in (Note [float32 islands]
        in trace.py)."""
        self.fn = fn
        self.precision = precision
        self.cotangents = [w.to(torch.float64) for w in cotangents]
        self.seed = seed
        self.scales = [_scale(v) for v in fn.point]
        # Slots left out of joint directions: tensors the analytic backward gives no gradient at
        # all (backward_runs reports them), so that the others are still judged.
        self.excluded: set[int] = set()
        # Elements held at the point in every direction, per slot: an embedding's rows whose gradient
        # PyTorch leaves out or scales by design (Note [padding rows] in numerics/functions.py)
        self.held: dict[int, torch.Tensor] = {}
        # Note [domains]: the interval each slot must stay in, None where it is unbounded
        self.domains: list[tuple[float, float] | None] = list(getattr(fn, "domains", None) or [None] * len(fn.point))
        self._inward: dict[str, bool] = {}
        self.evaluations = 0
        self._terms: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._directions: dict[str, list[torch.Tensor | None]] = {}
        self._base: torch.Tensor | None = None
        if outputs is not None and len(outputs) == len(self.cotangents):
            self._base = torch.stack([chunk_sums(y, w) for y, w in zip(outputs, self.cotangents)])
        self._noise: dict[tuple[float, bool, bool], float] = {}
        self._rounding: float | None = None  # Note [steep at the base step]: set once steepness is measured
        self._nothing_below = False  # Note [steep below the base step]: a direction found nothing there

    def exclude(self, slots: set[int]) -> None:
        """Leave ``slots`` out of joint directions from now on; what was cached for joint
        directions is forgotten (the base sums are kept)."""
        self.excluded |= slots
        self._terms.clear()
        self._directions.clear()
        self._noise.clear()

    # -- evaluating --------------------------------------------------------------------------

    def base(self) -> torch.Tensor:
        """Partial sums at the point itself."""
        if self._base is None:
            self._base = self._evaluate(self.fn.point)
        return self._base

    def _evaluate(self, values: Sequence[torch.Tensor | Moved]) -> torch.Tensor:
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
            self._directions[key] = self._inwards(key, self._draw(probe))
        return self._directions[key]

    def inward(self, probe: Probe) -> bool:
        """Whether the probe's direction is differenced on one side only (Note [domains])."""
        self.directions(probe)
        return self._inward[f"{probe.draw}|{probe.slot}|{probe.region}"]

    def _inwards(self, key: str, directions: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        """Turn the directions of elements near a bound of their domain inward (Note [domains])."""
        reach = 4 * max(MAX_STEP, self.start_step)
        near = False
        for index, (u, value, domain) in enumerate(zip(directions, self.fn.point, self.domains)):
            if u is None or domain is None:
                continue
            low, high = domain
            x = value.detach().to(torch.float64)
            span = reach * u.abs()
            close_low, close_high = x - span <= low, x + span >= high
            if bool(close_low.any()) or bool(close_high.any()):
                near = True
                turned = torch.where(close_low, u.abs(), u)
                directions[index] = torch.where(close_high & ~close_low, -u.abs(), turned)
        self._inward[key] = near
        return directions

    def _draw(self, probe: Probe) -> list[torch.Tensor | None]:
        key = f"{self.seed}|{probe.draw}|{probe.slot}|{probe.region}"
        gen = torch.Generator().manual_seed(zlib.crc32(key.encode()))
        everything = probe.region is None and probe.slot is None
        result: list[torch.Tensor | None] = []
        for index, (value, scale) in enumerate(zip(self.fn.point, self.scales)):
            if probe.leaves(index) or (everything and index in self.excluded):
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
            if index in self.held:
                u = u.masked_fill(self.held[index], 0.0)
            result.append(u.to(value.device).mul_(scale))
        return result

    def measure(self, probe: Probe) -> tuple[torch.Tensor, torch.Tensor]:
        """Partial sums at the point plus and minus ``step`` along the probe's direction — or,
        for a direction differenced on one side (Note [domains]), at plus one and plus two steps."""
        if probe.key not in self._terms:
            second = 2 * probe.step if self.inward(probe) else -probe.step
            first = self._evaluate(self._moved(probe, probe.step))
            self._terms[probe.key] = (first, self._evaluate(self._moved(probe, second)))
        return self._terms[probe.key]

    def _moved(self, probe: Probe, step: float) -> list[torch.Tensor | Moved]:
        """The point moved by ``step`` along the probe's direction, each tensor in its own dtype
        (a layer that cannot run in float64 is differenced in float32), computed by the function
        where it uses it (:class:`Moved`)."""
        return [v if u is None else Moved(v, u, step) for v, u in zip(self.fn.point, self.directions(probe))]

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
            inward = self.inward(Probe(0, step))
            residual = second_difference(base, *self.measure(Probe(0, step)), inward)
            variance_ratio = 6  # S(h) sums four evaluations' noise: 1 + 1 + 4
            if refined:
                residual = 4 * residual - second_difference(base, *self.measure(Probe(0, 2 * step)), inward)
                # one-sided -L(x+4h) + 6 L(x+2h) - 8 L(x+h) + 3 L(x), L(x+2h) in both: 1 + 36 + 64 + 9;
                # central: 16 + 16 + 36 + 1 + 1
                variance_ratio = 110 if inward else 70
            total = 0.0
            for k, w in enumerate(self.cotangents):
                used = chunks_used(w.numel())
                if used == 0:
                    continue
                # 0.455: the median of a chi-square with one degree of freedom. The median of a few
                # chunks is too often far below the variance (of three, one time in six below a
                # quarter of it: torchdiffeq's event solve, 3 outputs, failed 2 of 8 seeds so), so
                # below FEW_CHUNKS the largest counts where it is larger: an overestimate
                squares = residual[k, :used].square()
                largest_square = float(squares.max()) if used < FEW_CHUNKS else 0.0
                chunk = max(float(squares.median()) / 0.455, largest_square) / variance_ratio
                total += used * math.sqrt(chunk) if correlated else used * chunk
            self._noise[key] = max(total if correlated else math.sqrt(total), self.rounding_floor())
        return self._noise[key]

    def rounding_floor(self) -> float:
        """The least rounding noise an evaluation has: float64's epsilon times the magnitude of
        the partial sums at the point (a noise estimate is never below it)."""
        return EPS64 * math.sqrt(sum(float(c.square().sum()) for c in self.base()))

    def noise_bound(self, step: float) -> float:
        """Allowed |numeric − analytic| of a central difference from rounding alone. Past the
        base step the noise is measured at the step itself (a layer that rounds to float32
        inside hardly moves under a 1e-8 perturbation, so the base step undercounts it) and
        taken as correlated across chunks: measured on tests/zoo/good_grad_float32_inside.py,
        the independent estimate is 2x low there."""
        if step <= BASE_STEP and self._rounding is not None:  # a steep layer: its rounding alone
            noise = self._rounding
        elif step <= BASE_STEP:
            refined = (BASE_STEP, True, False)
            noise = self._noise[refined] if refined in self._noise else self.noise()
        else:
            noise = max(self.noise(refined=True), self.noise(step, refined=True, correlated=True))
        return _sigmas(noise, step)

    @property
    def start_step(self) -> float:
        """BASE_STEP for a float64 function; for one that computes in a lower precision inside,
        a step at which every rounding of that precision flips (ISLAND_STEP_LIMIT)."""
        if self.precision == torch.float64:
            return BASE_STEP
        return min(torch.finfo(self.precision).eps ** (1 / 3), ISLAND_STEP_LIMIT)

    def step_for(self, spread: float, tolerance: float) -> float:
        """The smallest step from the start step up at which rounding uses at most a tenth of the
        tolerance. The cheap noise estimate decides when it is small enough; else the refined
        one (two more evaluations) sets the step. A lower-precision function keeps its start
        step: its noise there is measured honestly and bounded (Note [noise ceiling])."""
        if self.start_step > BASE_STEP:
            return self.start_step
        share = NOISE_SHARE * tolerance * spread
        if spread <= 0 or _sigmas(self.noise(), BASE_STEP) <= share:
            return BASE_STEP
        wanted = BASE_STEP * _sigmas(self.noise(refined=True), BASE_STEP) / share
        if wanted <= BASE_STEP or (not self.on_a_kink() and self.steep()):  # kinks: judged elsewhere
            return BASE_STEP
        return min(wanted, MAX_STEP)

    def steep(self) -> bool:
        """Whether the second differences at the base step measure the layer itself, not its
        rounding (Note [steep at the base step]). Rounding noise is the same at any spacing; a
        layer that rounds to a lower precision inside flips fewer roundings at a smaller
        spacing, so its estimate falls as the square root of the spacing (10x over two
        decades), or to nothing once no rounding flips; curvature's share falls as the
        spacing's square or faster, a singularity within the smallest step by some power
        between (kornia's DenseSIFT takes sqrt(p + 1e-10) of its empty bins: 30-50x). So an
        estimate at a hundredth of the base step below 1/STEEP_FALL of the base step's, and
        still well above float64 rounding of the sums, is the layer's: the smallest such
        estimate then stands for the rounding. (Kinks at the point fall 100x too; step_for asks
        on_a_kink first.) Asked only of outputs with enough chunks for a median (the square of a
        single chunk's residual is below a hundredth of its variance one time in twelve)."""
        if self._rounding is None:
            if sum(chunks_used(w.numel()) for w in self.cotangents) < FEW_CHUNKS:
                return False
            at_base = min(self.noise(), self.noise(refined=True))
            spacing = BASE_STEP / SMALLER_STEPS[-1]
            smaller = min(self.noise(spacing), self.noise(spacing, refined=True))
            if 10 * self.rounding_floor() < smaller < at_base / STEEP_FALL:
                self._rounding = smaller
            elif self._curved():
                self._rounding = max(self.rounding_floor(), min(smaller, self.noise(BASE_STEP / 10, refined=True)))
            else:
                return False
        return True

    def _curved(self) -> bool:
        """Whether the second differences fall as the spacing's square from the base step to its
        tenth (at least STEEP_FALL times) and stay well above float64's rounding of the sums there:
        curvature, with rounding at the floor beneath it (Note [curvature over large sums])."""
        smaller = self.noise(BASE_STEP / 10)
        return 10 * self.rounding_floor() < smaller < self.noise() / STEEP_FALL

    def on_a_kink(self) -> bool:
        """Whether the point sits on kinks (Note [kinks at the point]): the second differences
        along the first direction shrink in proportion to the spacing, from the base step to a
        tenth and a hundredth of it (within 30%), as |h| times a change of slope does; rounding
        stays the same and curvature shrinks as the square. Four evaluations; asked only where
        the step would grow for the noise (step_for: kinks are not steepness) and before the
        check gives up on a layer as too noisy."""
        estimates = [self.noise(BASE_STEP / shrink) for shrink in (1, 10, 100)]
        if estimates[-1] <= 10 * self.rounding_floor():
            return False
        return all(0.7 < 10 * smaller / larger < 1.3 for larger, smaller in itertools.pairwise(estimates))

    def check_stable(self) -> None:
        """Raise Unstable when a fresh evaluation at the point differs from the base one: the
        function changed between calls (a value modified in place, by the forward or by a
        backward run before), which differences would otherwise take for rounding noise
        (asked first of the evaluations every verdict makes: Note [stable at the base step])."""
        base = self.base()
        magnitude = float(base.abs().sum())
        if self.start_step == BASE_STEP and self._stable_around(base, magnitude):
            return
        again = self._evaluate(self.fn.point)
        change = float((again - base).abs().sum())
        if not change <= STABLE * magnitude:  # NaN counts as a change
            raise Unstable(change / magnitude if magnitude > 0 else math.inf)

    def _stable_around(self, base: torch.Tensor, magnitude: float) -> bool:
        """Whether the evaluations at plus and minus the base step along the first direction
        extrapolate back to the base sums within STABLE (Note [stable at the base step])."""
        probe = Probe(0, BASE_STEP)
        try:
            up, down = self.measure(probe)
        except NotDifferentiable:  # the verdict says so, where it is judged
            return False
        residual = second_difference(base, up, down, self.inward(probe))
        return float(residual.abs().sum()) <= STABLE * magnitude  # NaN: asked again by an evaluation

    # -- comparing ---------------------------------------------------------------------------

    def spread(self, probe: Probe, grads: Sequence[torch.Tensor | None]) -> float:
        """Standard deviation of the analytic directional derivative over the probe's random
        directions: the norm of scale·gradient over the elements the probe perturbs."""
        total = 0.0
        for index, (g, value, scale) in enumerate(zip(grads, self.fn.point, self.scales)):
            if g is None or probe.leaves(index):
                continue
            g = g.detach().to(torch.float64).reshape(-1)
            if probe.region is not None:
                g = g[probe.region.mask(value).to(g.device).reshape(-1)]
            total += scale * scale * float(torch.dot(g, g))  # one pass, no full-size temporary
        return math.sqrt(total)

    def analytic(self, probe: Probe, grads: Sequence[torch.Tensor | None]) -> float:
        """The analytic directional derivative along the probe's direction: <grads, u>."""
        return sum(float(torch.dot(g.detach().to(u.device, torch.float64).reshape(-1), u.reshape(-1)))
                   for g, u in zip(grads, self.directions(probe)) if g is not None and u is not None)

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
        inward = self.inward(probe)

        def difference(first: float, second: float, step: float) -> float:
            if inward:  # second-order one-sided, from L(x + step·u) and L(x + 2·step·u)
                return (-3 * base + 4 * first - second) / (2 * step)
            return (first - second) / (2 * step)

        numeric = difference(up, down, h)
        noise = self.noise_bound(h) * (math.sqrt(13) if inward else 1.0)  # sqrt(9 + 16 + 1) over sqrt(2)
        analytic = self.analytic(probe, grads)
        spread = self.spread(probe, grads) if spread is None else spread

        def extrapolated(step: float, central: float) -> float:  # Richardson from step and 2·step: no h² error
            up2, down2 = sums(2 * step)
            return (4 * central - difference(up2, down2, 2 * step)) / 3

        one_sided = ((up - base) / h, (down - up) / h) if inward else ((up - base) / h, (base - down) / h)
        unresolved, taken_at = False, None
        if h > BASE_STEP:
            numeric, noise = extrapolated(h, numeric), noise * RICHARDSON_NOISE
            if abs(numeric - analytic) > tolerance * spread + noise:  # Note [a grown step that has not settled]
                moved = abs(extrapolated(2 * h, difference(*sums(2 * h), 2 * h)) - numeric)
                unresolved = abs(numeric - analytic) <= tolerance * spread + noise + 2 * moved
                crossed = one_sided_agrees(one_sided, analytic, tolerance * spread + noise)  # a kink
                if not (unresolved or crossed or self._nothing_below or self.start_step > BASE_STEP):
                    below = self._below(  # Note [steep below the base step]
                        lambda step: extrapolated(step, difference(*sums(step), step)), analytic, tolerance * spread,
                        abs(numeric - analytic), math.sqrt(13) if inward else 1.0)
                    if below is None:
                        self._nothing_below = True
                    else:
                        taken_at, numeric, noise, agreed = below
                        unresolved = not agreed
        elif abs(numeric - analytic) > tolerance * spread + noise:  # Note [steep at the base step]
            tried = [(numeric, noise)]  # (difference, its bound): the central one at h, then extrapolations
            for step in (h, *(h / shrink for shrink in SMALLER_STEPS)):
                bound = RICHARDSON_NOISE * self.noise_bound(step) * (math.sqrt(13) if inward else 1.0)
                if bound > tolerance * spread:  # rounding would take more than the tolerance itself
                    break
                tried.append((extrapolated(step, numeric if step == h else difference(*sums(step), step)), bound))
                if abs(tried[-1][0] - analytic) <= tolerance * spread + bound:
                    break
                if self._rounding is None and _settled(tried, analytic, tolerance * spread):
                    break  # the same number twice: a wrong gradient (a steep layer tries every step)
            agreed = len(tried) > 1 and abs(tried[-1][0] - analytic) <= tolerance * spread + tried[-1][1]
            if agreed or self._rounding is not None:  # a steep layer is judged by its most settled difference
                numeric, noise = tried[-1]
                # settled between two extrapolations: a central difference that strays may agree with its
                # own extrapolation far from the derivative (Note [steep at the base step])
                unresolved = not agreed and not _settled(tried[1:], analytic, tolerance * spread)
        return Comparison(probe, analytic, numeric, one_sided, spread, tolerance * spread + noise, unresolved, taken_at)

    def _below(self, extrapolated: Callable[[float], float], analytic: float, allowed: float, far: float,
               sides: float) -> tuple[float, float, float, bool] | None:
        """Differences extrapolated at the base step and below it, for a float64 function that
        failed past the base step (Note [steep below the base step]): (step, difference, its
        noise bound, whether it agrees) at the first step where one agrees with ``analytic``
        within ``allowed`` and a noise within ``allowed``, or at the one that came closest, ten
        times closer than the failing difference (``far`` off) by more than its noise; None when
        they settle elsewhere (a wrong gradient) or never come so close."""
        tried: list[tuple[float, float]] = []
        closest: tuple[float, float, float, bool] | None = None
        nearest = far / 10  # the distance, noise included, a step must come within to count
        for power in range(BELOW_STEPS):
            step = BASE_STEP / 10**power
            noise = self.noise(step, refined=True)
            bound = RICHARDSON_NOISE * _sigmas(noise, step) * sides
            tried.append((extrapolated(step), bound))
            error = abs(tried[-1][0] - analytic)
            if bound <= allowed and error <= allowed + bound:
                return step, tried[-1][0], bound, True
            if power and _settled_below(tried, analytic):
                return None
            if error + bound < nearest:
                closest, nearest = (step, tried[-1][0], bound, False), error + bound
        return closest


def _settled(tried: Sequence[tuple[float, float]], analytic: float, allowed: float) -> bool:
    """Whether the differences (value, bound) at successive steps disagree with ``analytic``
    for good: the last two agree with each other, and the analytic value is ten times as far
    from the last as they are apart. A wrong gradient is wrong against numbers that have
    settled (on an ordinary layer the central difference and its extrapolation already agree:
    no smaller step is tried); ones still moving when rounding stops the steps judge nothing."""
    if len(tried) < 2:
        return False
    (before, before_bound), (last, last_bound) = tried[-2:]
    apart = abs(last - before) + before_bound + last_bound
    return abs(last - analytic) > allowed + last_bound + 10 * apart


def _settled_below(tried: Sequence[tuple[float, float]], analytic: float) -> bool:
    """Whether the last two differences (value, bound) below the base step settle away from
    ``analytic`` (Note [steep below the base step]): they are ten times closer to each other,
    and the last's noise ten times smaller, than the last is to it, and they do not grow tenfold
    a decade (a saturated layer's differences are all far below its derivative). The earlier
    step's bound is not counted: its noise estimate is still curvature there."""
    (before, _), (last, last_bound) = tried[-2:]
    off = abs(last - analytic)
    return max(abs(last - before), last_bound) <= off / 10 and abs(last - before) <= abs(last) / 10


def _sigmas(noise: float, step: float) -> float:
    """NOISE_SIGMAS standard deviations of a central difference whose evaluations have ``noise``."""
    return NOISE_SIGMAS * math.sqrt(2) * noise / (2 * step)


def _scale(value: torch.Tensor) -> float:
    """How far a tensor is perturbed, per unit step: its largest finite magnitude, or 1 for zeros."""
    magnitude = largest(value)
    return magnitude if magnitude > 0 else 1.0

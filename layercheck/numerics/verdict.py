"""The verdict policy: per-dtype gradient tolerances, and whether an analytic gradient agrees
with the finite differences along a few random directions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from layercheck.numerics.engine import BASE_STEP, NOISE_CEILING, FiniteDifferences, OnKinks, TooNoisy
from layercheck.numerics.probes import Comparison, DifferentiableFunction, Probe, Region
from layercheck.support.compare import ratio

# Tolerances on relative errors, per dtype of the analytic gradient (overridable per dtype
# in the spec's ``tolerance:`` and with ``--tolerance``).
# - float64: error of the directional derivative relative to its spread (Note [directional
#   derivatives] in engine.py). Correct layers measure below 1e-8 (rounding only), broken
#   ones at least 1e-3: 1e-6 sits between with two orders to spare on each side.
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


def gradient_tolerance(dtype: torch.dtype) -> float:
    return GRADIENT_TOLERANCE.get(dtype, 1e-1)


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

    precision: torch.dtype = torch.float64  # the lowest precision the function computes in

    @property
    def precision_limited(self) -> bool:
        return self.step > BASE_STEP

    def summary(self, sides: tuple[str, str] = ("the gradient", "finite differences of the forward")) -> str:
        """The worst direction's two numbers, each named (``sides``: what gives the analytic
        number and what the numeric one): what the gradient gives along it and what finite
        differences of the forward give, and their difference against the tolerance (relative
        to the gradient's size, not to either number: they are projections)."""
        worst = self.worst
        analytic, numeric = distinct(worst.analytic, worst.numeric)
        error = worst.relative_error
        if not math.isfinite(error):
            return (f"along a random direction {sides[0]} gives {analytic}, {sides[1]} {numeric}: {sides[0]} is zero "
                    "along every direction and the differences are not")
        return (f"along a random direction {sides[0]} gives {analytic}, {sides[1]} {numeric}: a difference of "
                f"{error:.2g} × the size of {sides[0]}, {'within' if self.passed else 'over'} the tolerance "
                f"{self.tolerance:g}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "tolerance": self.tolerance,
            "step": self.step,
            "noise": self.noise,
            "directions": [c.to_dict() for c in self.comparisons],
            "retried_with_fresh_directions": self.retried,
            "precision": str(self.precision).removeprefix("torch."),
        }


def distinct(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` with as few significant digits as show them apart (4 to 10)."""
    for digits in range(4, 11):
        shown = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if shown[0] != shown[1]:
            return shown
    return f"{a:.10g}", f"{b:.10g}"


def judge(fd: FiniteDifferences[DifferentiableFunction], grads: Sequence[torch.Tensor | None], tolerance: float, *,
          slot: int | tuple[int, ...] | None = None, region: Region | None = None, outputs: Sequence[int] | None = None,
          draws: int = 2, retry: bool = True, step: float | None = None, tight: bool = False) -> Verdict:
    """Compare ``grads`` with the differences along ``draws`` random directions (over every
    slot, one slot, a group of slots, or a region); a failing set is retried once with fresh
    directions (Note [kinks] in engine.py). Unless ``step`` is given, the step grows for layers
    that compute in lower precision (Note [precision] in engine.py). ``tight``: the joint
    judgement stops after the first direction where it agrees within TIGHT of the tolerance
    (Note [one direction that agrees tightly])."""
    spread = fd.spread(Probe(0, BASE_STEP, slot, region), grads)
    if step is None:
        step = fd.step_for(spread, tolerance)
        noise = ratio(fd.noise_bound(step), spread)
        too_noisy = spread > 0 and noise > NOISE_CEILING and slot is None and region is None
        missed = _missed_derivative(fd, grads) if too_noisy else None
        if missed is not None:  # Note [a derivative the gradient misses]
            spread = missed
            step = fd.step_for(spread, tolerance)
        elif too_noisy:
            if fd.on_a_kink():
                raise OnKinks(
                    "the point sits on kinks: the second differences the noise is measured from shrink in "
                    "proportion to the step (a change of slope exactly at the point, not rounding), as where a "
                    "zero-initialised scale (a residual branch's last BatchNorm weight at 0) keeps a ReLU's input "
                    "at exactly 0; finite differences cannot judge the gradient here: check the layer with that "
                    "initialisation off, or at trained weights")
            raise TooNoisy(f"the layer's rounding noise takes {noise:.2g} of the derivative at the largest usable "
                           f"step ({step:.0e}): finite differences cannot judge its gradient")
    first = [Probe(d, step, slot, region) for d in range(draws)]

    def compare(probe: Probe) -> Comparison:
        return fd.compare(probe, grads, tolerance, outputs=outputs, spread=spread)

    comparisons = [compare(first[0])]
    if not (tight and _agrees_tightly(fd, comparisons[0], tolerance, slot=slot, region=region, outputs=outputs)):
        comparisons += [compare(p) for p in first[1:]]
    retried = False
    if retry and not all(c.agrees for c in comparisons):
        retried = True
        fresh = [Probe(draws + d, step, slot, region) for d in range(draws)]
        again = [compare(p) for p in fresh]
        comparisons = again if all(c.agrees for c in again) else comparisons + again
    passed = all(c.agrees for c in comparisons)
    whole = slot is None and region is None and outputs is None  # the joint judgement, not a diagnosis
    if not passed and whole:
        jump = _jump(fd, [c for c in comparisons if not c.agrees])
        if jump is not None:  # Note [jumps]
            raise TooNoisy(jump)
    if not passed and whole and all(c.unresolved for c in comparisons if not c.agrees):
        worst = max((c for c in comparisons if not c.agrees), key=lambda c: c.relative_error)
        if worst.taken_at is not None:  # Note [steep below the base step]
            where = (f"at the step its rounding noise seemed to need ({step:.2g}) they miss the analytic value, and "
                     f"at steps below {BASE_STEP:g} they come toward it, {worst.relative_error:.2g} of the derivative "
                     f"off at {worst.taken_at:.0e}, without settling before rounding stops them")
        else:
            where = ("down to the smallest step whose rounding noise stays within the tolerance" if step <= BASE_STEP
                     else f"at the step its rounding noise needs ({step:.2g}) and at twice it")
            where += (f" they still move with the step (the last {worst.relative_error:.2g} of the derivative off the "
                      "analytic value)")
        raise TooNoisy(f"the layer is too steep at the point for finite differences: {where}, so they cannot tell its "
                       "gradient right or wrong here (a whole network at a small batch, a normalisation over two "
                       "values?)")
    noise = ratio(fd.noise_bound(step), comparisons[0].spread)
    return Verdict(passed, comparisons, step, tolerance, noise, retried, fd.precision)


# Note [one direction that agrees tightly]
#     A wrong gradient is off by an error vector e (in the scaled coordinates the directions are
#     drawn in), and along a random direction u the differences miss the analytic value by e·u,
#     a normal variable of standard deviation |e|. Correct float64 layers agree to rounding,
#     below 1e-8 of the spread; broken ones are off by 1e-3 of it and more (GRADIENT_TOLERANCE).
#     So where the first direction's central difference, taken in float64 at the base step,
#     agrees within TIGHT of the tolerance (1e-8 of the spread at the default 1e-6), a second
#     direction would judge nothing the first has not: for |e| at the tolerance itself, the
#     first lands that close with a chance of about 0.8 * TIGHT (0.8%); for |e| at 1e-3 of the
#     spread, about 1e-5. The gradient check's joint verdict (``judged`` in numerics/reference.py)
#     then rests on the first direction and saves the second's two full-size float64 forwards.
#     Anything less tight, a step grown for a lower precision, a kink crossed, a difference
#     one-sided or taken below the base step, is judged along both, as before; the diagnosis of
#     a failure (one tensor, one region) always takes its own directions.
TIGHT = 1e-2


def _agrees_tightly(fd: FiniteDifferences[DifferentiableFunction], first: Comparison, tolerance: float, *,
                    slot: int | tuple[int, ...] | None, region: Region | None, outputs: Sequence[int] | None) -> bool:
    """Whether the first direction settles the joint verdict (Note [one direction that agrees tightly])."""
    return (slot is None and region is None and outputs is None and fd.precision == torch.float64
            and first.probe.step == BASE_STEP and first.taken_at is None and not fd.inward(first.probe)
            and first.central_error <= TIGHT * tolerance * first.spread)


# Note [a derivative the gradient misses]
#     The noise the differences may carry is judged against the analytic derivative's spread
#     (the norm of the scaled gradient): a layer whose rounding swamps its derivative at every
#     usable step is skipped as too noisy. A backward whose gradient is zero by cancellation
#     where it should not be (a softmax backward handed ones instead of grad_output: y·(1 − Σy),
#     about 1e-17) has a spread of rounding only, and was skipped so, though the differences
#     saw a derivative of order one, far above their noise: a Hugging Face SEW-D XSoftmax with
#     that one edit was skipped where gradcheck failed it. So before that skip the central
#     difference along the first direction is taken at the base step and at twice it: where the
#     two agree within their noise (a derivative the differences resolve, not curvature), and
#     stand more than MISSED times that noise from zero and from the analytic value, the
#     gradient misses a derivative the layer has, and its size is the spread the comparison is
#     judged against: it fails as any wrong gradient does. A correct layer's differences sit within the noise of
#     its analytic value, so its skip stands; a layer that computes in float32 inside is left
#     alone (its differences at the base step are its rounding).
MISSED = 100.0


def _missed_derivative(fd: FiniteDifferences[DifferentiableFunction],
                       grads: Sequence[torch.Tensor | None]) -> float | None:
    """The size of the directional derivative the differences resolve and the analytic
    gradient misses (Note [a derivative the gradient misses]), or None."""
    probe = Probe(0, BASE_STEP)
    if fd.inward(probe) or fd.precision != torch.float64:  # an island's base-step differences are noise
        return None

    def central(step: float) -> float:
        up, down = fd.measure(Probe(0, step))
        return (float(up.sum()) - float(down.sum())) / (2 * step)

    numeric, wider = central(BASE_STEP), central(2 * BASE_STEP)
    analytic = fd.analytic(probe, grads)
    noise = fd.noise_bound(BASE_STEP)
    resolved = 0 < MISSED * noise < min(abs(numeric), abs(numeric - analytic))
    return abs(numeric) if resolved and abs(numeric - wider) <= 3 * noise else None


# Note [jumps]
#     An output can sit on a discontinuity at the generated point. nnAudio's STFT with
#     output_format="Phase" gives atan2(imaginary, real) per bin, and its first frame, centred on
#     the signal's first sample with reflect padding, is an even signal whose transform is real:
#     its imaginary parts are zero but for rounding, so the phase of a bin whose real part is
#     negative is +π or −π as the sign of a 1e-16 remainder falls, anew at every evaluation. Its
#     differences carried jumps of 2π·w over a step of 1e-8 (numeric 2.5e8 against an analytic
#     -141, both one-sided differences as far off), and its right gradient failed. A derivative
#     moves L in proportion to the step; a jump does not. So where the worst failing direction's
#     central difference is more than JUMP times both its analytic value and their spread, it
#     is differenced again at a hundredth and a ten-thousandth of its step: where L moves
#     there, on either side, by more than a tenth of what it moved at the step (a derivative moves
#     it a hundredth or less), an output jumps at the point, finite differences cannot judge the
#     gradient there, and the check is skipped saying so (as on kinks at the point). A continuous
#     layer's wrong gradient fails as before, however far off (its differences shrink with the
#     step: a backward that returns 1e-5 of the gradient). Float64 layers only: a lower
#     precision's rounding moves L at any step.
#     Several outputs can sit on cuts at once, each flipping as its own rounding falls: at the
#     step two of them jumped (L moved by 5.6), at the smaller steps only the smaller one (0.42,
#     under a tenth of 5.6), and the STFT phase failed on one draw in thirty (--explore 30). So
#     a smaller step shows a jump too where L moves there by more than ten times what the
#     central difference at the step would move it (the difference quotient grows as the step
#     shrinks, where a derivative's stays), and by more than JUMP_FLOOR times the least rounding
#     of L (rounding alone moves L at any step).
JUMP = 1e4
JUMP_FLOOR = 1e3


def _jump(fd: FiniteDifferences[DifferentiableFunction], failing: Sequence[Comparison]) -> str | None:
    """Why the failing directions are an output's jump, not a derivative (Note [jumps]), or None."""
    worst = max(failing, key=lambda c: c.relative_error, default=None)
    if fd.precision != torch.float64 or worst is None or not abs(worst.numeric) > JUMP * max(abs(worst.analytic),
                                                                                              worst.spread):
        return None
    probe = worst.probe
    if fd.inward(probe):  # differenced on one side near a domain's bound: not taken apart here
        return None
    base = float(fd.base().sum())

    def moved(step: float) -> float:
        """How far L moves on either side along the probe's direction at ``step``."""
        up, down = fd.measure(Probe(probe.draw, step, probe.slot, probe.region))
        return max(abs(float(up.sum()) - base), abs(float(down.sum()) - base))

    at_step = moved(probe.step)
    floor = JUMP_FLOOR * fd.rounding_floor()
    found = [(step, change) for step in (probe.step / 100, probe.step / 10_000) for change in [moved(step)]
             if change > 0.1 * at_step or change > max(10 * abs(worst.numeric) * step, floor)]
    if not found:
        return None
    smaller, change = max(found, key=lambda pair: pair[1])
    return (f"an output jumps at the point: along a random direction the sum the differences take moves by "
            f"{at_step:.3g} over a step of {probe.step:.0e} and by {change:.3g} over a step of {smaller:.0e} (a "
            "derivative's change shrinks with the step; this one does not), so some output sits on a "
            "discontinuity at the generated values (an angle at its ±π cut whose imaginary part is zero but "
            "for rounding, a rounding or a comparison exactly at its threshold), and finite differences cannot "
            f"judge the gradient there (the gradient gives {worst.analytic:.6g} along a random direction, the "
            f"differences {worst.numeric:.6g})")

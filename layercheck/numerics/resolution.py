"""How finely float64 finite differences resolve a layer's derivative, beyond the gradient
check's tolerance (Note [what finite differences resolve])."""

from __future__ import annotations

from layercheck.numerics.engine import RICHARDSON_NOISE, FiniteDifferences
from layercheck.numerics.probes import DifferentiableFunction, Probe
from layercheck.numerics.verdict import Verdict

# Note [what finite differences resolve]
#     The gradient check differences float64 at a step of 1e-8 of each tensor's scale, where the
#     rounding of the forward (float64's epsilon over the step) leaves some 1e-8 of the derivative
#     unresolved: enough for its tolerance, 1e-6, not to tell a backward that computes in float32
#     inside (right to 1e-7) from a float64 one. Where there is no autograd derivative of the same
#     forward to hold such a backward to (Note [float64 backward precision] in
#     reference/precision.py: a forward autograd cannot follow), the directions the check measured
#     are differenced again at larger steps, s, 2s and 4s with s = RESOLUTION_STEP, and
#     extrapolated (Richardson, from s and 2s, and from 2s and 4s): the rounding falls with the
#     step and the extrapolation removes the h² error, so on a smooth float64 forward the two
#     extrapolations agree to 1e-11 or better. What the differences resolve is how far the two
#     extrapolations are apart plus the rounding of the first: a forward that computes in float32
#     inside, or one with a kink or steep curvature within 4s, resolves no better than its
#     gradient could be judged at the check's own step, and nothing is concluded from it.
RESOLUTION_STEP = 1e-4


def resolved(fd: FiniteDifferences[DifferentiableFunction], verdict: Verdict) -> tuple[float, float, float] | None:
    """The directions ``verdict`` measured, differenced at larger steps (Note [what finite
    differences resolve]): the worst direction's disagreement with the extrapolated differences,
    what they resolve there (both relative to the gradient's size, the spread of its projections),
    and the step; None where a direction is differenced on one side (near a bound of its domain)
    or over a region, which this does not cover."""
    worst: tuple[float, float, float] | None = None
    for comparison in verdict.comparisons:
        probe = comparison.probe
        if probe.region is not None or fd.inward(probe) or comparison.spread <= 0:
            return None

        def central(step: float, probe: Probe = probe) -> float:
            up, down = fd.measure(Probe(probe.draw, step, probe.slot, probe.region))
            return (float(up.sum()) - float(down.sum())) / (2 * step)

        c1, c2, c4 = (central(k * RESOLUTION_STEP) for k in (1, 2, 4))
        first, second = (4 * c1 - c2) / 3, (4 * c2 - c4) / 3
        rounding = RICHARDSON_NOISE * fd.noise_bound(RESOLUTION_STEP)
        found = (abs(comparison.analytic - first) / comparison.spread,
                 (abs(first - second) + rounding) / comparison.spread, RESOLUTION_STEP)
        if worst is None or found[0] > worst[0]:
            worst = found
    return worst

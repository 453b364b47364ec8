"""What the gradient checks say of a verdict: the message of an agreement, the failure that
explains a disagreement (the wrong tensors and outputs, located by numerics/locate.py, the
tensors that agree, what in the layer's design may explain it), and the "why" of a tensor that
gets no gradient or has no effect."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from layercheck.numerics.engine import BASE_STEP
from layercheck.numerics.probes import Probe
from layercheck.numerics.verdict import Verdict
from layercheck.parent.errors import CheckFailed
from layercheck.support.compare import dtype_name, largest, ratio

if TYPE_CHECKING:
    from layercheck.numerics.reference import Reference
    from layercheck.support.context import Context


# A tensor whose float64 gradient moves the layer's output by less than this share of what
# all tensors together move it (along the scaled random directions of the gradient check) is
# zero to rounding: float64 rounding leaves about 1e-16 of the whole, a tensor with a real
# but weak influence leaves 1e-6 or more.
DEAD_SHARE = 1e-11


def dead_tensors(ctx: Context, ref: Reference) -> list[str]:
    """Notes for inputs and parameters that have no effect on the output: their float64
    gradient, which agrees with finite differences, is zero to rounding on every element."""
    grads = ref.run.grads
    total = ref.fd.spread(Probe(0, BASE_STEP), grads)
    notes = []
    for slot, (name, g) in enumerate(zip(ref.fd.fn.names, grads)):
        if g is None or total == 0 or ref.fd.spread(Probe(0, BASE_STEP, slot), grads) > DEAD_SHARE * total:
            continue
        if name in ref.surrogate_only:  # zero with its surrogate gradient taken as zero, by construction
            continue
        notes.append(f"{name} has no effect on the output (its gradient is zero to rounding: at most "
                     f"{largest(g):.1g} in float64) — {_dead_hint(ctx, name)}")
    return notes


def _dead_hint(ctx: Context, name: str) -> str:
    module = ctx.target.pristine()
    normalisations = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    if (name.startswith("parameter") and name.strip("'").endswith("bias") and module is not None
            and any(isinstance(sub, normalisations) for sub in module.modules())):
        return ("a bias directly before a normalisation is redundant: the normalisation subtracts the mean, and the "
                "bias with it; construct the layer that owns it with bias=False")
    if name.startswith("parameter"):
        return "it is trained for nothing: check that forward uses it as intended"
    return "check that forward uses it as intended"


def disagreement(ref: Reference, what: str, details: dict[str, Any], *, brief: bool = False,
                 eval_mode: bool = False, derivative: str = "gradient") -> CheckFailed:
    """The failure that explains why ``ref``'s verdict failed: the wrong tensors first, with the
    shape of their error (``brief``: without their numbers), then the combined numbers, the
    outputs whose gradient path is wrong, the tensors that agree, and what in the layer's design
    may explain it (``eval_mode``: its gradients agree in eval mode). ``what``: what disagrees."""
    wrong, right, outputs = ref.diagnosis()
    differences = "float32" if ref.float64_failure is not None else "float64"
    # each number named by what gives it
    sides = (("the double backward", "finite differences of the gradient") if derivative == "second derivative" else
             ("the gradient", "finite differences of the forward"))
    together = "all tensors together: " if wrong else ""  # the wrong tensors' own numbers come first
    overall = f"{what} disagree with {differences} finite differences ({together}{ref.verdict.summary(sides)})"
    if wrong:  # what to fix first, the combined numbers after
        lines = [f"wrong {derivative} of " + " | ".join(f.describe(brief=brief, sides=sides) for f in wrong), overall]
    else:
        lines = [overall, "no single tensor stands out: small errors spread over several"]
    if outputs:
        lines.append("through " + " | ".join(outputs))
    right = [name for name in right if name not in ref.surrogate_only]  # zero by construction, not judged
    if right:
        lines.append(f"agree: {', '.join(right)}")
    if ref.detach_hint is not None:
        lines.append(ref.detach_hint)
    if eval_mode:
        lines.append("In eval mode the gradients agree: the mismatch is in training mode only, where the layer treats "
                     "part of its computation as a constant (batch statistics, a value detached or computed under "
                     "no_grad) or its hand-written backward leaves out the training-mode terms")
    elif ref.trace.stop_gradients:
        used = ", ".join(ref.trace.stop_gradients[:3])
        lines.append(f"The layer computes part of its forward under torch.no_grad and uses it ({used}), which "
                     "autograd holds constant while finite differences see it move: if that is by design (an ODE "
                     "solver's adaptive step size, a power iteration), the disagreement may be that, and its size "
                     "says how much the held part matters (a looser --tolerance gradients.float64=... accepts it); by "
                     "mistake, it is the bug")
        details = {**details, "stop_gradients": list(ref.trace.stop_gradients)}
    details = {**details, "evaluations": ref.fd.evaluations, "eval_mode_agrees": eval_mode}
    return CheckFailed(". ".join(lines), **details, wrong=[f.to_dict() for f in wrong], agree=right,
                       wrong_outputs=outputs)


def agreement(verdict: Verdict) -> str:
    """What a verdict that passed says: how many directions agree, the largest error against the
    tolerance, and the step and rounding noise a lower precision inside the layer asked for."""
    worst = verdict.worst
    allowed = f"tolerance {verdict.tolerance:g}" + (" plus rounding noise" if verdict.precision_limited else "")
    if len(verdict.comparisons) == 1:  # Note [one direction that agrees tightly] in numerics/verdict.py
        text = (f"directional derivatives along one random direction agree with float64 finite differences within "
                f"a hundredth of the {allowed} (relative error {worst.relative_error:.1e}): so tightly that a second "
                "direction would judge nothing more")
    else:
        text = (f"directional derivatives along {len(verdict.comparisons)} random directions agree with float64 "
                f"finite differences (largest relative error {worst.relative_error:.1e}, {allowed})")
    if verdict.retried:
        text += "; a first pair of directions crossed a kink, two fresh ones agree"
    if verdict.precision != torch.float64:
        text += (f"; the layer computes in {dtype_name(verdict.precision)} inside (seen in the operations its float64 "
                 f"copy runs), so differences were taken at step {verdict.step:.0e} and its rounding noise "
                 f"({verdict.noise:.1e} of the derivative) is allowed on top of the tolerance")
    elif verdict.precision_limited:
        text += (f"; the float64 copy rounds like a lower precision, so the step was raised to {verdict.step:.0e} "
                 f"and rounding noise ({verdict.noise:.1e} of the derivative) is allowed on top of the tolerance")
    return text


def why_none(name: str) -> str:
    """The usual reasons the tensor ``name`` gets no gradient."""
    if name.startswith("parameter"):
        return (f"{name} (None: forward does not use it, or only through .data/.detach(), or a hand-written "
                "backward returns None for it)")
    return (f"{name} (None: the outputs do not depend on it through autograd: .detach()/.data, "
            "comparisons only, or a hand-written backward returns None for it)")


def count_names(names: Sequence[str]) -> str:
    """The inputs by name and the parameters by name, or counted where there are more than three."""
    inputs = [n for n in names if n.startswith("input")]
    params = [n for n in names if n.startswith("parameter")]
    parts = []
    if inputs:
        parts.append(", ".join(inputs))
    if params:
        parts.append(f"{len(params)} parameter(s)" if len(params) > 3 else ", ".join(params))
    return " and ".join(parts) or "no tensor"


@dataclass(frozen=True)
class Gap:
    """How far one tensor's gradient is from another computation of it: ‖got − expected‖ and
    ‖expected‖, in float64 (both 0 where either gradient is missing: nothing to compare)."""

    difference: float
    size: float

    @classmethod
    def of(cls, got: torch.Tensor | None, expected: torch.Tensor | None) -> Gap:
        if got is None or expected is None:
            return cls(0.0, 0.0)
        if got.shape != expected.shape:
            return cls(math.inf, 0.0)
        e = expected.detach().to(torch.float64)
        return cls(float((got.detach().to(torch.float64) - e).norm()), float(e.norm()))

    @property
    def relative(self) -> float:
        """‖got − expected‖ / ‖expected‖ (as ``relative_difference``)."""
        return ratio(self.difference, self.size)

    def unexplained(self, tolerance: float) -> float:
        """How much of ‖got − expected‖ the tolerance leaves for a rounding floor to explain."""
        return self.difference - tolerance * self.size

    def excess(self, tolerance: float, floor: float) -> float:
        """‖got − expected‖ over what is allowed, tolerance·‖expected‖ + floor: at most 1 agrees."""
        return ratio(self.difference, tolerance * self.size + floor)


def floor_details(floor: float, source: str) -> dict[str, Any]:
    """The rounding floor a difference was judged beyond, for the details (not the message)."""
    return {"rounding_floor": floor, "rounding_floor_source": source} if floor > 0 else {}


def float32_judgement(ctx: Context, ref: Reference, details: dict[str, Any], cause: str | None = None
                      ) -> tuple[str, dict[str, Any]]:
    """The float32 gradients against float32 finite differences (Note [float32 reference] in
    numerics/reference.py): where the layer cannot run in float64, or (``cause``) where its float32
    function is not its float64 one (Note [a function per dtype] in reference/per_dtype.py)."""
    details = {**details, ("other_function" if cause else "float64_failure"): ref.float64_failure}
    why = (f"{cause or f'the layer cannot run in float64 ({ref.float64_failure})'}, so its float32 gradients were "
           "judged against float32 finite differences instead — a weaker check (tolerance "
           f"{ref.verdict.tolerance:g} plus float32 rounding noise)")
    if not ref.verdict.passed:
        raise disagreement(ref, f"{why}; float32 gradients", details)
    ctx.note(why)
    said = ("; float32 finite differences of the float32 layer itself: it computes another function than the "
            "float64 one (see the note)")
    agreed = agreement(ref.verdict).replace("float64 finite", "float32 finite").replace(
        "the layer computes in float32 inside (seen in the operations its float64 copy runs)", "differenced in float32")
    return f"{count_names(ref.fd.fn.names)}: {agreed}{said if cause else ''}", details

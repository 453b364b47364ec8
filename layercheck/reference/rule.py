"""flash-attention's rule: a layer's error against a float64 reference, held to k times the
reference's own error in the layer's dtype (Note [flash-attention's rule])."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Note [flash-attention's rule]
#     flash-attention's tests (Dao-AILab/flash-attention, tests/test_flash_attn.py,
#     test_flash_attn_output) judge a kernel in float16 or bfloat16 against a reference computed
#     in float32 from the same inputs, out_ref, and against the plain PyTorch implementation run
#     in the kernel's own dtype, out_pt: "Check that FlashAttention's numerical error is at most
#     twice the numerical error of a Pytorch implementation",
#         (out - out_ref).abs().max() <= 2 * (out_pt - out_ref).abs().max() (+ 1e-5 in places),
#     for the output and every gradient. The reference's own error in the dtype measures what
#     that dtype costs this computation, so the bar follows the layer: a layer computed in
#     bfloat16 is allowed what bfloat16 costs, no more than K times it. layercheck takes the
#     reference in float64 from the layer's own inputs and parameter values (rounded to the
#     dtype, then widened), measures both errors as the largest absolute difference and as the
#     relative difference of norms, and adds a floor at the tensor's scale (its largest
#     magnitude): half a unit in the last place of the dtype (one rounding the reference did
#     not make: a reference exact in the dtype, a copy or a sign, would otherwise allow
#     nothing) plus FLOAT32_UNITS units of float32 rounding (a float32 accumulation in another
#     order: a kernel's blocked loop summing 1024 values is 4x further from the float64 sum
#     than PyTorch's pairwise float32 sum, and right; flash-attention's own floor, 1e-5 on
#     values of order one, is 84 such units). The second term is what loosens float32; in
#     float16 and bfloat16 the first dwarfs it. A tensor passes when both measures are within
#     the bar.
DTYPE_UNITS = 0.5
FLOAT32_UNITS = 64.0


@dataclass(frozen=True)
class Errors:
    """How far ``actual`` is from ``expected``: the largest absolute difference, and the norm
    of the difference over the norm of ``expected``."""

    max_abs: float
    rel_norm: float

    @classmethod
    def of(cls, actual: torch.Tensor, expected: torch.Tensor) -> Errors:
        diff = actual.detach().to(torch.float64) - expected.detach().to(torch.float64)
        if diff.numel() == 0:
            return cls(0.0, 0.0)
        bad = ~torch.isfinite(diff)
        if bool(bad.any()):
            same = torch.isfinite(expected) == torch.isfinite(actual)
            if not bool(torch.equal(actual.detach().to(torch.float64)[bad], expected.detach().to(torch.float64)[bad])
                        ) or not bool(same.all()):
                return cls(float("inf"), float("inf"))
            diff = torch.where(bad, torch.zeros_like(diff), diff)
        norm = float(torch.linalg.vector_norm(torch.nan_to_num(expected.detach().to(torch.float64), 0.0, 0.0, 0.0)))
        max_abs = float(diff.abs().max())
        rel = float(torch.linalg.vector_norm(diff)) / norm if norm > 0 else 0.0  # all zero: max_abs judges it
        return cls(max_abs, rel)


@dataclass(frozen=True)
class Judged:
    """One tensor judged by the rule: the layer's and the reference's own errors, the bar each
    measure is held to, and which measure fails (None: it passes)."""

    name: str
    layer: Errors
    own: Errors
    allowed: Errors
    failing: str | None

    @property
    def ratio(self) -> float:
        """The layer's error over the reference's own, on the failing measure (or max-abs)."""
        mine, theirs = self._pair(self.failing or "max_abs")
        if theirs == 0:
            return float("inf") if mine > 0 else 1.0
        return mine / theirs

    def _pair(self, measure: str) -> tuple[float, float]:
        return getattr(self.layer, measure), getattr(self.own, measure)

    def message(self, dtype: str, k: float) -> str:
        """"gradient of q: 7.1e-3 from the float64 reference, where the reference itself in
        bfloat16 is 1.2e-3 off: 5.9x (allowed 2x)"."""
        measure = self.failing or "max_abs"
        mine, theirs = self._pair(measure)
        what = "" if measure == "max_abs" else " relative (norm)"
        return (f"{self.name}: {mine:.2g}{what} from the float64 reference, where the reference itself in {dtype} "
                f"is {theirs:.2g} off: {times(self.ratio)} (allowed {k:g}x, and a floor of "
                f"{getattr(self.allowed, measure) - k * theirs:.2g})")


def times(ratio: float) -> str:
    """A ratio as the messages say it ("5.9x", "infinitely worse")."""
    return "infinitely worse" if ratio == float("inf") else f"{ratio:.1f}x"


def floor(expected: torch.Tensor, dtype: torch.dtype) -> Errors:
    """Half a unit in the last place of ``dtype`` and FLOAT32_UNITS of float32's, at the tensor's
    scale (its largest magnitude): Note [flash-attention's rule]."""
    units = DTYPE_UNITS * torch.finfo(dtype).eps + FLOAT32_UNITS * torch.finfo(torch.float32).eps
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    return Errors(units * scale, units)


def judge(name: str, layer: torch.Tensor, own: torch.Tensor, expected: torch.Tensor, *, dtype: torch.dtype,
          k: float) -> Judged:
    """The layer's ``layer`` and the reference's own ``own`` (both in ``dtype``) against the float64
    reference ``expected``: the layer's error at most ``k`` times the reference's, plus the floor."""
    mine, theirs, least = Errors.of(layer, expected), Errors.of(own, expected), floor(expected, dtype)
    allowed = Errors(k * theirs.max_abs + least.max_abs, k * theirs.rel_norm + least.rel_norm)
    failing = next((m for m in ("max_abs", "rel_norm") if not getattr(mine, m) <= getattr(allowed, m)), None)
    return Judged(name, mine, theirs, allowed, failing)


def judge_float64(name: str, layer: torch.Tensor, expected: torch.Tensor, *, tolerance: float) -> Judged:
    """A float64 layer against the float64 reference: a relative error (largest difference over
    the tensor's scale, and of norms) within ``tolerance``."""
    mine = Errors.of(layer, expected)
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    allowed = Errors(tolerance * max(scale, torch.finfo(torch.float64).tiny), tolerance)
    failing = next((m for m in ("max_abs", "rel_norm") if not getattr(mine, m) <= getattr(allowed, m)), None)
    return Judged(name, mine, Errors(0.0, 0.0), allowed, failing)

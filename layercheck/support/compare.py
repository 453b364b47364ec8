"""Comparing tensors the way every check reports it: what, where, both values, the allowance.

Every check that compares two computations of the same tensors calls :func:`assert_close`
with an :class:`Allowance` per tensor; its failure message has one format everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from layercheck.parent.errors import CheckFailed
from layercheck.parent.inputs import FLOATING as DTYPE_NAMES

#: The floating types a check variant may name (``"float32"``) and their torch dtypes.
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}

# (rtol, atol) for values that should agree up to rounding: the same computation done
# twice, or done along another path (predict vs forward, strided vs contiguous input).
# These are torch.testing.assert_close's defaults, which PyTorch's own tests rely on.
ROUNDING = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Allowance:
    """How far an element of ``actual`` may be from ``expected``:
    ``|actual - expected| <= rtol·|expected| + atol + floor``.

    ``floor`` is an absolute allowance for rounding measured on the layer itself (see
    ``layercheck/support/calibration.py``): an element that is zero by cancellation carries the
    rounding of the terms that cancelled, which no multiple of its own size bounds.
    ``source`` says where ``floor`` comes from, for the failure message. ``refine``, when
    given, makes the allowance that applies when this one is exceeded (a floor that costs
    runs of the layer to measure is measured only when a comparison needs it), which may have
    a ``refine`` of its own."""

    rtol: float
    atol: float
    floor: float = 0.0
    source: str = ""
    refine: Callable[[], Allowance] | None = field(default=None, compare=False, repr=False)

    @property
    def absolute(self) -> float:
        return self.atol + self.floor

    def describe(self) -> str:
        text = f"rtol={self.rtol:g}, atol={self.atol:g}"
        if self.floor > 0:
            text += f", rounding floor={self.floor:.3g}" + (f" ({self.source})" if self.source else "")
        return text

    def with_floor(self, floor: float, source: str) -> Allowance:
        """This allowance with ``floor`` (kept when larger than the current one)."""
        if floor <= self.floor:
            return self
        return Allowance(self.rtol, self.atol, floor, source)


#: No difference allowed: :func:`assert_close` with it asks for equal values.
EXACT = Allowance(0.0, 0.0)


def rounding_allowance(dtype: torch.dtype) -> Allowance:
    """torch.testing's tolerance for ``dtype``: the same computation, rounded once more."""
    return Allowance(*ROUNDING.get(dtype, (0.0, 0.0)))


def scaled_allowance(expected: torch.Tensor, rtol: float) -> Allowance:
    """``rtol`` relative, and as absolute part ``rtol`` times the tensor's largest finite
    magnitude: for the same math along another path (another summation order), where an
    element near zero is judged against the scale of its tensor, not its own tiny value."""
    if not (expected.is_floating_point() or expected.is_complex()):
        return EXACT
    return Allowance(rtol, rtol * max(largest(expected), 1e-30))


def real_view(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor as the real tensor of its real and imaginary parts (a last dimension of
    2), which every comparison here reads; any other tensor as it is."""
    return torch.view_as_real(t.resolve_conj()) if t.is_complex() else t


AllowanceFor = Callable[[str, torch.Tensor], Allowance]
"""An allowance per compared tensor, from its name and expected value."""


def describe_shapes(tensors: Sequence[torch.Tensor]) -> list[str]:
    return [f"{tuple(t.shape)} {dtype_name(t.dtype)}" for t in tensors]


def assert_close(
    expected: Sequence[torch.Tensor],
    actual: Sequence[torch.Tensor],
    *,
    what: str,
    allowance: Allowance | AllowanceFor,
    names: Sequence[str] | None = None,
    labels: tuple[str, str] = ("expected", "got"),
) -> None:
    """Raise CheckFailed at the first tensor pair that differs in number, size, dtype or
    value beyond its allowance. ``labels`` name the two sides, e.g. ``("predict", "forward")``."""
    want, have = labels
    if len(expected) != len(actual):
        raise CheckFailed(f"{what}: {want} gives {len(expected)} tensor(s), {have} {len(actual)}",
                          expected=describe_shapes(expected), actual=describe_shapes(actual))
    for i, (e, a) in enumerate(zip(expected, actual)):
        name = names[i] if names else f"output {i}"
        if e.shape != a.shape:
            raise CheckFailed(f"{what}: {name} has size {tuple(a.shape)} ({have}), {tuple(e.shape)} ({want})",
                              tensor=name)
        if e.dtype != a.dtype:
            raise CheckFailed(f"{what}: {name} has dtype {dtype_name(a.dtype)} ({have}), {dtype_name(e.dtype)} "
                              f"({want})", tensor=name)
        allowed = allowance(name, e) if callable(allowance) else allowance
        found = mismatch(e, a, allowed)
        while found is not None and allowed.refine is not None:
            allowed = allowed.refine()
            found = mismatch(e, a, allowed)
        if found is not None:
            # the allowance's parts (a rounding floor and where it comes from) are details
            raise CheckFailed(
                f"{what}: {name} differs at index {tuple(found['index'])}: {have} {found['actual']:.6g}, "
                f"{want} {found['expected']:.6g} ({found['mismatched']} of {found['elements']} elements differ"
                f"{_beyond(allowed)})",
                tensor=name,
                allowance=allowed.describe(),
                **found,
            )


def _beyond(allowed: Allowance) -> str:
    """`` by more than R of their size plus A``: the allowance as a message states it (nothing
    for an exact comparison)."""
    if allowed.rtol == 0 and allowed.absolute == 0:
        return ""
    return f" by more than {allowed.rtol:g} of their size plus {allowed.absolute:.3g}"


def mismatch(expected: torch.Tensor, actual: torch.Tensor, allowed: Allowance) -> dict[str, Any] | None:
    """None when ``actual`` is within ``allowed`` of ``expected``; else where and how much they differ."""
    rtol, atol = allowed.rtol, allowed.absolute
    expected, actual = real_view(expected), real_view(actual)
    if (expected.is_floating_point() and expected.dtype == actual.dtype and expected.shape == actual.shape
            and expected.device == actual.device and _within(expected.detach(), actual.detach(), rtol, atol)):
        # fast path, isclose's test in the tensors' own dtype without float64 copies (the common
        # case: they agree). NaN and infinity fail it and take the exact path below.
        return None
    e = expected.detach().to("cpu", torch.float64)
    a = actual.detach().to("cpu", torch.float64)
    close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    diff = (a - e).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    diff = torch.where(close, torch.zeros_like(diff), diff)
    worst = int(diff.argmax())
    index = unravel(worst, tuple(e.shape))
    found: dict[str, Any] = {
        "index": list(index),
        "expected": float(e.reshape(-1)[worst]),
        "actual": float(a.reshape(-1)[worst]),
        "max_abs_diff": float(diff.max()),
        "mismatched": int((~close).sum()),
        "elements": e.numel(),
        "rtol": allowed.rtol,
        "atol": allowed.atol,
    }
    if allowed.floor > 0:
        found["rounding_floor"] = allowed.floor
    return found


def _within(expected: torch.Tensor, actual: torch.Tensor, rtol: float, atol: float) -> bool:
    """|actual − expected| <= |expected|·rtol + atol everywhere (NaN fails), in two temporaries."""
    bound = expected.abs().mul_(rtol).add_(atol)
    return bool(torch.sub(actual, expected).abs_().le_(bound).all())  # le_ writes 1 or 0 into the difference


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of element ``flat`` of a contiguous tensor of ``shape`` (torch.unravel_index
    costs a heavy import on first use)."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(reversed(index))


def identical(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    """Bit-identical tensors (NaN equal to NaN), same sizes and dtypes."""
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype
        and (torch.equal(x, y) or bool(((x == y) | (x != x) & (y != y)).all()))  # equal() is one fast pass
        for x, y in zip(a, b)
    )


def relative_difference(got: torch.Tensor, expected: torch.Tensor) -> float:
    """``‖got − expected‖ / ‖expected‖`` in float64 (inf for other sizes; 0/0 is 0)."""
    g = real_view(got.detach()).to(torch.float64)
    e = real_view(expected.detach()).to(torch.float64)
    if g.shape != e.shape:
        return math.inf
    return ratio(float((g - e).norm()), float(e.norm()))


def ratio(a: float, b: float) -> float:
    """``a / b``, with 0/0 = 0, a/0 = inf and inf for a NaN (a NaN difference is no agreement)."""
    if math.isnan(a) or math.isnan(b):
        return math.inf
    if b > 0:
        return a / b
    return 0.0 if a == 0 else math.inf


def largest(t: torch.Tensor) -> float:
    """The largest finite magnitude of a tensor (0 for an empty or all non-finite one)."""
    values = real_view(t.detach())
    if not values.numel():
        return 0.0
    low, high = torch.aminmax(values)  # one pass, no temporary
    scale = max(-float(low), float(high))
    if not math.isfinite(scale):
        scale = float(torch.nan_to_num(values.abs(), nan=0.0, posinf=0.0, neginf=0.0).max())
    return scale


def all_finite(t: torch.Tensor) -> bool:
    """Whether every element is finite. A finite sum proves it in one pass (NaN and infinity
    propagate); an overflowing sum of finite values falls back to the element-wise test."""
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return True
    return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def shared_nonfinite_zeroed(got: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``got`` and ``expected`` with the non-finite entries they share (NaN in both, or the
    same infinity) set to 0, so that what is finite can be compared; None when their
    non-finite entries differ in place. When ``expected`` is finite both come back as they are
    (a non-finite ``got`` is then simply wrong)."""
    if got.shape != expected.shape or all_finite(expected):
        return got, expected
    g, e = got.detach(), expected.detach()
    shared = (g.isnan() & e.isnan()) | (g.isinf() & (g == e))
    if bool((~torch.isfinite(g) & ~shared).any()) or bool((~torch.isfinite(e) & ~shared).any()):
        return None
    return g.masked_fill(shared, 0), e.masked_fill(shared, 0)


def nonfinite(t: torch.Tensor, *, ignore: torch.Tensor | None = None) -> str | None:
    """"N non-finite value(s) of M, the first at index I: V" (outside ``ignore``), or None."""
    if all_finite(t):
        return None
    bad = ~torch.isfinite(t)
    if ignore is not None:
        bad &= ~ignore
    if not bool(bad.any()):
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    return f"{int(bad.sum())} non-finite value(s) of {t.numel()}, the first at index {first}: {t[first].item()}"

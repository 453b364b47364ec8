"""Comparing tensors the way every check reports it: what, where, both values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from layercheck.errors import CheckFailed

from layercheck.spec import DTYPE_NAMES

# The floating types a check variant may name ("float32") and their torch dtypes.
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


def rounding_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return ROUNDING.get(dtype, (0.0, 0.0))


def describe_shapes(tensors: Sequence[torch.Tensor]) -> list[str]:
    return [f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in tensors]


def mismatch(expected: torch.Tensor, actual: torch.Tensor, *, rtol: float, atol: float) -> dict[str, Any] | None:
    """None when ``actual`` is close to ``expected``; else where and how much they differ."""
    if (expected.is_floating_point() and expected.dtype == actual.dtype and expected.shape == actual.shape
            and expected.device == actual.device
            and bool(((actual.detach() - expected.detach()).abs_() <= expected.detach().abs() * rtol + atol).all())):
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
    return {
        "index": list(index),
        "expected": float(e.reshape(-1)[worst]),
        "actual": float(a.reshape(-1)[worst]),
        "max_abs_diff": float(diff.max()),
        "mismatched": int((~close).sum()),
        "elements": e.numel(),
        "rtol": rtol,
        "atol": atol,
    }


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of element ``flat`` of a contiguous tensor of ``shape`` (torch.unravel_index
    costs a heavy import on first use)."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(reversed(index))


def assert_close_all(
    expected: Sequence[torch.Tensor],
    actual: Sequence[torch.Tensor],
    *,
    what: str,
    names: Sequence[str] | None = None,
    tolerance: tuple[float, float] | None = None,
    labels: tuple[str, str] = ("expected", "got"),
) -> None:
    """Raise CheckFailed at the first tensor pair that differs in shape, dtype or value.

    ``labels`` name the two sides in messages, e.g. ``("predict", "forward")``."""
    want, have = labels
    if len(expected) != len(actual):
        raise CheckFailed(f"{what}: {len(expected)} tensors expected, {len(actual)} received",
                          expected=describe_shapes(expected), actual=describe_shapes(actual))
    for i, (e, a) in enumerate(zip(expected, actual)):
        name = names[i] if names else f"output {i}"
        if e.shape != a.shape:
            raise CheckFailed(f"{what}: {name} has size {tuple(a.shape)} ({have}), {tuple(e.shape)} ({want})")
        if e.dtype != a.dtype:
            raise CheckFailed(f"{what}: {name} has dtype {a.dtype} ({have}), {e.dtype} ({want})")
        rtol, atol = tolerance or rounding_tolerance(e.dtype)
        found = mismatch(e, a, rtol=rtol, atol=atol)
        if found is not None:
            raise CheckFailed(
                f"{what}: {name} differs at index {tuple(found['index'])}: {have} {found['actual']:.6g}, "
                f"{want} {found['expected']:.6g} ({found['mismatched']} of {found['elements']} elements "
                f"differ beyond rtol={rtol:g}, atol={atol:g})",
                tensor=name,
                **found,
            )

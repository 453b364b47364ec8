"""Where a wrong gradient disagrees: each tensor judged on its own, then the failing ones
narrowed down by value range, by slabs along their largest dimensions, and element by element.

Note [tensors judged in groups]
    Judging each tensor on its own costs at least two evaluations per tensor, two to four times
    that where a direction fails. A whole network has hundreds: a segmentation_models_pytorch
    U-Net on MobileNetV2 has 189, at 160 ms an evaluation, and its diagnosis ran past the check's
    five-minute limit, so a failure came out as a timeout ("does the layer hang?"). So a layer
    with more than GROUPED tensors has them judged first in groups of about the square root of
    their number, one direction over the group's tensors at once (retried once, as a tensor's
    is); only the tensors of a failing group are judged one by one. One wrong tensor among 189
    then costs 14 group judgements and 14 tensor ones instead of 189; every tensor wrong, 203.
    A group's error is relative to the group's gradient, at most the whole point's: a tensor
    whose error failed the whole point fails its group as surely as the whole point, and the
    tensors of a passing group agree. Twenty tanh layers (41 tensors), two of them wrong: 75
    evaluations instead of 111, diagnosis included; a timm ResNet-18 with a head whose bias
    gradient is 1.5 times too large (63 tensors): 80 instead of 264 (13 s instead of 36 s).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import torch

from layercheck.numerics.engine import FiniteDifferences
from layercheck.numerics.patterns import explain
from layercheck.numerics.probes import DifferentiableFunction, Region, element_index
from layercheck.numerics.subsets import factor_on_part
from layercheck.numerics.verdict import Verdict, judge
from layercheck.parent import limits
from layercheck.support.context import Context

# What narrowing a wrong tensor down may cost, only when the check has already failed: about
# 40 evaluations (0.6 s for SReLU at 24,24,20,128). A layer slow to evaluate (Triton kernels
# under the interpreter: a gated MLP at 4,8,16 spent 30 s narrowing two tensors down, and a
# wrong gradient of a library's kernels up to 364 s, past the check's time limit) gets at most
# DIAGNOSIS_SHARE of the time its check has left when the diagnosis begins (limits.check_clock),
# less AFTER_DIAGNOSIS times what the check had spent until then: the gradient check goes on
# after its diagnosis (the eval-mode reference, the float32 comparison), which cost the gated MLP
# 8 s after 3.5 s before it. Past that, what is narrowed down so far is reported and the rest is
# not narrowed down, so that a wrong gradient is a failure naming the tensor, not a timeout.
DIAGNOSIS_SHARE = 0.5
AFTER_DIAGNOSIS = 2.5
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
    pattern: str | None = None  # how the gradient relates to the right one (numerics/patterns.py)
    cut_short: bool = False  # narrowing stopped at the diagnosis' share of the time limit

    def describe(self, *, brief: bool = False,
                 sides: tuple[str, str] = ("the gradient", "finite differences of the forward")) -> str:
        text = f"{self.name}: "
        if self.pattern:  # said of the derivative judged (the double backward's, for gradgrad)
            text += f"{sides[0]}{self.pattern.removeprefix('the gradient')}; " if self.pattern.startswith(
                "the gradient ") else f"{self.pattern}; "
        text += self.verdict.summary(sides)
        if self.regions:
            text += "; disagreement confined to " + ", ".join(self.regions)
        if self.elements and not brief:
            shown = "; ".join(
                f"at {tuple(e['index'])} {sides[0].removeprefix('the ')} {e['analytic']:.6g}, finite differences "
                f"{e['numeric']:.6g}"
                for e in self.elements[:3])
            text += (f"; {len(self.elements)} of {self.checked_elements} element(s) differenced one by one "
                     f"disagree: {shown}")
        if self.cut_short:
            text += ("; narrowed down no further: the diagnosis had spent its share of the check's time limit (the "
                     "layer is slow to evaluate; a larger --timeout narrows it down further)")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.name, **self.verdict.to_dict(), "pattern": self.pattern, "regions": self.regions,
                "elements": self.elements[:10], "checked_elements": self.checked_elements, "cut_short": self.cut_short}


def locate(fd: FiniteDifferences[DifferentiableFunction], grads: Sequence[torch.Tensor | None], slot: int,
           tolerance: float,
           verdict: Verdict, *, stop_at: float | None = None) -> Finding:
    """Narrow a tensor's disagreement down: element by element for small tensors; for large
    ones by value range (two rounds of quantile bins), else by slabs along the largest
    dimensions, then a few elements sampled from the narrowest failing value range. Past
    ``stop_at`` (``time.monotonic()``) no further evaluation is made: the finding is cut short."""
    value = fd.fn.point[slot]
    finding = Finding(fd.fn.names[slot], verdict)
    step = verdict.step

    def fails(region: Region) -> bool | None:  # None: no time left to judge it
        return None if _late(stop_at, finding) else _region_fails(fd, grads, region, tolerance, step)

    if value.numel() <= ELEMENTWISE_LIMIT:
        _check_elements(fd, grads, slot, range(value.numel()), tolerance, step, finding, stop_at)
        return finding
    narrowest: Region | None = None
    low, high = float(value.min()), float(value.max())
    for _ in range(2):
        bins = _value_bins(value, slot, low, high)
        judged = [fails(r) for r in bins]
        if finding.cut_short:
            break
        failing = [r for r, f in zip(bins, judged) if f]
        if not failing or len(failing) == len(bins):
            break
        first, last = judged.index(True), len(judged) - 1 - judged[::-1].index(True)
        if not all(judged[first:last + 1]):  # scattered over several value ranges: name them
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
    dims = [] if narrowest is not None or finding.cut_short else sorted(range(value.dim()),
                                                                         key=lambda d: -value.shape[d])
    for dim in dims[:SLAB_DIMENSIONS]:
        if value.shape[dim] < 2:
            continue
        slabs = _slabs(value, slot, dim)
        judged = [fails(r) for r in slabs]
        failing = [r for r, f in zip(slabs, judged) if f]
        if finding.cut_short:
            break
        if failing and len(failing) < len(slabs):
            finding.regions.append(", ".join(r.describe(value.shape) for r in failing))
    pool = narrowest.mask(value) if narrowest is not None else torch.ones(value.shape, dtype=torch.bool)
    _check_elements(fd, grads, slot, _sampled(pool, fd.seed, slot), tolerance, step, finding, stop_at)
    return finding


def _sampled(pool: torch.Tensor, seed: int, slot: int) -> list[int]:
    """A few flat indices of the elements ``pool`` (a mask) holds, drawn from the run's seed."""
    candidates = pool.reshape(-1).nonzero().reshape(-1).cpu()
    gen = torch.Generator().manual_seed(zlib.crc32(f"{seed}|sample|{slot}".encode()))
    return sorted(int(i) for i in candidates[torch.randperm(candidates.numel(), generator=gen)[:SAMPLED_ELEMENTS]])


def _late(stop_at: float | None, finding: Finding) -> bool:
    """Whether the diagnosis' time is up; then the finding says it was cut short."""
    if stop_at is not None and time.monotonic() >= stop_at:
        finding.cut_short = True
    return finding.cut_short


def _shares(regions: Sequence[Region], value: torch.Tensor) -> str:
    return ", ".join(f"{r.describe(value.shape)} ({float(r.mask(value).double().mean()):.2%} of the elements)"
                     for r in regions)


def _value_bins(value: torch.Tensor, slot: int, low: float, high: float) -> list[Region]:
    inside = value[(value >= low) & (value <= high)].reshape(-1).to("cpu", torch.float64)  # beside its CPU quantiles
    if inside.numel() > 100_000:
        gen = torch.Generator().manual_seed(slot)
        inside = inside[torch.randint(inside.numel(), (100_000,), generator=gen)]
    edges = torch.quantile(inside, torch.linspace(0, 1, VALUE_BINS + 1, dtype=torch.float64)).tolist()
    edges[0], edges[-1] = low, high
    regions = []
    for a, b in pairwise(edges):
        # Neighbouring bins share an edge value; nudge the upper edge down so none overlap.
        regions.append(Region(slot, low=a, high=b if b == high else math.nextafter(b, -math.inf)))
    return regions


def _slabs(value: torch.Tensor, slot: int, dim: int) -> list[Region]:
    size = value.shape[dim]
    count = min(size, SLABS)
    bounds = [round(i * size / count) for i in range(count + 1)]
    return [Region(slot, dim=dim, start=a, stop=b) for a, b in pairwise(bounds) if b > a]


def _region_fails(fd: FiniteDifferences[DifferentiableFunction], grads: Sequence[torch.Tensor | None], region: Region,
                  tolerance: float, step: float) -> bool:
    # One direction and no retry: a kink crossed here only blurs the narrowing a little.
    if not bool(region.mask(fd.fn.point[region.slot]).any()):
        return False
    return not judge(fd, grads, tolerance, region=region, draws=1, retry=False, step=step).passed


def _check_elements(fd: FiniteDifferences[DifferentiableFunction], grads: Sequence[torch.Tensor | None], slot: int,
                    elements: Iterable[int],
                    tolerance: float, step: float, finding: Finding, stop_at: float | None = None) -> None:
    value = fd.fn.point[slot]
    # One element's derivative is judged loosely (1e-3): it only has to tell wrong elements
    # (off by their whole size) from right ones.
    loose = max(tolerance, 1e-3)
    for flat in elements:
        if _late(stop_at, finding):
            break
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
# Note [tensors judged in groups]: a layer with more tensors than this has them judged in groups
# of about the square root of their number before the failing groups' tensors are judged one by one
GROUPED = 16


def diagnose(fd: FiniteDifferences[DifferentiableFunction], grads: Sequence[torch.Tensor | None], tolerance: float,
             sizes: Mapping[int, str] | None = None) -> tuple[list[Finding], list[str]]:
    """Judge every tensor on its own, say how the failing ones relate to the right gradient
    (numerics/patterns.py; ``sizes`` names the input's sizes a factor may come from) and
    narrow down where they disagree. Returns the findings for the wrong tensors and the
    names of the tensors that agree. Many tensors are judged in groups first (Note [tensors
    judged in groups])."""
    wrong: list[Finding] = []
    right: list[str] = []
    clock = limits.check_clock()
    stop_at = None
    if clock is not None:
        spent, left = clock
        stop_at = time.monotonic() + DIAGNOSIS_SHARE * max(0.0, left - AFTER_DIAGNOSIS * spent)
    step = judge(fd, grads, tolerance).step  # cached: the joint judgement's step
    slots = [slot for slot in range(len(fd.fn.names)) if slot not in fd.excluded]  # excluded: no gradient at all
    suspects = set(slots)
    if len(slots) > GROUPED:
        size = math.isqrt(len(slots) - 1) + 1
        for group in (tuple(slots[k:k + size]) for k in range(0, len(slots), size)):
            if judge(fd, grads, tolerance, slot=group, draws=1, step=step).passed:
                suspects -= set(group)
    for slot in slots:
        name = fd.fn.names[slot]
        verdict = judge(fd, grads, tolerance, slot=slot, draws=1, step=step) if slot in suspects else None
        if verdict is None or verdict.passed:
            right.append(name)
        elif len(wrong) < LOCATED_TENSORS:
            finding = Finding(name, verdict)
            pattern = None if _late(stop_at, finding) else explain(fd, grads, slot, tolerance, step, sizes)
            if pattern is None and not finding.cut_short:  # a constant factor on part of it: a branch, a half
                part = factor_on_part(fd, grads, slot, tolerance, step)
                if part is not None:  # and a few of its elements differenced one by one, as evidence
                    pattern, mask = part
                    _check_elements(fd, grads, slot, _sampled(mask, fd.seed, slot), tolerance, step, finding,
                                    stop_at)
            # A pattern over the whole tensor needs no narrowing down.
            if pattern is None and not finding.cut_short:
                finding = locate(fd, grads, slot, tolerance, verdict, stop_at=stop_at)
            finding.pattern = pattern
            wrong.append(finding)
        else:
            wrong.append(Finding(name, verdict))
    return wrong, right


_LETTERS = {"B": "the batch size", "C": "the number of channels", "T": "the sequence length",
            "S": "a spatial size", "U": "the size of a dimension"}


def size_names(ctx: Context) -> dict[int, str]:
    """The sizes of the inputs a wrong constant factor is likely made of: the batch size, the
    channels, each dimension, the elements averaged over per channel, all elements."""
    names: dict[int, str] = {}
    for layout in ctx.layouts:
        per_channel = layout.numel // max(1, math.prod(s for s, f in zip(layout.size, layout.format) if f == "C"))
        for size, letter in zip(layout.size, layout.format):
            names.setdefault(size, _LETTERS.get(letter, "the size of a dimension"))
        names.setdefault(per_channel, "the number of elements per channel (batch × positions)")
        names.setdefault(layout.numel, "the number of input elements")
    return names

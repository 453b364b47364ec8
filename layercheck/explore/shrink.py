"""Shrinking a failure to its smallest input (Note [shrinking]).

# Note [shrinking]
#     As hypothesis's shrinker does, a fixed order of simplifying passes, each change kept only
#     while the same check still fails on it: every dimension but C (the layer's channels) set
#     to 1, 2, half its size or one less, the batch cut to single observations; then the values of
#     standard-normal inputs rounded to one decimal, then to integers, then parts of them set to
#     zero. Where the failure says which elements fail (the gradient check's entries differenced
#     one by one, the observations check's observation: ``focus``), every dimension is first cut
#     to the failing element, at once and one by one, before the generic cuts from either end,
#     which lose an element in the middle. A check whose verdict does not depend on the values
#     (``values=False``: state_dict, copy, ...) is shrunk in its sizes only, and its input shown
#     as a layout. The passes repeat until none makes progress or the
#     time runs out; the input then is the smallest found, and says whether it stopped short.
#     The same inputs at another size are checked by a fresh target built for them
#     (Target.with_inputs): where the layer's parameters follow the sizes, that size is not tried.
#     Integer and boolean inputs are often lengths or indices into another input's dimensions
#     (CTCLoss's input_lengths): cutting those dimensions would hand the layer lengths beyond its
#     input, which native kernels do not all check (CTCLoss corrupts the heap). With such an input
#     only the batch is cut, every input at once, which keeps each observation whole; explored
#     draws likewise vary only the batch (engine.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from layercheck.explore.draws import Group, groups, resized
from layercheck.parent.inputs import InputSpec, Values
from layercheck.parent.result import CheckResult

Fails = Callable[[Sequence[InputSpec], Sequence[torch.Tensor]], "CheckResult | None"]
"""Runs the failing check on these inputs: its failed result, or None where it does not fail."""

Focus = Callable[[CheckResult], "list[dict[int, int]]"]
"""Where a failed result says its failing elements are: per input, dimension -> index (empty
where it does not say)."""

SHOWN_VALUES = 24  # an input with more elements is shown by its sizes only
KEPT_VALUES = 4096  # an input with more elements is not kept in the store or the report


@dataclass
class Shrunk:
    """The smallest failing input found: its inputs, their values, the check's result there,
    how many inputs were tried, for how long, and whether the passes ran to the end."""

    specs: tuple[InputSpec, ...]
    tensors: list[torch.Tensor]
    result: CheckResult | None  # None: no smaller input failed
    tries: int = 0
    seconds: float = 0.0
    complete: bool = True
    values: bool = True  # whether the values matter to the check (shown), or only the sizes

    @property
    def text(self) -> str:
        """The smallest input as the message shows it: layouts, and the values where they matter."""
        return describe(self.specs, self.tensors, values=self.values)

    def to_dict(self) -> dict[str, Any]:
        """The report's ``details["shrunk"]``: the store keeps it as it is."""
        return {"inputs": [_input_dict(spec) for spec in self.specs],
                "values": [t.tolist() if t.numel() <= KEPT_VALUES else None for t in self.tensors],
                "text": self.text, "message": self.result.message if self.result else "",
                "tries": self.tries, "seconds": round(self.seconds, 3), "complete": self.complete}


def shrink(specs: Sequence[InputSpec], tensors: Sequence[torch.Tensor], fails: Fails, *,
           deadline: float, found: CheckResult | None = None, values: bool = True,
           focus: Focus | None = None) -> Shrunk:
    """The smallest input on which ``fails`` still fails, from ``specs`` and ``tensors`` (which
    fail with ``found``, or are to be found failing), trying until ``time.monotonic()`` passes
    ``deadline``. With an integer or boolean input only the batch is cut; ``values=False``: the
    sizes only; ``focus``: where the latest failure's failing elements are, cut to first
    (Note [shrinking])."""
    start = time.monotonic()
    best = Shrunk(tuple(specs), list(tensors), found, values=values)
    progress = True
    while progress:
        progress = False
        where = focus(best.result) if focus is not None and best.result is not None else []
        for candidate in _candidates(best.specs, best.tensors, values=values, focus=where):
            if time.monotonic() > deadline:
                best.complete = False
                best.seconds = time.monotonic() - start
                return best
            best.tries += 1
            result = fails(*candidate)
            if result is not None:
                best.specs, best.tensors, best.result = candidate[0], candidate[1], result
                progress = True
                break
    best.seconds = time.monotonic() - start
    return best


Inputs = tuple[tuple[InputSpec, ...], list[torch.Tensor]]


def _candidates(specs: tuple[InputSpec, ...], tensors: list[torch.Tensor], *, values: bool = True,
                focus: Sequence[dict[int, int]] = ()) -> Iterator[Inputs]:
    """Simpler inputs than these, simplest first: cut to the failing elements (``focus``), cut in
    their sizes, then (``values``) rounded and partly zeroed."""
    batch_only = not all(spec.floating for spec in specs)
    cuttable = [group for group in groups(specs)
                if group.label != "C" and group.size > 1 and not (batch_only and group.label != "B")]
    yield from _focused(specs, tensors, cuttable, focus)
    for group in cuttable:
        n = group.size
        for k in sorted({1, 2, n // 2, n - 1} - {0, n}):
            yield _cut(specs, tensors, group, 0, k)
        if group.label == "B":  # the batch cut to the failing observation
            for first in range(1, min(n, 8)):
                yield _cut(specs, tensors, group, first, 1)
        for k in sorted({n // 2, n - 1} - {0, n}):  # the end of a dimension (a last partial tile)
            yield _cut(specs, tensors, group, n - k, k)
    if not values:
        return
    rounders = (lambda x: torch.round(x * 10) / 10, torch.round)
    for rounder in rounders:
        changed = [rounder(x) if _plain(spec) else x for spec, x in zip(specs, tensors)]
        if all(y.any() or not x.any() for x, y in zip(tensors, changed)) and any(
                not torch.equal(a, b) for a, b in zip(changed, tensors)):
            yield specs, changed
    for index, (spec, x) in enumerate(zip(specs, tensors)):
        if not _plain(spec) or x.numel() < 2:
            continue
        for parts in (2, 4, 8):
            for chunk in torch.arange(x.numel()).chunk(parts):
                flat = x.reshape(-1).clone()
                if not flat[chunk].any():
                    continue
                flat[chunk] = 0.0
                if not flat.any():  # an input of zeros only: a point no check judges well
                    continue
                yield specs, [*tensors[:index], flat.reshape(x.shape), *tensors[index + 1:]]


def _focused(specs: tuple[InputSpec, ...], tensors: list[torch.Tensor], cuttable: Sequence[Group],
             focus: Sequence[dict[int, int]]) -> Iterator[Inputs]:
    """The inputs cut to the failing elements: every dimension that holds one cut to it, all at
    once, then one group at a time (a group's other dimensions, in other inputs or beside it, cut
    where the first failing element lies along the group's first such dimension)."""
    starts: list[tuple[Group, dict[tuple[int, int], int]]] = []
    for group in cuttable:
        at = {(i, d): where[d] for i, where in enumerate(focus) for (j, d) in group.where
              if j == i and d in where and 0 <= where[d] < group.size}
        if at:
            first = next(iter(at.values()))
            starts.append((group, {place: at.get(place, first) for place in group.where}))
    if len(starts) > 1:
        cut = specs, tensors
        for group, start in starts:
            cut = _cut(*cut, group, start, 1)
        yield cut
    for group, start in starts:
        yield _cut(specs, tensors, group, start, 1)


def _cut(specs: tuple[InputSpec, ...], tensors: list[torch.Tensor], group: Group,
         start: int | dict[tuple[int, int], int], length: int) -> Inputs:
    """The inputs with the group's dimensions cut to ``start:start + length`` (``start``: one for
    all, or one per (input, dimension))."""
    out = list(tensors)
    for index, dim in group.where:
        begin = start if isinstance(start, int) else start[(index, dim)]
        out[index] = out[index].narrow(dim, begin, length).clone()  # a group may hold two dims of one input
    return resized(specs, {group: length}), out


def _plain(spec: InputSpec) -> bool:
    """A floating standard-normal input: rounding and zeros stay within its domain."""
    return spec.floating and spec.values == Values()


def describe(specs: Sequence[InputSpec], tensors: Sequence[torch.Tensor], *, values: bool = True) -> str:
    """``1,1,3:BCU, x = [[[0.5, -2.0, 3.0]]]``: the layouts, and (``values``) the values of small inputs."""
    layouts = " ".join(str(spec.layout) for spec in specs)
    positional = sum(spec.name is None for spec in specs)
    shown = []
    for index, (spec, x) in enumerate(zip(specs, tensors) if values else ()):
        name = spec.name or ("x" if positional == 1 else f"x{index + 1}")
        if x.numel() <= SHOWN_VALUES:
            shown.append(f"{name} = {_values(x.tolist())}")
    return ", ".join([layouts, *shown])


def _values(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_values(v) for v in value) + "]"
    if isinstance(value, (bool, int)):
        return str(value)
    return repr(float(f"{value:.4g}") + 0.0)  # + 0.0: -0.0 shows as 0.0


def _input_dict(spec: InputSpec) -> dict[str, Any]:
    record: dict[str, Any] = {"size": list(spec.layout.size), "format": spec.layout.format}
    if spec.name is not None:
        record["name"] = spec.name
    if spec.dtype != "float":
        record["dtype"] = spec.dtype
    return record

"""Layouts: the size and meaning of every dimension of one input (SPEC section 3)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from layercheck.parent.errors import LayoutError

LABELS = {
    "S": "spatial",
    "C": "channel",
    "B": "batch",
    "T": "time",
    "U": "unspecified",
}
_AT_MOST_ONE = "CBT"


@dataclass(frozen=True)
class Layout:
    """Sizes and labels of one input, like MATLAB's ``networkDataLayout``.

    ``Layout.parse("24,24,20,128:SSCB")`` or ``Layout(size=(24, 24, 20, 128), format="SSCB")``.
    The tensor handed to the layer has exactly these sizes in this order.
    """

    size: tuple[int, ...]
    format: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _check_sizes(self.size, self))
        object.__setattr__(self, "format", _check_format(self.format, len(self.size), self))

    @classmethod
    def parse(cls, text: str) -> Layout:
        """Read ``SIZES:FORMAT``, e.g. ``"128,20,24,24:BCSS"``."""
        if not isinstance(text, str):
            raise LayoutError(f"{text!r}: a layout is a string SIZES:FORMAT, e.g. 24,24,20,128:SSCB")
        sizes, sep, labels = text.strip().partition(":")
        if not sep:
            raise LayoutError(f'"{text}": expected SIZES:FORMAT, e.g. 24,24,20,128:SSCB')
        parts = [p.strip() for p in sizes.split(",")] if sizes.strip() else []
        values = []
        for part in parts:
            try:
                values.append(int(part))
            except ValueError:
                raise LayoutError(f'"{text}": size "{part}" is not an integer') from None
        labels = labels.strip().upper()
        if len(values) != len(labels):
            raise LayoutError(f'"{text}": {len(values)} sizes but {len(labels)} labels')
        return cls(size=tuple(values), format=labels)

    def finddim(self, label: str) -> tuple[int, ...]:
        """0-based positions of ``label`` (empty when absent)."""
        return tuple(i for i, lab in enumerate(self.format) if lab == label.upper())

    def dim(self, label: str) -> int | None:
        """The position of a label that occurs at most once (C, B, T), or None."""
        found = self.finddim(label)
        return found[0] if found else None

    @property
    def batch_dim(self) -> int | None:
        return self.dim("B")

    @property
    def numel(self) -> int:
        n = 1
        for s in self.size:
            n *= s
        return n

    def with_size(self, label: str, value: int) -> Layout:
        """This layout with the (single) dimension ``label`` resized to ``value``."""
        dim = self.dim(label)
        if dim is None:
            raise LayoutError(f'"{self}" has no {label} dimension')
        sizes = list(self.size)
        sizes[dim] = value
        return Layout(size=tuple(sizes), format=self.format)

    def to_dict(self) -> dict[str, object]:
        return {"size": list(self.size), "format": self.format}

    def __str__(self) -> str:
        return f"{','.join(map(str, self.size))}:{self.format}"


def _check_sizes(size: Iterable[object], where: object) -> tuple[int, ...]:
    values = tuple(size)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise LayoutError(f'"{_show(where)}": size {v!r} is not an integer')
        if v <= 0:
            raise LayoutError(f'"{_show(where)}": size {v} must be a positive integer')
    if not values:
        raise LayoutError(f'"{_show(where)}": a layout needs at least one dimension')
    return tuple(int(v) for v in values)  # type: ignore[call-overload]  # each checked an int above


def _check_format(labels: object, count: int, where: object) -> str:
    if not isinstance(labels, str):
        raise LayoutError(f"format {labels!r} is not a string of labels {''.join(LABELS)}")
    labels = labels.upper()
    for lab in labels:
        if lab not in LABELS:
            raise LayoutError(
                f'"{_show(where)}": unknown label "{lab}" (labels are '
                + ", ".join(f"{k} {v}" for k, v in LABELS.items())
                + ")"
            )
    for lab in _AT_MOST_ONE:
        if labels.count(lab) > 1:
            raise LayoutError(f'"{_show(where)}": {labels.count(lab)} {lab} labels, at most one allowed')
    if len(labels) != count:
        raise LayoutError(f'"{_show(where)}": {count} sizes but {len(labels)} labels')
    return labels


def _show(where: object) -> str:
    if isinstance(where, Layout):
        try:
            return f"{','.join(map(str, where.size))}:{where.format}"
        except TypeError:
            return repr(where)
    return str(where)

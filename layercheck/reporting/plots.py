"""Inline SVG plots of a gradient disagreement, drawn from a result's details (for the HTML report).

The gradient checks (``gradients``, ``gradgrad``, ``forward_ad``) put their verdicts in the
details: ``directions``, a list of :meth:`~layercheck.numerics.Comparison.to_dict`, and
under ``wrong`` one :meth:`~layercheck.numerics.Finding.to_dict` per wrong tensor, whose
``elements`` are the elements differenced one by one. Two plots read them:

- the relative error of each random direction's directional derivative (analytic against
  finite differences) on a logarithmic scale, with the tolerance as a line: a correct backward
  keeps every point below it, and a 5 % error stands decades above it (on a plot of analytic
  against numeric it would sit on the diagonal);
- the error (analytic - numeric) of each element against the element's input value (or its
  position when the value is not given), so that "wrong for x > 2.5" shows at a glance.

Values read back from JSON may be strings (``"nan"``) or missing: such points are left out.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WIDTH, HEIGHT = 400, 374
LEFT, RIGHT, TOP = 72, 18, 14
BOTTOM = 50  # room for tick labels and the axis title; rotated index labels need more
# The plot area is square: on equal axes the line y = x is the diagonal.

GOOD, BAD, INK, GRID = "#2f855a", "#c53030", "#2d3748", "#e2e8f0"


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    bad: bool
    tip: str
    hollow: bool = False


@dataclass(frozen=True)
class Figure:
    """One plot: what it shows (a title and a sentence on how to read it) and the SVG itself."""

    title: str
    caption: str
    svg: ET.Element
    points: int


def gradient_figures(details: Mapping[str, Any]) -> list[Figure]:
    """Every plot the details of a gradient check allow, in the order a reader needs them:
    all tensors together, then per wrong tensor its directions and its elements."""
    figures: list[Figure] = []
    for title, verdict in _verdicts(details):
        figure = directions_figure(title, verdict)
        if figure is not None:
            figures.append(figure)
        if "elements" in verdict:
            figure = elements_figure(title, verdict)
            if figure is not None:
                figures.append(figure)
    return figures


def _verdicts(details: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(what it covers, a verdict or finding dict) for each list of directions in the details."""
    if isinstance(details.get("directions"), list):
        yield "all tensors together", details
    for key, value in details.items():  # e.g. "float64": the reference a lower precision was compared with
        if isinstance(value, Mapping) and isinstance(value.get("directions"), list):
            yield f"{key}, all tensors together", value
    for finding in details.get("wrong") or ():
        if isinstance(finding, Mapping) and ("directions" in finding or "elements" in finding):
            yield str(finding.get("tensor", "a tensor")), finding


def directions_figure(title: str, verdict: Mapping[str, Any]) -> Figure | None:
    """The relative error of each direction against the tolerance, on a log scale."""
    tolerance = _number(verdict.get("tolerance"))
    rows = []
    for i, d in enumerate(verdict.get("directions") or ()):
        if not isinstance(d, Mapping):
            continue
        analytic, numeric = _number(d.get("analytic")), _number(d.get("numeric"))
        error = _number(d.get("relative_error"))
        if error is not None and error >= 0:
            rows.append((i, analytic, numeric, error, bool(d.get("kink_crossed"))))
    if not rows:
        return None
    positive = [e for _, _, _, e, _ in rows if e > 0] + ([tolerance] if tolerance else [])
    low = math.floor(math.log10(min(positive))) - 1 if positive else -17.0
    high = max(math.ceil(math.log10(max(positive)) + 0.2), low + 2) if positive else low + 2
    points = []
    for position, (i, analytic, numeric, error, kink) in enumerate(rows):
        bad = tolerance is not None and error > tolerance
        tip = (f"direction {i + 1}: relative error {error:.3g}"
               + (f" ({'above' if bad else 'within'} the tolerance {tolerance:.3g})" if tolerance is not None else "")
               + (f", analytic {analytic:.6g}, numeric {numeric:.6g}" if analytic is not None and numeric is not None
                  else "")
               + (" (a kink lies within the step)" if kink else ""))
        # an error of exactly 0 sits on the bottom edge
        points.append(Point(float(position), math.log10(error) if error > 0 else low, bad, tip, hollow=kink))
    svg = _canvas(f"{title}: relative error of each direction", "directions")
    x = _Axis(-0.5, len(points) - 0.5, LEFT, WIDTH - RIGHT)
    y = _Axis(low, high, HEIGHT - BOTTOM, TOP)
    _frame(svg, x, y, "random direction", "relative error (log scale)",
           x_ticks=[str(i + 1) for i, *_ in rows], y_log=True)
    if tolerance:
        level = y.px(math.log10(tolerance))
        _line(svg, x.start, level, x.end, level, stroke=BAD)
        _text(svg, x.end - 4, level - 5, f"tolerance {tolerance:.3g}", anchor="end", fill=BAD)
    _points(svg, points, x, y)
    caption = (f"Each random direction's derivative of {title}, the backward's (analytic) against finite "
               "differences (numeric): their difference relative to the gradient's size, on a log scale. "
               + ("Points above the red line exceed the tolerance (red: wrong); a correct backward keeps every "
                  "point below it" if tolerance else "A correct backward keeps every point near the bottom")
               + ("; hollow ones had a kink within the step." if any(p.hollow for p in points) else "."))
    return Figure(f"Errors per direction: {title}", caption, svg, len(points))


def elements_figure(title: str, finding: Mapping[str, Any]) -> Figure | None:
    tolerance = _number(finding.get("tolerance"))
    rows = []
    for e in finding.get("elements") or ():
        if not isinstance(e, Mapping):
            continue
        analytic, numeric = _number(e.get("analytic")), _number(e.get("numeric"))
        if analytic is not None and numeric is not None:
            rows.append((e, analytic, numeric))
    if not rows:
        return None
    values = [_number(e.get("value")) for e, _, _ in rows]
    by_value = all(v is not None for v in values)
    if by_value:
        positions = [v for v in values if v is not None]
    else:  # by position: row-major order of the indices
        rows.sort(key=lambda row: _index_key(row[0].get("index")))
        positions = [float(i) for i in range(len(rows))]
    points, labels = [], []
    for position, (e, analytic, numeric) in zip(positions, rows):
        index = _index_text(e.get("index"))
        error = _number(e.get("relative_error"))
        bad = error is None or tolerance is None or error > tolerance
        tip = (f"element {index}" + (f", value {position:.6g}" if by_value else "")
               + f": analytic {analytic:.6g}, numeric {numeric:.6g}, error {analytic - numeric:.6g}")
        points.append(Point(position, analytic - numeric, bad, tip))
        labels.append(index)
    errors = [p.y for p in points]
    y = _Axis(*_span([*errors, 0.0]), HEIGHT - BOTTOM - (0 if by_value else 30), TOP)
    if by_value:
        x = _Axis(*_span([p.x for p in points]), LEFT, WIDTH - RIGHT)
        x_title = f"value of the element of {title}"
    else:
        x = _Axis(-0.5, len(points) - 0.5, LEFT, WIDTH - RIGHT)
        x_title = f"element of {title} (index)"
    svg = _canvas(f"{title}: error per element", "elements")
    _frame(svg, x, y, x_title, "analytic − numeric", x_ticks=None if by_value else labels)
    _line(svg, x.px(x.low), y.px(0.0), x.px(x.high), y.px(0.0))
    _points(svg, points, x, y)
    against = "its value" if by_value else "its position in the tensor"
    caption = (f"Elements of {title} differenced one by one: the error of the backward (analytic − numeric) "
               f"against {against}. A correct backward keeps every point on the dashed line at 0.")
    return Figure(f"Elements: {title}", caption, svg, len(points))


# -- drawing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Axis:
    """A linear map from data [low, high] to pixels [start, end] (end < start for the y axis)."""

    low: float
    high: float
    start: float
    end: float

    def px(self, value: float) -> float:
        return round(self.start + (value - self.low) / (self.high - self.low) * (self.end - self.start), 2)


def _canvas(title: str, kind: str) -> ET.Element:
    svg = ET.Element("svg", {"class": "plot", "data-plot": kind, "viewBox": f"0 0 {WIDTH} {HEIGHT}",
                             "width": str(WIDTH), "height": str(HEIGHT), "role": "img",
                             "font-family": "system-ui, sans-serif", "font-size": "11"})
    ET.SubElement(svg, "title").text = title
    return svg


def _frame(svg: ET.Element, x: _Axis, y: _Axis, x_title: str, y_title: str, *,
           x_ticks: Sequence[str] | None = None, y_log: bool = False) -> None:
    """Grid, ticks and axis titles; ``x_ticks`` labels the positions 0, 1, ... instead of numbers
    (turned when they are long); with ``y_log`` the y values are powers of ten."""
    if x_ticks is None:
        for value in _ticks(x.low, x.high):
            _line(svg, x.px(value), y.start, x.px(value), y.end, stroke=GRID, dash=False)
            _text(svg, x.px(value), y.start + 15, _tick_text(value), anchor="middle")
    else:
        for i, name in enumerate(x_ticks):
            px = x.px(float(i))
            _line(svg, px, y.start, px, y.end, stroke=GRID, dash=False)
            if max(len(tick) for tick in x_ticks) <= 3:
                _text(svg, px, y.start + 15, name, anchor="middle")
            else:
                label = _text(svg, px, y.start + 12, name, anchor="end")
                label.set("transform", f"rotate(-35 {px} {y.start + 12})")
    if y_log:
        every = max(1, math.ceil((y.high - y.low) / 7))
        y_values = [float(v) for v in range(math.ceil(y.low), math.floor(y.high) + 1) if v % every == 0]
    else:
        y_values = _ticks(y.low, y.high)
    for value in y_values:
        _line(svg, x.start, y.px(value), x.end, y.px(value), stroke=GRID, dash=False)
        _text(svg, x.start - 6, y.px(value) + 4, f"1e{int(value)}" if y_log else _tick_text(value), anchor="end")
    ET.SubElement(svg, "rect", x=str(x.start), y=str(y.end), width=str(x.end - x.start),
                  height=str(y.start - y.end), fill="none", stroke=INK)
    _text(svg, (x.start + x.end) / 2, HEIGHT - 8, x_title, anchor="middle", fill=INK, size=12)
    middle = (y.start + y.end) / 2
    label = _text(svg, 14, middle, y_title, anchor="middle", fill=INK, size=12)
    label.set("transform", f"rotate(-90 14 {middle})")


def _points(svg: ET.Element, points: Sequence[Point], x: _Axis, y: _Axis) -> None:
    # Good points first, so that bad ones are drawn on top where they overlap.
    for p in sorted(points, key=lambda p: p.bad):
        colour = BAD if p.bad else GOOD
        circle = ET.SubElement(svg, "circle", {
            "class": "point bad" if p.bad else "point", "cx": str(x.px(p.x)), "cy": str(y.px(p.y)), "r": "4.5",
            "fill": "white" if p.hollow else colour, "fill-opacity": "1" if p.hollow else "0.8",
            "stroke": colour, "stroke-width": "1.5",
        })
        ET.SubElement(circle, "title").text = p.tip


def _line(svg: ET.Element, x1: float, y1: float, x2: float, y2: float, *, stroke: str = "#718096",
          dash: bool = True) -> None:
    attrs = {"x1": str(x1), "y1": str(y1), "x2": str(x2), "y2": str(y2), "stroke": stroke}
    if dash:
        attrs["stroke-dasharray"] = "5 4"
    ET.SubElement(svg, "line", attrs)


def _text(svg: ET.Element, x: float, y: float, text: str, *, anchor: str, fill: str = "#4a5568",
          size: int = 11) -> ET.Element:
    element = ET.SubElement(svg, "text", {"x": str(round(x, 2)), "y": str(round(y, 2)), "text-anchor": anchor,
                                          "fill": fill, "font-size": str(size)})
    element.text = text
    return element


# -- numbers ----------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    """A finite float, or None (missing, a string such as "nan", infinite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _span(values: Sequence[float]) -> tuple[float, float]:
    """The range of ``values`` with a margin, never empty."""
    low, high = min(values), max(values)
    if high == low:
        pad = abs(low) * 0.1 or 1.0
    else:
        pad = (high - low) * 0.08
    return low - pad, high + pad


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """At most about ``count`` round values (1, 2, 2.5 or 5 times a power of ten) within [low, high]."""
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step)
    return [i * step for i in range(first, math.floor(high / step) + 1)]


def _tick_text(value: float) -> str:
    return "0" if value == 0 else f"{value:.4g}"


def _index_key(index: Any) -> tuple[int, ...]:
    if isinstance(index, (list, tuple)):
        return tuple(int(i) for i in index if isinstance(i, (int, float)))
    return (int(index),) if isinstance(index, (int, float)) else ()


def _index_text(index: Any) -> str:
    if isinstance(index, (list, tuple)):
        return f"({', '.join(str(i) for i in index)})"
    return str(index)

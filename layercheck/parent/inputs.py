"""What each input of a layer is: its layout, its dtype, how its values are drawn, whether it
takes a gradient, and whether it is passed by keyword. Parsed from a spec's ``inputs:`` entries
and from the command line's ``--layout "SIZES:FORMAT dtype=... values=..."``; no torch here.

Examples (spec and command line):

    - layout: 8,32:BT                         --layout "8,32:BT dtype=int64 values=0:1000"
      dtype: int64
      values: {low: 0, high: 1000}
    - layout: 4,16:BC                         --layout "4,16:BC values=positive"
      values: positive
    - layout: 4,10:BT                         --call-kwarg key_padding_mask="4,10:BT dtype=bool values=0.2"
      dtype: bool
      values: {p: 0.2}
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from layercheck.parent.errors import LayoutError, SpecError, UsageError
from layercheck.parent.layout import Layout

FLOATING = ("float16", "bfloat16", "float32", "float64")
INTEGER = ("int64", "int32")
DTYPES = ("float", *FLOATING, *INTEGER, "bool")
"""``float`` follows the dtype each check runs in (float32, float64, ...); the others are fixed."""

DISTRIBUTIONS = ("normal", "uniform", "positive", "integers", "bernoulli")
CAPTURED = "captured"  # the values a model gave the layer, read from a spec's inputs_file: (layercheck scan)


@dataclass(frozen=True)
class Values:
    """How an input's values are drawn (seeded): normal(mean, std), uniform in [low, high),
    positive (|normal|), integers in [low, high), bernoulli(p)."""

    distribution: str = "normal"
    mean: float = 0.0
    std: float = 1.0
    low: float = 0.0
    high: float = 1.0
    p: float = 0.5

    @property
    def domain(self) -> tuple[float, float] | None:
        """The interval a floating input must stay in (finite differences step inside it), or None."""
        if self.distribution == "uniform":
            return (self.low, self.high)
        if self.distribution == "positive":
            return (0.0, math.inf)
        return None

    def __str__(self) -> str:
        if self.distribution == "normal":
            return "normal" if (self.mean, self.std) == (0.0, 1.0) else f"normal:{self.mean:g}:{self.std:g}"
        if self.distribution == "uniform":
            return f"uniform:{self.low:g}:{self.high:g}"
        if self.distribution == "integers":
            return f"{int(self.low)}:{int(self.high)}"
        if self.distribution == "bernoulli":
            return f"{self.p:g}"
        return self.distribution


@dataclass(frozen=True)
class InputSpec:
    """One tensor input of the layer's call."""

    layout: Layout
    dtype: str = "float"
    values: Values = field(default_factory=Values)
    requires_grad: bool | None = None  # None: true for floating inputs
    name: str | None = None  # passed by keyword when set
    # (file, index): the captured tensor this input is, from a spec's inputs_file: (its values
    # distribution is CAPTURED); None for a drawn input
    captured: tuple[str, int] | None = None

    @property
    def floating(self) -> bool:
        return self.dtype == "float" or self.dtype in FLOATING

    @property
    def takes_grad(self) -> bool:
        """Whether the input requires grad: floating ones unless declared constant."""
        return self.floating and self.requires_grad is not False

    @property
    def plain(self) -> bool:
        """A standard-normal input of the check's dtype, positional: what a bare layout means."""
        return self == InputSpec(self.layout)

    def describe(self) -> str:
        """``SIZES:FORMAT`` with its qualifiers, as ``--layout`` reads it back."""
        words = [str(self.layout)]
        if self.dtype != "float":
            words.append(f"dtype={self.dtype}")
        if self.values != _default_values(self.dtype):
            words.append(f"values={self.values}")
        if self.requires_grad is False and self.floating:
            words.append("grad=no")
        return " ".join(words)

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = self.layout.to_dict()
        if self.name is not None:
            record["name"] = self.name
        if self.dtype != "float":
            record["dtype"] = self.dtype
        if self.values != _default_values(self.dtype):
            record["values"] = str(self.values)
        if not self.takes_grad and self.floating:
            record["requires_grad"] = False
        return record


def _default_values(dtype: str) -> Values:
    if dtype in INTEGER:
        return Values("integers", low=0.0, high=math.nan)  # high is required: never equal to a given one
    if dtype == "bool":
        return Values("bernoulli")
    return Values()


# -- the command line ----------------------------------------------------------------------------

_QUALIFIER = re.compile(r"^(dtype|values|grad)=(.+)$")


def parse_input(text: str, *, name: str | None = None, where: str = "--layout") -> InputSpec:
    """``"8,32:BT dtype=int64 values=0:1000"`` -> InputSpec. Raises UsageError naming ``where``."""
    words = text.split()
    if not words:
        raise UsageError(f"{where} {text!r}: expected SIZES:FORMAT, e.g. 24,24,20,128:SSCB")
    try:
        layout = Layout.parse(words[0])
    except LayoutError as exc:
        raise UsageError(f"{where}: {exc}") from None
    found: dict[str, str] = {}
    for word in words[1:]:
        match = _QUALIFIER.match(word)
        if match is None:
            raise UsageError(f"{where} {text!r}: {word!r} is not a qualifier; "
                             "expected dtype=..., values=... or grad=no")
        found[match.group(1)] = match.group(2)
    grad = found.get("grad")
    if grad is not None and grad not in ("yes", "no"):
        raise UsageError(f"{where} {text!r}: grad={grad}: expected grad=no (a constant input) or grad=yes")
    try:
        return make_input(layout, dtype=found.get("dtype", "float"), values=found.get("values"),
                          requires_grad=None if grad is None else grad == "yes", name=name)
    except SpecError as exc:
        raise UsageError(f"{where} {text!r}: {exc}") from None


def looks_like_input(text: str) -> bool:
    """Whether a ``--call-kwarg`` value describes a tensor (starts with SIZES:FORMAT)."""
    return re.match(r"^\s*\d+(\s*,\s*\d+)*\s*:\s*[A-Za-z]+(\s|$)", text) is not None


# -- spec files ------------------------------------------------------------------------------------

_INPUT_KEYS = ("layout", "dtype", "values", "requires_grad")
_VALUE_KEYS = ("distribution", "mean", "std", "low", "high", "p")


def input_from_mapping(item: Mapping[Any, Any], layout: Layout, where: str, *, name: str | None = None,
                       captured: tuple[str, int] | None = None) -> InputSpec:
    """An ``inputs:`` entry (its layout already parsed). Raises SpecError naming ``where``.
    ``captured``: the entry is that tensor of the spec's inputs_file (no values: of its own)."""
    for key in item:
        if key not in _INPUT_KEYS:
            raise SpecError(f"{where}.{key}: unknown key; expected one of {', '.join(_INPUT_KEYS)}")
    dtype = item.get("dtype", "float")
    if not isinstance(dtype, str):
        raise SpecError(f"{where}.dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    requires = item.get("requires_grad")
    if requires is not None and not isinstance(requires, bool):
        raise SpecError(f"{where}.requires_grad: expected true or false, got {requires!r}")
    if captured is not None:
        if "values" in item:
            raise SpecError(f"{where}.values: an input read from inputs_file: has the values saved there")
        if dtype not in DTYPES:
            raise SpecError(f"{where}.dtype: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        if requires and not (dtype == "float" or dtype in FLOATING):
            raise SpecError(f"{where}.requires_grad: {dtype} inputs take no gradient")
        return InputSpec(layout, dtype, Values(CAPTURED), requires, name, captured)
    try:
        return make_input(layout, dtype=dtype, values=item.get("values"), requires_grad=requires, name=name)
    except SpecError as exc:
        raise SpecError(f"{where}.{exc}") from None


def make_input(layout: Layout, *, dtype: str = "float", values: object = None, requires_grad: bool | None = None,
               name: str | None = None) -> InputSpec:
    """Validate and build an input; problems raise SpecError starting with the key at fault."""
    if dtype not in DTYPES:
        raise SpecError(f"dtype: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    drawn = _values(values, dtype)
    floating = dtype == "float" or dtype in FLOATING
    if requires_grad and not floating:
        raise SpecError(f"requires_grad: {dtype} inputs take no gradient; only floating inputs can require grad")
    return InputSpec(layout, dtype, drawn, requires_grad, name)


def _values(values: object, dtype: str) -> Values:
    default = _default_values(dtype)
    if values is None:
        if dtype in INTEGER:
            raise SpecError(f"values: {dtype} inputs need a range of integers, e.g. values: {{low: 0, high: 10}} "
                            "(or --layout \"... values=0:10\")")
        return default
    if isinstance(values, str):
        mapping = _values_text(values, dtype)
    elif isinstance(values, Mapping):
        mapping = dict(values)
    elif isinstance(values, (int, float)) and not isinstance(values, bool) and dtype == "bool":
        mapping = {"p": values}
    else:
        raise SpecError(f"values: expected a mapping like {{low: 0, high: 10}} or a word like positive, got {values!r}")
    for key in mapping:
        if key not in _VALUE_KEYS:
            raise SpecError(f"values.{key}: unknown key; expected one of {', '.join(_VALUE_KEYS)}")
    distribution = mapping.get("distribution") or _implied(mapping, dtype, default)
    if distribution not in DISTRIBUTIONS:
        raise SpecError(f"values.distribution: {distribution!r}; expected one of {', '.join(DISTRIBUTIONS)}")
    numbers: dict[str, float] = {}
    for key in ("mean", "std", "low", "high", "p"):
        if key in mapping:
            value = mapping[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise SpecError(f"values.{key}: expected a finite number, got {value!r}")
            numbers[key] = float(value)
    if distribution == "integers" and "high" not in numbers:
        raise SpecError("values.high: missing; integers are drawn from [low, high)")
    drawn = Values(distribution, **numbers)
    _check_fits(drawn, dtype)
    return drawn


def _implied(mapping: Mapping[str, Any], dtype: str, default: Values) -> str:
    if dtype in INTEGER:
        return "integers"
    if dtype == "bool":
        return "bernoulli"
    if "low" in mapping or "high" in mapping:
        return "uniform"
    return default.distribution


def _values_text(text: str, dtype: str) -> dict[str, Any]:
    """``0:1000``, ``uniform:0.1:2``, ``normal:0:2``, ``positive``, ``0.2`` (bool), ``p:0.2``."""
    parts = text.strip().split(":")
    try:
        numbers = [float(p) for p in parts[1:]]
        if parts[0] in ("normal", "uniform") and len(numbers) == 2:
            keys = ("mean", "std") if parts[0] == "normal" else ("low", "high")
            return {"distribution": parts[0], **dict(zip(keys, numbers))}
        if parts[0] in ("normal", "positive") and not numbers:
            return {"distribution": parts[0]}
        if parts[0] == "p" and len(numbers) == 1:
            return {"p": numbers[0]}
        if len(parts) == 2:
            low, high = float(parts[0]), float(parts[1])
            return {"low": low, "high": high}
        if len(parts) == 1 and dtype == "bool":
            return {"p": float(parts[0])}
    except ValueError:
        pass
    raise SpecError(f"values: {text!r}: expected LOW:HIGH, uniform:LOW:HIGH, normal:MEAN:STD, positive, or a "
                    "probability for bool inputs")


def _check_fits(values: Values, dtype: str) -> None:
    d = values.distribution
    if d == "integers" and dtype not in INTEGER:
        raise SpecError(f"values: integers are for int64 and int32 inputs, not {dtype}")
    if d == "bernoulli" and dtype != "bool":
        raise SpecError(f"values: a probability is for bool inputs, not {dtype}")
    if d in ("normal", "uniform", "positive") and dtype in (*INTEGER, "bool"):
        raise SpecError(f"values: {d} is for floating inputs; {dtype} inputs take "
                        + ("integers in [low, high)" if dtype in INTEGER else "a probability p"))
    if d in ("uniform", "integers") and math.isnan(values.high):
        raise SpecError("values.high: missing; integers are drawn from [low, high)")
    if d in ("uniform", "integers") and not values.low < values.high:
        raise SpecError(f"values: the range [{values.low:g}, {values.high:g}) is empty")
    if d == "integers" and (values.low != int(values.low) or values.high != int(values.high)):
        raise SpecError(f"values: integer bounds expected, got [{values.low:g}, {values.high:g})")
    if d == "normal" and not values.std > 0:
        raise SpecError(f"values.std: {values.std:g} must be positive")
    if d == "bernoulli" and not 0 <= values.p <= 1:
        raise SpecError(f"values.p: {values.p:g} is not a probability")

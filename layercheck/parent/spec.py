"""Spec files (SPEC section 4): YAML read into frozen records, validated as a whole up front."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from layercheck.parent.errors import LayoutError, SpecError, did_you_mean
from layercheck.parent.inputs import FLOATING as DTYPE_NAMES
from layercheck.parent.inputs import InputSpec, input_from_mapping
from layercheck.parent.layout import Layout
from layercheck.parent.specerrors import every_problem

INTERPRET_SIZES = ("reduced", "full")  # interpret_sizes:, --interpret-sizes (Note [interpreted sizes])
_KEYS = ("layer", "args", "kwargs", "inputs", "inputs_file", "call_kwargs", "checks", "seed", "tolerance", "on",
         "interpret", "interpret_sizes", "reference", "reference_args", "reference_kwargs", "reference_map",
         "explore")
AUTOGRAD = "autograd"  # reference: autograd: the layer's own forward, differentiated by autograd
_CHECK_KEYS = ("skip", "enable")
_SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class TargetSpec:
    """One layer to check: where it is, how to build it, its inputs and check selection."""

    layer: str
    inputs: tuple[InputSpec, ...]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    skip: tuple[str, ...] = ()
    enable: tuple[str, ...] = ()
    seed: int | None = None
    tolerance: Mapping[str, float] = field(default_factory=dict)
    base_dir: Path = field(default_factory=Path.cwd)
    source: Path | None = None
    constants: Mapping[str, Any] = field(default_factory=dict)  # plain keyword values of the call
    on: str | None = None  # the device the suite runs the layer on (on:), the CPU when None
    interpret: bool = False  # its Triton kernels run under Triton's interpreter (interpret:)
    interpret_sizes: str | None = None  # "full" or "reduced": the sizes its interpreted kernels run at
    reference: str | None = None  # reference: the implementation the layer must match, or "autograd"
    reference_args: tuple[Any, ...] | None = None  # its constructor arguments (None: the layer's)
    reference_kwargs: Mapping[str, Any] | None = None
    reference_map: Mapping[str, str] = field(default_factory=dict)  # layer state_dict key -> the reference's
    explore: int = 0  # extra draws searching for a failure (explore:, --explore)

    @property
    def layouts(self) -> tuple[Layout, ...]:
        """The layout of every tensor input (positional, then keyword)."""
        return tuple(spec.layout for spec in self.inputs)

    def input_dicts(self) -> list[dict[str, Any]]:
        """The inputs as the report lists them."""
        return [spec.to_dict() for spec in self.inputs]

    @property
    def name(self) -> str:
        """How the report names this target: the spec file, else the layer reference."""
        return str(self.source) if self.source is not None else self.layer


def is_spec_path(path: Path) -> bool:
    return path.suffix.lower() in _SPEC_SUFFIXES


def find_specs(folder: Path) -> tuple[list[Path], list[Path]]:
    """The spec files below ``folder`` and the YAML files there that are not specs, both
    sorted, so runs are reproducible.

    The rule (docs/howto/many-layers.md): hidden files and folders (a name starting with
    ".") are not looked into; a ``*.yaml``/``*.yml`` file is a spec when it is a mapping with
    a ``layer:`` key (or, when it is not valid YAML, has a line starting ``layer:``, so that
    its error is reported); any other YAML file (a CI or pre-commit configuration) is not."""
    specs: list[Path] = []
    others: list[Path] = []
    for path in sorted(folder.rglob("*")):
        if any(part.startswith(".") for part in path.relative_to(folder).parts):
            continue
        if path.is_file() and is_spec_path(path):
            (specs if looks_like_spec(path) else others).append(path)
    return specs, others


def looks_like_spec(path: Path) -> bool:
    """Whether a YAML file is meant as a layercheck spec (find_specs' rule)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return True  # load_spec says why it cannot be read
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return any(line.startswith("layer:") for line in text.splitlines())
    return isinstance(data, Mapping) and "layer" in data


def load_spec(path: Path) -> TargetSpec:
    """Read and validate one spec file; every problem raises SpecError naming file and key."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}); a spec is a YAML file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{path}:{where}: YAML syntax error: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: YAML error: {exc}") from None
    return every_problem(parse_spec, data, where=str(path), source=path)  # all of them, not the first only


def parse_spec(data: object, *, source: Path | None = None) -> TargetSpec:
    """Validate a spec already read from YAML (a mapping)."""
    where = str(source) if source is not None else "spec"
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a mapping with keys {', '.join(_KEYS)}, got {_kind(data)}")
    if True in data and "on" not in data:  # YAML 1.1 reads the bare key `on:` as the boolean true
        data = {("on" if key is True else key): value for key, value in data.items()}
    _check_keys(data, _KEYS, where, "")
    if "layer" not in data:
        raise SpecError(f"{where}: layer: missing; expected e.g. 'layer: ../layers/srelu.py:SReLU'")
    layer = _expect(data, "layer", str, where, "a layer reference such as ../layers/srelu.py:SReLU")
    if not layer.strip():
        raise SpecError(f"{where}: layer: empty; expected a layer reference such as torch.nn:PReLU")
    args = _expect(data, "args", list, where, "a list of constructor arguments", default=[])
    kwargs = _expect(data, "kwargs", dict, where, "a mapping of constructor keyword arguments", default={})
    for key in kwargs:
        if not isinstance(key, str):
            raise SpecError(f"{where}: kwargs: key {key!r} is not a string")
    inputs = _expect(data, "inputs", list, where, "a list of inputs, each {layout: SIZES:FORMAT}")
    if inputs is None or not inputs:
        raise SpecError(f"{where}: inputs: missing or empty; expected a list like '- layout: 24,24,20,128:SSCB'")
    base_dir = source.parent if source is not None else Path.cwd()
    captured = _inputs_file(data, where, base_dir)
    tensors = [_parse_input(item, where, f"inputs[{i}]", captured=None if captured is None else (captured, i))
               for i, item in enumerate(inputs)]
    call_kwargs = _expect(data, "call_kwargs", dict, where, "a mapping of keyword arguments of the layer's call",
                          default={})
    constants: dict[str, Any] = {}
    for key, value in call_kwargs.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise SpecError(f"{where}: call_kwargs: {key!r} is not a keyword argument name")
        if isinstance(value, dict) and "layout" in value:
            tensors.append(_parse_input(value, where, f"call_kwargs.{key}", name=key,
                                        captured=None if captured is None else (captured, len(tensors))))
        else:
            constants[key] = value
    checks = _expect(data, "checks", dict, where, "a mapping with keys skip and enable", default={})
    _check_keys(checks, _CHECK_KEYS, where, "checks.")
    skip = _id_list(checks, "skip", where)
    enable = _id_list(checks, "enable", where)
    seed = _expect(data, "seed", int, where, "an integer", default=None)
    if seed is not None and not 0 <= seed < 2**32:  # seeds derived from it must fit torch's 64 bits
        raise SpecError(f"{where}: seed: {seed} must be an integer from 0 to {2**32 - 1}")
    tolerance = parse_tolerance(
        _expect(data, "tolerance", dict, where, "a mapping dtype -> tolerance", default={}),
        f"{where}: tolerance",
    )
    on = _expect(data, "on", str, where, "a device such as cuda or cuda:1", default=None)
    if on is not None:
        on = parse_device(on, f"{where}: on")
    interpret = _expect(data, "interpret", bool, where, "true or false (Triton's interpreter)", default=False)
    interpret_sizes = _expect(data, "interpret_sizes", str, where, "full or reduced (the sizes interpreted Triton "
                              "kernels run at)", default=None)
    if interpret_sizes not in (None, *INTERPRET_SIZES):
        raise SpecError(f"{where}: interpret_sizes: {interpret_sizes!r} is not one of {', '.join(INTERPRET_SIZES)}")
    explore = _expect(data, "explore", int, where, "a number of extra draws (0 for none)", default=0)
    if explore < 0:
        raise SpecError(f"{where}: explore: {explore} must be 0 or more (extra draws searching for a failure)")
    reference = _parse_reference(data, where)
    base_dir = source.parent if source is not None else Path.cwd()
    return TargetSpec(
        **reference,
        explore=explore,
        on=on,
        interpret=interpret,
        interpret_sizes=interpret_sizes,
        layer=layer.strip(),
        inputs=tuple(tensors),
        constants=constants,
        args=tuple(args),
        kwargs=dict(kwargs),
        skip=skip,
        enable=enable,
        seed=seed,
        tolerance=tolerance,
        base_dir=base_dir,
        source=source,
    )


def _parse_reference(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The reference keys (docs/reference/spec-schema.md), as TargetSpec fields."""
    reference = _expect(data, "reference", str, where, "a layer reference such as ref.py:RMSNormRef, or autograd",
                        default=None)
    if reference is not None and not reference.strip():
        raise SpecError(f"{where}: reference: empty; expected a layer reference such as ref.py:RMSNormRef, or autograd")
    args = _expect(data, "reference_args", list, where, "a list of the reference's constructor arguments", default=None)
    kwargs = _expect(data, "reference_kwargs", dict, where, "a mapping of the reference's constructor keyword "
                     "arguments", default=None)
    mapping = _expect(data, "reference_map", dict, where, "a mapping layer parameter name -> reference parameter "
                      "name", default={})
    for key in [*(kwargs or {}), *mapping]:
        if not isinstance(key, str):
            raise SpecError(f"{where}: key {key!r} of reference_kwargs or reference_map is not a string")
    for key, value in mapping.items():
        if not isinstance(value, str) or not value:
            raise SpecError(f"{where}: reference_map.{key}: expected the reference's parameter name, "
                            f"got {_kind(value)}")
    given = [key for key in ("reference_args", "reference_kwargs", "reference_map") if data.get(key)]
    if reference is None and given:
        raise SpecError(f"{where}: {given[0]}: given without reference:; name the reference implementation "
                        "(reference: ref.py:MyLayerRef)")
    if reference is not None and reference.strip() == AUTOGRAD and given:
        raise SpecError(f"{where}: {given[0]}: reference: autograd differentiates the layer's own forward; it takes "
                        "no constructor arguments or parameter map")
    return {"reference": None if reference is None else reference.strip(),
            "reference_args": None if args is None else tuple(args),
            "reference_kwargs": None if kwargs is None else dict(kwargs), "reference_map": dict(mapping)}


def parse_device(text: str, where: str) -> str:
    """A device name torch knows (``cuda``, ``cuda:1``, ``cpu``), as torch spells it; whether
    this machine has it is asked when the run starts. Raises UsageError (a SpecError in a spec)."""
    import torch  # only here: the command line reads specs before it imports torch

    try:
        return str(torch.device(text.strip()))
    except (RuntimeError, ValueError) as exc:
        raise SpecError(f"{where}: {text!r} is not a device torch knows ({str(exc).splitlines()[0]})") from None


def parse_tolerance(data: Mapping[Any, object], where: str) -> dict[str, float]:
    """Tolerance overrides ``{CHECK.DTYPE: value}``, or ``{DTYPE: value}`` for the gradient
    check: ``{gradients.float32: 1e-3, needs_input_grad.float32: 1e-2, float64: 1e-5}``.
    Values are numbers; a string that reads as one counts (YAML 1.1 reads ``1e-5``, without a
    dot, as a string). Whether the check exists and declares that dtype is checked when the
    checks are planned (registry.resolve_tolerances)."""
    result: dict[str, float] = {}
    for key, value in data.items():
        check_id, _, dtype = str(key).rpartition(".")
        if not isinstance(key, str) or dtype not in DTYPE_NAMES or (check_id and not check_id.isidentifier()):
            raise SpecError(f"{where}.{key}: unknown dtype; expected DTYPE or CHECK.DTYPE with DTYPE one of "
                            f"{', '.join(DTYPE_NAMES)} (e.g. float64, gradients.float32, needs_input_grad.float32)")
        number = _number(value)
        if number is None or not number > 0:
            raise SpecError(f"{where}.{key}: expected a positive number, got {value!r}")
        result[key] = number
    return result


def _number(value: object) -> float | None:
    """A number, or a string that reads as one; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _inputs_file(data: Mapping[str, Any], where: str, base_dir: Path) -> str | None:
    """A layer spec's ``inputs_file:``, the saved tensors its inputs are (one per ``inputs:`` entry,
    then the tensor ``call_kwargs``, in order; ``layercheck scan`` writes it): the absolute path."""
    name = _expect(data, "inputs_file", str, where, "a .pt file of saved input tensors", default=None)
    if name is None:
        return None
    path = (base_dir / name).resolve()
    if not path.is_file():
        raise SpecError(f"{where}: inputs_file: no such file {path}")
    return str(path)


def _parse_input(item: object, where: str, key: str, *, name: str | None = None,
                 captured: tuple[str, int] | None = None) -> InputSpec:
    if not isinstance(item, dict):
        raise SpecError(f"{where}: {key}: expected a mapping like '{{layout: 24,24,20,128:SSCB}}', got {_kind(item)}")
    for extra in item:
        if extra != "layout" and ":" in str(extra):
            # YAML's {a: 1,2:B} splits at the comma: the layout arrived as two keys.
            raise SpecError(f"{where}: {key}: the layout was split at a comma; quote it inside braces, "
                            f"e.g. {{layout: '24,24,20,128:SSCB'}}, or write '- layout: 24,24,20,128:SSCB'")
    if "layout" not in item:
        raise SpecError(f"{where}: {key}.layout: missing")
    return input_from_mapping(item, _parse_layout(item["layout"], where, key), f"{where}: {key}", name=name,
                              captured=captured)


def _parse_layout(value: object, where: str, key: str) -> Layout:
    try:
        if isinstance(value, str):
            return Layout.parse(value)
        if isinstance(value, dict):
            _check_keys(value, ("size", "format"), where, f"{key}.layout.")
            size, fmt = value.get("size"), value.get("format")
            if not isinstance(size, list):
                raise SpecError(f"{where}: {key}.layout.size: expected a list of positive integers, got {_kind(size)}")
            if not isinstance(fmt, str):
                raise SpecError(f"{where}: {key}.layout.format: expected a string of labels like SSCB, "
                                f"got {_kind(fmt)}")
            return Layout(size=tuple(size), format=fmt)
    except LayoutError as exc:
        raise SpecError(f"{where}: {key}.layout: {exc}") from None
    raise SpecError(f"{where}: {key}.layout: expected SIZES:FORMAT or {{size: [...], format: ...}}, got {_kind(value)}")


def _check_keys(data: Mapping[object, object], allowed: tuple[str, ...], where: str, prefix: str) -> None:
    for key in data:
        if key not in allowed:
            hint = did_you_mean(str(key), allowed)
            raise SpecError(f"{where}: {prefix}{key}: unknown key{hint} (keys: {', '.join(allowed)})")


def _expect(data: Mapping[str, Any], key: str, kind: type, where: str, what: str, **kw: Any) -> Any:
    if key not in data or data[key] is None:
        if "default" in kw:
            return kw["default"]
        return None
    value = data[key]
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise SpecError(f"{where}: {key}: expected {what}, got {_kind(value)}")
    return value


def _id_list(checks: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = checks.get(key) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{where}: checks.{key}: expected a list of check ids, got {_kind(value)}")
    return tuple(value)


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number"}
    return names.get(
        type(value), type(value).__name__
    ) + ("" if isinstance(value, (dict, list)) or value is None else f" ({value!r})")

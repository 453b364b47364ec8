"""Model specs (SPEC section 4): a spec with ``model:`` instead of ``layer:``, read by
``layercheck scan``. No torch here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from layercheck.parent.errors import SpecError
from layercheck.parent.inputs import InputSpec
from layercheck.parent.sources import is_file_reference, split_reference
from layercheck.parent.spec import AUTOGRAD, _check_keys, _expect, _id_list, _parse_input, _parse_reference

_KEYS = ("model", "args", "kwargs", "inputs", "inputs_file", "weights", "include", "exclude", "checks", "seed",
         "references")
_REFERENCE_KEYS = ("reference", "reference_args", "reference_kwargs", "reference_map")


@dataclass(frozen=True)
class ModelSpec:
    """A model to scan: how to build it, its sample inputs (drawn, or saved in a file), its weights."""

    model: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: tuple[InputSpec, ...] = ()
    inputs_file: Path | None = None
    weights: Path | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    enable: tuple[str, ...] = ()
    seed: int | None = None
    base_dir: Path = field(default_factory=Path.cwd)
    # layer class (its name, or module.Qualname) -> a layer spec's reference keys, a file's path absolute
    references: dict[str, dict[str, Any]] = field(default_factory=dict)

    def reference_for(self, class_name: str) -> dict[str, Any]:
        """The reference keys a written spec of a layer of ``class_name`` (``module.Qualname``) carries."""
        found = self.references.get(class_name) or self.references.get(class_name.rpartition(".")[2])
        return dict(found or {})


def load_model_spec(path: Path) -> ModelSpec:
    """Read and validate a model spec; every problem raises SpecError naming the file and key."""
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"{where}: cannot read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpecError(f"{where}: not a YAML file ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or "model" not in data:
        raise SpecError(f"{where}: expected a model spec, a mapping with a model: key (model: model.py:build)")
    _check_keys(data, _KEYS, where, "")
    model = _expect(data, "model", str, where, "a model reference such as model.py:Net or mypkg.models:build")
    base = path.parent
    inputs = _expect(data, "inputs", list, where, "a list of inputs, each {layout: SIZES:FORMAT}", default=[])
    inputs_file = _expect(data, "inputs_file", str, where, "a .pt file of sample inputs", default=None)
    if bool(inputs) == bool(inputs_file):
        raise SpecError(f"{where}: give the model's sample inputs as inputs: (layouts) or inputs_file: (saved), one "
                        "of the two")
    weights = _expect(data, "weights", str, where, "a .pt file holding a state_dict", default=None)
    checks = _expect(data, "checks", dict, where, "a mapping with keys skip and enable", default={})
    _check_keys(checks, ("skip", "enable"), where, "checks.")
    return ModelSpec(
        model=model.strip(),
        args=tuple(_expect(data, "args", list, where, "a list of constructor arguments", default=[])),
        kwargs=dict(_expect(data, "kwargs", dict, where, "a mapping of constructor keyword arguments", default={})),
        inputs=tuple(_parse_input(item, where, f"inputs[{i}]") for i, item in enumerate(inputs)),
        inputs_file=None if inputs_file is None else base / inputs_file,
        weights=None if weights is None else base / weights,
        include=_patterns(data, "include", where),
        exclude=_patterns(data, "exclude", where),
        skip=_id_list(checks, "skip", where),
        enable=_id_list(checks, "enable", where),
        seed=_expect(data, "seed", int, where, "an integer", default=None),
        base_dir=base,
        references=_references(data, where, base),
    )


def _references(data: dict[str, Any], where: str, base: Path) -> dict[str, dict[str, Any]]:
    """``references:``: layer class -> ``ref.py:Ref`` or ``autograd``, or a mapping of a layer
    spec's reference keys; each validated as a layer spec's, a file's path made absolute (the
    written specs live elsewhere)."""
    given = _expect(data, "references", dict, where, "a mapping layer class -> reference (ref.py:MyLayerRef, or "
                    "autograd, or {reference: ..., reference_args: [...], reference_map: {...}})", default={})
    found = {}
    for cls, value in given.items():
        key = f"references.{cls}"
        if not isinstance(cls, str) or not cls.strip():
            raise SpecError(f"{where}: references: expected layer class names as keys, got {cls!r}")
        if isinstance(value, str):
            value = {"reference": value}
        if not isinstance(value, dict) or "reference" not in value:
            raise SpecError(f"{where}: {key}: expected a reference (ref.py:MyLayerRef, or autograd) or a mapping "
                            "with reference: and optionally reference_args, reference_kwargs, reference_map")
        _check_keys(value, _REFERENCE_KEYS, where, f"{key}.")
        parsed = _parse_reference(value, f"{where}: {key}")
        where_, name = split_reference(parsed["reference"])
        if parsed["reference"] != AUTOGRAD and is_file_reference(where_):
            parsed["reference"] = str((base / where_).resolve()) + (f":{name}" if name else "")
        found[cls.strip()] = {k: v for k, v in parsed.items() if v not in (None, {})}
    return found


def _patterns(data: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{where}: {key}: expected a list of class or path patterns")
    return tuple(value)

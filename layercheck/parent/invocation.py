"""How a target was named and checked: the one record every reproduce command is built from.

The command line, spec files, ``--jobs`` workers and the Python API all describe a run with
an :class:`Invocation`; a failure's ``reproduce`` line is ``invocation.reproduce(selector)``.
A layer the command line cannot rebuild (an instance handed to the API, a class defined
inside a function, a constructor argument YAML cannot spell) gets a Python line instead.
"""

from __future__ import annotations

import json
import shlex
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layercheck._version import __version__
from layercheck.parent.inputs import InputSpec
from layercheck.parent.layout import Layout


@dataclass(frozen=True)
class Invocation:
    """Everything that decides a run's verdicts: the target as the user named it, the
    constructor call, the inputs, the seed and the options given beside it.

    ``target``: the command line's spelling (a spec file, or ``file.py:Class`` /
    ``module:Class``), None when only Python can name the layer. ``spec``: the target is a
    spec file, which carries its own layouts, arguments and tolerances. ``tolerance``,
    ``devices``, ``enable``, ``on``: options given on the command line or to the API (a
    spec's own are in the spec)."""

    target: str | None
    spec: bool = False
    layouts: tuple[Layout | InputSpec, ...] = ()
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    tolerance: Mapping[str, float] = field(default_factory=dict)
    devices: tuple[str, ...] = ()
    enable: tuple[str, ...] = ()
    constants: Mapping[str, Any] = field(default_factory=dict)  # plain keyword values of the call
    on: str | None = None  # the device the suite runs on (--on), when not the CPU by default
    interpret: bool = False  # --interpret given (a spec's own interpret: is in the spec)
    interpret_sizes: str | None = None  # --interpret-sizes given (a spec's own is in the spec)
    strict: bool = False  # --strict given: a check that could not judge the layer failed, and fails again
    reference: str | None = None  # --reference given (a spec's own reference: is in the spec)
    version: str = __version__

    @property
    def inputs(self) -> list[InputSpec]:
        return [x if isinstance(x, InputSpec) else InputSpec(x) for x in self.layouts]

    def reproduce(self, selector: str) -> str:
        """The command that reruns only ``selector`` (``check`` or ``check:variant``)."""
        words = self.command_words(selector)
        if words is None:
            return self.python(selector)
        return " ".join(shlex.quote(word) for word in words)

    def command_words(self, selector: str) -> list[str] | None:
        """``layercheck run ...`` as a list of words, or None when the command line cannot
        rebuild the layer."""
        if self.target is None:
            return None
        words = ["layercheck", "run", self.target]
        if not self.spec:
            for spec in self.inputs:
                if spec.name is None:
                    words += ["--layout", spec.describe()]
                else:
                    words += ["--call-kwarg", f"{spec.name}={spec.describe()}"]
            for key, value in self.constants.items():
                text = _yaml_text(value)
                if text is None:
                    return None
                words += ["--call-kwarg", f"{key}={text}"]
            for value in self.args:
                text = _yaml_text(value)
                if text is None:
                    return None
                words += ["--arg", text]
            for key, value in self.kwargs.items():
                text = _yaml_text(value)
                if text is None:
                    return None
                words += ["--kwarg", f"{key}={text}"]
        words += ["--check", selector, "--seed", str(self.seed)]
        for key, value in self.tolerance.items():
            words += ["--tolerance", f"{key}={value:g}"]
        for device in self.devices:
            words += ["--device", device]
        for enabled in self.enable:
            words += ["--enable", enabled]
        if self.on is not None:
            words += ["--on", self.on]
        if self.interpret:
            words += ["--interpret"]
        if self.interpret_sizes is not None:
            words += ["--interpret-sizes", self.interpret_sizes]
        if self.strict:
            words += ["--strict"]
        if self.reference is not None:
            words += ["--reference", self.reference]
        return words

    def python(self, selector: str) -> str:
        """The Python call that reruns only ``selector`` on the layer the API was given."""
        parts = ["layer", *(repr(spec.describe()) for spec in self.inputs if spec.name is None)]
        keywords = {spec.name: spec.describe() for spec in self.inputs if spec.name is not None}
        if keywords or self.constants:
            parts.append(f"call_kwargs={ {**self.constants, **keywords}!r}")
        parts += [f"only=[{selector!r}]", f"seed={self.seed}"]
        if self.tolerance:
            parts.append(f"tolerance={dict(self.tolerance)!r}")
        if self.devices:
            parts.append(f"devices={list(self.devices)!r}")
        if self.on is not None:
            parts.append(f"on={self.on!r}")
        if self.interpret:
            parts.append("interpret=True")
        if self.interpret_sizes is not None:
            parts.append(f"interpret_sizes={self.interpret_sizes!r}")
        if self.strict:
            parts.append("strict=True")
        if self.reference is not None:
            parts.append(f"reference={self.reference!r}")
        return f"layercheck.check_layer({', '.join(parts)})"


def _yaml_text(value: Any) -> str | None:
    """A constructor argument as the command line reads it (YAML; JSON is YAML), or None
    when YAML cannot spell it (a tensor, a dtype, a module)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return None


def class_reference(cls: type) -> str | None:
    """How the command line names a class: ``module:Class`` for one importable by name from
    an installed package, ``path/to/file.py:Class`` (relative to the working folder when
    inside it) for a class in the user's own files, None for a class defined inside a
    function (nothing outside the process can name it)."""
    qualname = getattr(cls, "__qualname__", None)
    if not isinstance(qualname, str) or "<locals>" in qualname:
        return None
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if file is None:
        return f"{cls.__module__}:{qualname}"
    path = Path(file).resolve()
    if _installed(path) and not cls.__module__.startswith("layercheck_user_"):
        return f"{cls.__module__}:{qualname}"
    try:
        path = path.relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    return f"{path}:{qualname}"


def _installed(path: Path) -> bool:
    """Whether a file belongs to an installed package (site-packages or the standard library)."""
    folders = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib", "stdlib")}
    return any(path.is_relative_to(folder) for folder in folders)


def describe_call(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """``(1, 2, name=3)``: a constructor call as messages show it."""
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"({', '.join(parts)})"

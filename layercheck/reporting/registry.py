"""The ``@reporter`` decorator and the formats it registers.

Built-in reporters register exactly as a third party's would: a module under
``layercheck/reporting/`` (or one named by an entry point in the ``layercheck.reporters``
group) decorates a function ``render(report) -> str`` with :func:`reporter`. This module
imports no reporter and not :mod:`layercheck.parent.result` (not even for types): it loads the
reporters when a format is first asked for, so that ``Report.render`` can look formats up
here without a cycle.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from layercheck.parent import plugins
from layercheck.parent.errors import UsageError, did_you_mean

ENTRY_POINT_GROUP = plugins.REPORTERS

# The order --help lists the built-in formats in: SPEC section 8's. Third-party formats follow
# in registration order.
BUILTIN_ORDER = ("table", "json", "junit", "markdown", "html", "github")

_NAME = re.compile(r"[a-z][a-z0-9_-]*")

Renderer = Callable[[Any], str]  # given a layercheck.parent.result.Report
R = TypeVar("R", bound=Renderer)


@dataclass(frozen=True)
class ReporterInfo:
    """One report format: the name ``--format`` takes, what it is, and the function that writes it."""

    name: str
    title: str
    func: Renderer
    suffix: str = ""
    """The file suffix of this format (``.json``); ``--output`` with it picks this format."""
    plugin: plugins.Plugin | None = None
    """The plug-in that registered it (None: a built-in, or registered by code run directly)."""


_REGISTRY: dict[str, ReporterInfo] = {}


def reporter(name: str, *, title: str, suffix: str = "") -> Callable[[R], R]:
    """Register a report format. The function receives the whole :class:`~layercheck.Report`
    and returns the report as text; it must not run torch (it may be given a report read back
    from JSON). ``suffix`` (``".json"``) lets ``--output report.json`` pick the format."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"report format name {name!r}: use lowercase letters, digits, '-' and '_'")
    if suffix and not suffix.startswith("."):
        raise ValueError(f"report format {name!r}: suffix {suffix!r} must start with '.'")

    def register(func: R) -> R:
        if name in _REGISTRY and _REGISTRY[name].func is not func:
            raise ValueError(f"report format {name!r} registered twice")
        _REGISTRY[name] = ReporterInfo(name=name, title=title, func=func, suffix=suffix, plugin=plugins.loading())
        return func

    return register


def load_reporters() -> None:
    """Import the built-in reporter modules and third-party entry points (once)."""
    plugins.load("layercheck.reporting", ENTRY_POINT_GROUP)


def catalogue() -> list[ReporterInfo]:
    """Every registered format: the built-ins in SPEC order, then the others as registered."""
    load_reporters()
    return plugins.ordered(_REGISTRY, BUILTIN_ORDER)


def formats() -> list[str]:
    """The names ``--format`` accepts."""
    return [info.name for info in catalogue()]


def known_formats() -> list[str]:
    """The built-in formats and the names of the reporter plug-ins installed, without loading
    any (``--help`` lists them: a broken plug-in must not break it)."""
    return [*BUILTIN_ORDER, *(p.name for p in plugins.find(ENTRY_POINT_GROUP) if p.name not in BUILTIN_ORDER)]


def get(name: str) -> ReporterInfo:
    """The format called ``name``; an unknown name is a :class:`~layercheck.parent.errors.UsageError`."""
    load_reporters()
    if name not in _REGISTRY:
        plugins.check_loaded(ENTRY_POINT_GROUP)  # the format may have been a broken plug-in's
        known = formats()
        raise UsageError(f"unknown report format {name!r}{did_you_mean(name, known)} (formats: {', '.join(known)})")
    return _REGISTRY[name]


def for_suffix(suffix: str) -> ReporterInfo | None:
    """The one format that declares this file suffix (case-insensitive), if exactly one does."""
    matches = [info for info in catalogue() if info.suffix and info.suffix.lower() == suffix.lower()]
    return matches[0] if len(matches) == 1 else None


def plugins_of(names: Iterable[str]) -> list[plugins.Plugin]:
    """The plug-ins whose reporters write the formats ``names``, once each, in that order."""
    found = [get(name).plugin for name in names]
    return list(dict.fromkeys(plugin for plugin in found if plugin is not None))


def render(report: Any, fmt: str) -> str:
    """The report as text in format ``fmt``."""
    return get(fmt).func(report)

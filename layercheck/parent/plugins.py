"""Finding and loading what registers itself: the built-in modules of a package and a group's
entry points.

Checks and reporters are found the same way (pytest's and flake8's pattern): the modules
under ``layercheck/checks/`` (or ``layercheck/reporting/``) register with a decorator when
imported, and so do the modules third-party packages name in the ``layercheck.checks`` (or
``layercheck.reporters``) entry-point group.

Plug-ins are *found* apart from being *loaded* (flake8's ``plugins/finder.py``): :func:`find`
reads the installed packages' metadata (each plug-in's package and version) and imports
nothing, which is all ``--help`` and ``--version`` need. :func:`load` imports them when a
check or a format is asked for; one that fails to import is recorded, not raised, and becomes
a :class:`PluginError` (one line naming its package and the error, exit status 2) only where
what was asked for may be its: a run (a check plug-in's checks join the default suite), a
check id or a format no loaded plug-in knows.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TypeVar

from layercheck.parent.errors import UsageError

T = TypeVar("T")

CHECKS = "layercheck.checks"
REPORTERS = "layercheck.reporters"
KINDS = {CHECKS: "check", REPORTERS: "reporter"}


class PluginError(UsageError):
    """A plug-in named in an entry point could not be imported: the environment is broken."""


@dataclass(frozen=True)
class Plugin:
    """One installed plug-in, as its package's metadata declares it (nothing imported)."""

    name: str  # the entry point's name
    kind: str  # "check" or "reporter"
    value: str  # what it names: module or module:attribute
    package: str  # the distribution that declares it
    version: str

    def describe(self) -> str:
        return f"{self.kind} plug-in {self.name!r} ({self.value}) from {self.package} {self.version}"

    def to_dict(self) -> dict[str, str]:
        """As a report's environment lists it."""
        return {"name": self.name, "kind": self.kind, "package": self.package, "version": self.version}


_found: dict[str, list[tuple[Plugin, EntryPoint]]] = {}
_loaded: set[tuple[str, str]] = set()  # ("package", name) and ("group", name) imported
_errors: dict[tuple[str, str], str] = {}  # (group, name) -> why it failed to load
_current: Plugin | None = None  # the plug-in being imported now


def loading() -> Plugin | None:
    """The plug-in being imported now, None between: what registers itself meanwhile is its
    (a reporter records where it came from, for the report)."""
    return _current


def find(group: str) -> list[Plugin]:
    """The plug-ins installed in ``group``, in the order the metadata lists them; imports none."""
    return [plugin for plugin, _ in _entries(group)]


def _entries(group: str) -> list[tuple[Plugin, EntryPoint]]:
    if group not in _found:
        found = []
        for ep in entry_points(group=group):
            dist = getattr(ep, "dist", None)
            package = dist.metadata["Name"] if dist is not None else "?"
            version = dist.version if dist is not None else "?"
            found.append((Plugin(ep.name, KINDS.get(group, group), ep.value, package, version), ep))
        _found[group] = found
    return _found[group]


def load(package: str, group: str) -> None:
    """Import every module of ``package`` and every plug-in of ``group`` (once each). A plug-in
    that fails is recorded (:func:`failures`), and the others load."""
    if ("package", package) not in _loaded:
        module = importlib.import_module(package)
        for info in pkgutil.iter_modules(module.__path__):
            importlib.import_module(f"{package}.{info.name}")
        _loaded.add(("package", package))
    if ("group", group) in _loaded:
        return
    global _current
    for plugin, ep in _entries(group):
        _current = plugin
        try:
            ep.load()
        except Exception as exc:
            _errors[(group, plugin.name)] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        finally:
            _current = None
    _loaded.add(("group", group))


def status(group: str) -> list[tuple[Plugin, str | None]]:
    """Each plug-in of ``group`` with why it failed to load (None: it loaded); loads them."""
    return [(plugin, _errors.get((group, plugin.name))) for plugin in find(group)]


def failures(group: str) -> list[PluginError]:
    """One error per plug-in of ``group`` that failed to load (they must be loaded first)."""
    return [PluginError(f"{plugin.describe()} failed to load: {error}")
            for plugin, error in status(group) if error is not None]


def check_loaded(group: str) -> None:
    """Raise the first failure of ``group``'s plug-ins: what was asked for may have been theirs."""
    for error in failures(group):
        raise error


def loaded(group: str) -> list[Plugin]:
    """The plug-ins of ``group`` that loaded (for the report's environment)."""
    return [plugin for plugin, error in status(group) if error is None] if ("group", group) in _loaded else []


def ordered(registry: Mapping[str, T], first: Iterable[str]) -> list[T]:
    """The registered records, those named in ``first`` in that order, then the others in the
    order they registered."""
    rank = {name: i for i, name in enumerate(first)}
    order = list(registry)
    return [registry[name] for name in sorted(registry, key=lambda n: (rank.get(n, len(rank)), order.index(n)))]

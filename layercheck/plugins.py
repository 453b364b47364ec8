"""Loading what registers itself: the built-in modules of a package and a group's entry points.

Checks and reporters are found the same way (pytest's and flake8's pattern): the modules
under ``layercheck/checks/`` (or ``layercheck/reporting/``) register with a decorator when
imported, and so do the modules third-party packages name in the ``layercheck.checks`` (or
``layercheck.reporters``) entry-point group.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from importlib.metadata import entry_points
from typing import TypeVar

from layercheck.errors import UsageError

T = TypeVar("T")

_loaded: set[tuple[str, str]] = set()


class PluginError(UsageError):
    """A plug-in named in an entry point could not be imported: the environment is broken."""


def load(package: str, group: str, what: str) -> None:
    """Import every module of ``package`` and every entry point of ``group`` (once each)."""
    if (package, group) in _loaded:
        return
    module = importlib.import_module(package)
    for info in pkgutil.iter_modules(module.__path__):
        importlib.import_module(f"{package}.{info.name}")
    for ep in entry_points(group=group):
        try:
            ep.load()
        except Exception as exc:
            raise PluginError(f"{what} plug-in {ep.name!r} ({ep.value}, entry-point group {group}) failed to load: "
                              f"{type(exc).__name__}: {exc}") from exc
    _loaded.add((package, group))


def ordered(registry: Mapping[str, T], first: Iterable[str]) -> list[T]:
    """The registered records, those named in ``first`` in that order, then the others in the
    order they registered."""
    rank = {name: i for i, name in enumerate(first)}
    order = list(registry)
    return [registry[name] for name in sorted(registry, key=lambda n: (rank.get(n, len(rank)), order.index(n)))]

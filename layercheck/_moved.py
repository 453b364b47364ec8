"""The modules that moved when the flat package became one package per layer (issue 47): old
dotted name -> new. :mod:`layercheck` installs :class:`OldPaths` from it, so that every old
import path (``import layercheck.runner``, ``from layercheck import runner``,
``from layercheck.subject import Target``, a monkeypatch target ``"layercheck.runner.name"``)
keeps working for one release, with a DeprecationWarning naming the new path, and gives the
very module the new path gives (identity and monkeypatching hold). Nothing else may import
from here; the rewrite script of the move reads the same table.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

MOVED = {
    # the command line
    "layercheck.cli": "layercheck.cli.commands",
    "layercheck.scaffold": "layercheck.cli.scaffold",
    # the parent side: plain data and processes, never torch at import
    "layercheck.errors": "layercheck.parent.errors",
    "layercheck.inputs": "layercheck.parent.inputs",
    "layercheck.invocation": "layercheck.parent.invocation",
    "layercheck.isolation": "layercheck.parent.isolation",
    "layercheck.layout": "layercheck.parent.layout",
    "layercheck.limits": "layercheck.parent.limits",
    "layercheck.listing": "layercheck.parent.listing",
    "layercheck.plan": "layercheck.parent.plan",
    "layercheck.plugins": "layercheck.parent.plugins",
    "layercheck.registry": "layercheck.parent.registry",
    "layercheck.result": "layercheck.parent.result",
    "layercheck.shards": "layercheck.parent.shards",
    "layercheck.sources": "layercheck.parent.sources",
    "layercheck.spec": "layercheck.parent.spec",
    "layercheck.workers": "layercheck.parent.workers",
    # the engine: a plan run into results (the worker's side, the Python API)
    "layercheck.api": "layercheck.engine.api",
    "layercheck.lazytorch": "layercheck.engine.lazytorch",
    "layercheck.runner": "layercheck.engine.runner",
    "layercheck.serve": "layercheck.engine.serve",
    # the layer under test: loaded, sized, built, seeded, called, its outputs walked
    "layercheck.building": "layercheck.target.building",
    "layercheck.calling": "layercheck.target.calling",
    "layercheck.frames": "layercheck.target.frames",
    "layercheck.loading": "layercheck.target.loading",
    "layercheck.seeding": "layercheck.target.seeding",
    "layercheck.subject": "layercheck.target.subject",
    "layercheck.tensors": "layercheck.target.tensors",
    "layercheck.triton_interpret": "layercheck.target.triton_interpret",
    # what the checks share
    "layercheck.accelerators": "layercheck.support.accelerators",
    "layercheck.calibration": "layercheck.support.calibration",
    "layercheck.compare": "layercheck.support.compare",
    "layercheck.containment": "layercheck.support.containment",
    "layercheck.context": "layercheck.support.context",
    "layercheck.locations": "layercheck.support.locations",
    "layercheck.runs": "layercheck.support.runs",
}


def moved_message(old: str, new: str) -> str:
    return f"{old} moved to {new}; import it from there ({old} goes in the next release)"


class OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and loads it as the module at its new path (the same object)."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED or fullname == "layercheck.cli":  # the package layercheck.cli is real
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        # stacklevel 2 is the import statement: warnings does not count importlib's own frames
        warnings.warn(moved_message(spec.name, new), DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has just set the module's __spec__ to the old path's: give its own back.
        module.__spec__ = self._specs.pop(module.__spec__.name if module.__spec__ else "", module.__spec__)


def install() -> None:
    if not any(isinstance(finder, OldPaths) for finder in sys.meta_path):
        # first: an editable install's finder (or a stale copy on the path) would find the old file
        sys.meta_path.insert(0, OldPaths())

"""Resolve layer references (``file.py[:Class]``, ``package.module:Class``) to classes."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path

import torch

from layercheck.errors import CheckTimeout, LoadError


class TargetNotFound(LoadError):
    """The reference names a file, module or class that does not exist."""


def is_layer_class(obj: object) -> bool:
    return inspect.isclass(obj) and (
        issubclass(obj, torch.nn.Module) or issubclass(obj, torch.autograd.Function)
    )


def kind_of(cls: type) -> str:
    return "function" if issubclass(cls, torch.autograd.Function) else "module"


def split_reference(reference: str) -> tuple[str, str | None]:
    """``"a/b.py:Cls"`` -> ``("a/b.py", "Cls")``; a Windows drive colon is not a separator."""
    head, sep, tail = reference.rpartition(":")
    if not sep or not tail or "/" in tail or "\\" in tail or tail.endswith(".py"):
        return reference, None
    return head, tail


def resolve(reference: str, *, base_dir: Path | None = None) -> type:
    """The layer class a reference names; relative file paths are taken from ``base_dir``."""
    where, name = split_reference(reference)
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        module = _import_file(path, reference)
    else:
        module = _import_module(where, reference)
    if name is None:
        return _only_candidate(module, reference)
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            found = ", ".join(c.__name__ for c in _candidates(module)) or "none"
            raise TargetNotFound(f"{reference}: no class {name!r} in {where} (layer classes there: {found})")
        obj = getattr(obj, part)
    if not is_layer_class(obj):
        raise LoadError(f"{reference}: {name} is not a torch.nn.Module or torch.autograd.Function subclass")
    return obj  # type: ignore[return-value]


def _import_file(path: Path, reference: str) -> object:
    path = path.resolve()
    if not path.is_file():
        raise TargetNotFound(f"{reference}: no such file {path}")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"layercheck_user_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"{reference}: {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    # The file's folder goes on sys.path so it can import its siblings, as `python file.py` would.
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        if added:
            sys.path.remove(folder)
        if isinstance(exc, CheckTimeout):
            raise  # the runner's time limit, not the module's failure
        raise LoadError(f"{reference}: importing {path.name} raised {_describe(exc, path)}") from None
    return module


def _import_module(name: str, reference: str) -> object:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise TargetNotFound(f"{reference}: no module named {exc.name!r}") from None
        raise LoadError(f"{reference}: importing {name} raised {_describe(exc)}") from None
    except CheckTimeout:
        raise  # the runner's time limit, not the module's failure
    except BaseException as exc:
        raise LoadError(f"{reference}: importing {name} raised {_describe(exc)}") from None


def _candidates(module: object) -> list[type]:
    """Public layer classes defined in the module itself (not imported into it)."""
    found: list[type] = []
    for key, obj in vars(module).items():
        if (not key.startswith("_") and is_layer_class(obj) and obj not in found
                and obj.__module__ == getattr(module, "__name__", None)):
            found.append(obj)  # once, even when bound to two names (LAYER = Layer)
    modules = [c for c in found if issubclass(c, torch.nn.Module)]
    return modules or found


def _only_candidate(module: object, reference: str) -> type:
    found = _candidates(module)
    if len(found) == 1:
        return found[0]
    if not found:
        raise TargetNotFound(f"{reference}: defines no torch.nn.Module or torch.autograd.Function subclass")
    names = ", ".join(c.__name__ for c in found)
    raise TargetNotFound(f"{reference}: holds several layer classes ({names}); "
                         f"name one, e.g. {reference}:{found[0].__name__}")


def _describe(exc: BaseException, path: Path | None = None) -> str:
    """Exception type and message, plus the innermost frame in the user's file."""
    text = f"{type(exc).__name__}: {exc}"
    frames: list[traceback.FrameSummary] = list(traceback.extract_tb(exc.__traceback__))
    if path is not None:
        frames = [f for f in frames if Path(f.filename).resolve() == path]
    if frames:
        frame = frames[-1]
        text += f" (at {Path(frame.filename).name}:{frame.lineno})"
    return text

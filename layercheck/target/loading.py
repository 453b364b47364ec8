"""Resolve layer references (``file.py[:Class]``, ``package.module:Class``) to classes."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from layercheck.parent.errors import CheckTimeout, LoadError, did_you_mean
from layercheck.parent.sources import is_file_reference, split_reference
from layercheck.target.subject import kind_of


class TargetNotFound(LoadError):
    """The reference names a file, module or class that does not exist."""


def is_layer_class(obj: object) -> bool:
    return inspect.isclass(obj) and (
        issubclass(obj, torch.nn.Module) or issubclass(obj, torch.autograd.Function)
    )


def resolve(reference: str, *, base_dir: Path | None = None) -> Any:
    """What a reference names — a layer class, an ``autograd.Function``, a custom operator or
    a function; relative file paths are taken from ``base_dir``. ``torch.ops.ns.name`` names an
    operator already registered."""
    if reference.startswith("torch.ops."):
        return _registered_op(reference)
    if reference.endswith(".pt"):  # a layer instance saved by layercheck scan, with the files it needs
        from layercheck.target.replay import load_layer

        path = Path(reference)
        return load_layer(path if path.is_absolute() or base_dir is None else base_dir / path, import_file=_import_file)
    where, name = split_reference(reference)
    if is_file_reference(where):
        path = Path(where)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        module = _import_file(path, reference)
    else:
        module = _import_module(where, reference)
    if name is None:
        return _only_candidate(module, reference)
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise TargetNotFound(f"{reference}: no {name!r} in {where}{_suggestions(module, name)}")
        obj = getattr(obj, part)
    if kind_of(obj) is None:
        raise LoadError(f"{reference}: {name} is not a torch.nn.Module or torch.autograd.Function subclass, a "
                        "custom operator (torch.library.custom_op) or a function")
    return obj


def _registered_op(reference: str) -> Any:
    namespace, _, name = reference.removeprefix("torch.ops.").replace(":", ".").partition(".")
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        raise TargetNotFound(f"{reference}: no operator {namespace}::{name} is registered (import the module that "
                             "defines it, or name it as module:operator)") from None


def _suggestions(module: object, name: str) -> str:
    """``; did you mean 'Conv2d'? (layer classes there: ...)``: close names among the module's
    public layers (defined there or re-exported, as a package does), and a few of them."""
    public = [key for key, obj in vars(module).items() if not key.startswith("_") and kind_of(obj) is not None
              and not inspect.ismodule(obj)]
    classes = [key for key in public if is_layer_class(getattr(module, key))] or public
    hint = did_you_mean(name, public)
    listed = ", ".join(sorted(classes)[:12]) + (", ..." if len(classes) > 12 else "") if classes else "none"
    return f"{hint} (layers there: {listed})"


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


def _candidates(module: object) -> list[Any]:
    """Public targets defined in the module itself (not imported into it): its layer classes
    (modules first), else its custom operators, else its functions."""
    here = getattr(module, "__name__", None)
    found: list[Any] = []
    for key, obj in vars(module).items():
        defined = getattr(obj, "_init_fn", obj)
        if (not key.startswith("_") and kind_of(obj) is not None and obj not in found
                and getattr(defined, "__module__", None) == here):
            found.append(obj)  # once, even when bound to two names (LAYER = Layer)
    for kind in ("module", "function", "operator", "callable"):  # the first kind the module defines
        of_kind = [obj for obj in found if kind_of(obj) == kind]
        if of_kind:
            return of_kind
    return []


def _only_candidate(module: object, reference: str) -> Any:
    found = _candidates(module)
    if len(found) == 1:
        return found[0]
    if not found:
        raise TargetNotFound(f"{reference}: defines no torch.nn.Module or torch.autograd.Function subclass, custom "
                             "operator or function")
    names = ", ".join(_short(c) for c in found)
    raise TargetNotFound(f"{reference}: holds several layers ({names}); name one, e.g. {reference}:{_short(found[0])}")


def _short(obj: Any) -> str:
    return str(getattr(getattr(obj, "_init_fn", obj), "__name__", obj))


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

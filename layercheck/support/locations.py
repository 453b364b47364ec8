"""Where a layer's code is defined, for the reports: ``{"file": ..., "line": ...}`` of the layer
(its class, function or operator), and of its hand-written backward where there is one.

GitHub annotations put a failure on that file and line of a pull request's diff, so the file is
written relative to the working directory when it lies below it (CI runs from the repository's
root), else absolute.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from layercheck.target.frames import is_user_file


def layer_location(layer: Any, backward_names: Sequence[str] = ()) -> dict[str, Any] | None:
    """Where ``layer`` (a module class, an autograd.Function, a custom operator or a function)
    is defined, with ``"backward"``: ``{"name", "file", "line"}`` of its hand-written backward
    when one is found (the Function's own, a custom operator's registered one, or the first of
    ``backward_names``, the autograd.Function classes its graph holds, that can be looked up in
    the layer's module or class). None where the source is unknown (a builtin, a C extension)."""
    defined = getattr(layer, "_init_fn", layer)  # a custom operator: the function it was made from
    return with_backward(source_of(defined), layer, backward_names)


def with_backward(where: dict[str, Any] | None, layer: Any,
                  backward_names: Sequence[str] = ()) -> dict[str, Any] | None:
    """``where``, the layer's own location (None where its source is unknown), with its
    hand-written backward's as :func:`layer_location` finds it."""
    if where is None:
        return None
    backward = _backward_of(layer, backward_names)
    return {**where, "backward": backward} if backward is not None else where


def source_of(obj: Any) -> dict[str, Any] | None:
    """``{"file", "line"}`` of a class or function the user wrote; None for anything else."""
    try:
        file = inspect.getsourcefile(obj)
    except (OSError, TypeError):
        return None
    if file is None or not is_user_file(file):
        return None
    try:  # the same object, file and folder as last time: found once (inspect tokenizes the whole block)
        found = _found(obj, file, Path(file).stat().st_mtime_ns, os.getcwd())
    except (OSError, TypeError):  # a file gone, an object that cannot be a key
        found = _found.__wrapped__(obj, file, 0, "")
    return None if found is None else dict(found)


@functools.lru_cache(maxsize=64)
def _found(obj: Any, file: str, modified: int, cwd: str) -> dict[str, Any] | None:
    """source_of's answer for ``obj``, defined in ``file`` as last ``modified``, shown from ``cwd``."""
    try:
        lines, line = inspect.getsourcelines(obj)
    except (OSError, TypeError):
        return None
    # The line of ``def`` or ``class`` itself, below its decorators.
    line += next((i for i, text in enumerate(lines) if text.lstrip().startswith(("def ", "async def ", "class "))), 0)
    return {"file": shown_path(file), "line": max(int(line), 1)}


def shown_path(file: str) -> str:
    """``file`` relative to the working directory where it lies below it (``/`` separators), or
    below a symbolic link there (``docs -> /src/docs``: ``docs/x.py``), else absolute."""
    path, cwd = Path(file).resolve(), Path.cwd()
    try:
        return path.relative_to(cwd.resolve()).as_posix()
    except ValueError:
        pass
    try:
        links = [entry for _, entry in zip(range(_LINKS_LOOKED_AT), cwd.iterdir()) if entry.is_symlink()]
    except OSError:
        links = []
    for link in links:
        try:
            return (Path(link.name) / path.relative_to(link.resolve())).as_posix()
        except (ValueError, OSError):
            continue
    return path.as_posix()


_LINKS_LOOKED_AT = 1000  # entries of the working directory searched for a link to the file's folder


def _backward_of(layer: Any, names: Sequence[str]) -> dict[str, Any] | None:
    registered = getattr(layer, "_backward_fn", None)  # torch.library.custom_op's register_autograd
    candidates: list[tuple[str, Any]] = []
    if registered is not None:
        candidates.append((getattr(registered, "__qualname__", "backward"), registered))
    if _is_function_class(layer):
        candidates.append((f"{layer.__qualname__}.backward", layer.__dict__.get("backward")))
    module = sys.modules.get(getattr(layer, "__module__", "") or "")
    # The classes the layer's module and class can reach by name (an alias too: _Fn = MyFn).
    known = [*vars(module).values(), *(vars(layer).values() if inspect.isclass(layer) else ())] if module else []
    for name in names:
        cls = next((c for c in known if _is_function_class(c) and c.__name__ == name), None)
        if cls is not None:
            candidates.append((f"{cls.__qualname__}.backward", cls.__dict__.get("backward")))
    for name, fn in candidates:
        fn = getattr(fn, "__func__", fn)  # a staticmethod read from a class __dict__
        where = source_of(fn) if fn is not None else None
        if where is not None:
            return {"name": name, **where}
    return None


def _is_function_class(obj: Any) -> bool:
    function = sys.modules.get("torch.autograd.function")
    base = getattr(function, "Function", None)
    return inspect.isclass(obj) and base is not None and issubclass(obj, base) and obj is not base

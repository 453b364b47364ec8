"""What a layer reference names, read from source without running it.

``layercheck run nosuchfile.py`` and a mistyped class name must answer at once, before
torch is imported (exit status 2). Importing the layer's file would run it, and it imports
torch; so the file is parsed (:mod:`ast`) and the names its top level binds are read. Where
the source alone cannot settle it (a ``from x import *``, a module ``__getattr__``, names
written through ``globals()``, ``global`` or ``sys.modules``; a ``package.module:Name`` reference below the top-level
package, which finding would import), nothing is decided here: the worker imports the layer
and a missing name is still a usage error, found after torch's import rather than before.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from layercheck.parent.errors import UsageError, did_you_mean


def split_reference(reference: str) -> tuple[str, str | None]:
    """``"a/b.py:Cls"`` -> ``("a/b.py", "Cls")``; a Windows drive colon is not a separator."""
    head, sep, tail = reference.rpartition(":")
    if not sep or not tail or "/" in tail or "\\" in tail or tail.endswith(".py"):
        return reference, None
    return head, tail


def is_file_reference(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def check_reference(reference: str, *, base_dir: Path) -> None:
    """Raise UsageError when the source shows that ``reference`` names nothing: a file that
    does not exist, a top-level module that is not installed, a name the file does not bind."""
    if reference.startswith("torch.ops."):
        return
    if reference.endswith(".pt"):  # a layer instance saved by layercheck scan
        if not (base_dir / reference).is_file():
            raise UsageError(f"{reference}: no such file {(base_dir / reference).resolve()}")
        return
    where, name = split_reference(reference)
    if not is_file_reference(where):
        top = where.partition(".")[0]
        if top.isidentifier() and importlib.util.find_spec(top) is None:
            raise UsageError(f"{reference}: no module named {top!r}")
        return
    path = Path(where)
    if not path.is_absolute():
        path = base_dir / path
    if not path.is_file():
        raise UsageError(f"{reference}: no such file {path.resolve()}")
    if name is None:
        return
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):
        return  # importing it says what is wrong, as the layer's error (exit status 1)
    bound = top_level_names(tree)
    first = name.partition(".")[0]
    if bound is None or first in bound:
        return
    public = sorted(n for n in bound if not n.startswith("_"))
    classes = sorted(n for n in top_level_classes(tree) if not n.startswith("_")) or public
    listed = ", ".join(classes[:12]) + (", ..." if len(classes) > 12 else "") if classes else "none"
    raise UsageError(f"{reference}: no {name!r} in {where}{did_you_mean(first, public)} (layers there: {listed})")


def top_level_names(tree: ast.Module) -> set[str] | None:
    """The names a module's top level binds (in every branch of an ``if`` or ``try``), or None
    when it may bind others the source does not show."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return None
        if isinstance(node, ast.Global) or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                                            and node.func.id in ("globals", "exec")):
            return None
        written = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AugAssign | ast.AnnAssign) else node.args[:1] if isinstance(node, ast.Call) and isinstance(
            node.func, ast.Name) and node.func.id == "setattr" else []
        if any(_names_sys_modules(target.value if isinstance(target, ast.Attribute) and not isinstance(node, ast.Call)
                                  else target) for target in written
               if isinstance(target, ast.Attribute) or isinstance(node, ast.Call)):  # sys.modules[__name__].X = ...
            return None
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).partition(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    names.update(n.id for n in ast.walk(item.optional_vars) if isinstance(n, ast.Name))
    names.update(n.target.id for n in ast.walk(tree) if isinstance(n, ast.NamedExpr))
    return names


def _names_sys_modules(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "modules" and isinstance(n.value, ast.Name)
               and n.value.id == "sys" for n in ast.walk(node))


def top_level_classes(tree: ast.Module) -> list[str]:
    """The classes a module defines whose bases look like a layer's (``nn.Module``,
    ``torch.autograd.Function``, ``Module``...), else all of them."""
    classes = [node for node in _top_level(tree.body) if isinstance(node, ast.ClassDef)]
    layers = [node for node in classes
              if any(ast.unparse(base).rpartition(".")[2] in ("Module", "Function") for base in node.bases)]
    return [node.name for node in layers or classes]


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a module's top level, those inside ``if``/``try``/``with``/``for``
    blocks included (what runs when the module is imported)."""
    found: list[ast.stmt] = []
    for node in body:
        found.append(node)
        for field in ("body", "orelse", "finalbody"):
            found.extend(_top_level(getattr(node, field, []) if not isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else []))
        for handler in getattr(node, "handlers", []):
            found.extend(_top_level(handler.body))
    return found

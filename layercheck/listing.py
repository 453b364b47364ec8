"""The check catalogue read from source, without importing the checks (and so torch).

``layercheck --help``, ``layercheck checks`` and a mistyped check id must answer at once;
importing the check modules imports torch, which takes seconds. So the ``@check(...)``
declarations are read with :mod:`ast`: the id, title, MATLAB counterpart, whether the check
runs by default and its (opt-in) variants, where they are written as literals or as names
bound to literals. A declaration that cannot be read so (a variant list computed at import
time, a plug-in without source) makes :func:`entries` import the registry instead: slower,
never wrong. ``tests/test_listing.py`` holds the two readings equal.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from layercheck.errors import UsageError, did_you_mean
from layercheck.registry import SPEC_ORDER

_CHECKS = Path(__file__).parent / "checks"
_GROUP = "layercheck.checks"
_UNREADABLE = object()


@dataclass(frozen=True)
class Entry:
    """What the catalogue shows of one check. ``variants`` is None when they are only known
    at run time (the device check's: the accelerators present)."""

    id: str
    title: str
    matlab: str = ""
    default: bool = True
    variants: tuple[str, ...] | None = ("",)
    optional_variants: tuple[str, ...] = ()


class Unreadable(Exception):
    """A declaration the source alone does not settle."""


def entries() -> list[Entry]:
    """Every check, in catalogue order: read from source when every declaration can be, else
    from the imported registry."""
    try:
        found = static_entries()
    except Unreadable:
        found = imported_entries()
    rank = {name: i for i, name in enumerate(SPEC_ORDER)}
    return sorted(found, key=lambda e: rank.get(e.id, len(rank)))


def check_selectors(selectors: list[str] | tuple[str, ...], option: str) -> None:
    """Raise UsageError for a ``--check``/``--skip``/``--enable`` value naming a check (or a
    variant of it) that does not exist, as the registry would, without importing the checks.
    A variant known only at run time is left to the registry to judge."""
    known = {e.id: e for e in entries()}
    for text in selectors:
        check_id, _, variant = text.partition(":")
        entry = known.get(check_id.strip())
        if entry is None:
            hint = did_you_mean(check_id.strip(), known) or "; `layercheck checks` lists them"
            raise UsageError(f"{option} {text}: unknown check id {check_id.strip()!r}{hint}")
        if variant and entry.variants is not None and variant not in entry.variants + entry.optional_variants:
            names = ", ".join(v for v in entry.variants + entry.optional_variants if v) or "none"
            raise UsageError(f"{option} {text}: check {entry.id!r} has no variant {variant!r}; its variants: {names}")


_ROLE = re.compile(r":(?:py:)?(func|meth|class|mod|attr|data|obj|exc|ref|doc)?:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``", re.S)


def as_text(doc: str) -> str:
    """A docstring's reST markup as plain text for a terminal: ``path`` -> path,
    :func:`name` -> name(), :class:`~a.b.Name` -> Name."""

    def role(match: re.Match[str]) -> str:
        kind, target = match.group(1), match.group(2).strip()
        if match.group(0).split("`", 1)[1].startswith("~"):
            target = target.rpartition(".")[2]
        return f"{target}()" if kind in ("func", "meth") and not target.endswith(")") else target

    return _LITERAL.sub(r"\1", _ROLE.sub(role, doc))


def imported_entries() -> list[Entry]:
    from layercheck import registry

    return [Entry(i.id, i.title, i.matlab, i.default, i.variants, i.optional_variants) for i in registry.catalogue()]


def static_entries() -> list[Entry]:
    """The declarations in ``layercheck/checks/*.py`` and in the plug-in modules of the
    ``layercheck.checks`` entry-point group; raises Unreadable for one it cannot settle."""
    sources = sorted(p for p in _CHECKS.glob("*.py") if p.name != "__init__.py")
    for ep in entry_points(group=_GROUP):
        spec = importlib.util.find_spec(ep.module)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            raise Unreadable(f"plug-in {ep.value} has no Python source")
        sources.append(Path(spec.origin))
    found: list[Entry] = []
    for path in sources:
        found.extend(_read(path))
    return found


# A run asks for the catalogue once per option it validates (--check, --skip, --enable, a
# spec's): each file is parsed once per process, again only when it changed.
_READ: dict[Path, tuple[tuple[int, int], list[Entry]]] = {}


def _read(path: Path) -> list[Entry]:
    stat = path.stat()
    version = (stat.st_mtime_ns, stat.st_size)
    if path not in _READ or _READ[path][0] != version:
        _READ[path] = version, _parse(path)
    return list(_READ[path][1])


def _parse(path: Path) -> list[Entry]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names = _literal_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and _called(decorator.func) == "check":
                found.append(_entry(decorator, names, f"{path.name}:{node.name}"))
    return found


def _called(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _literal_names(tree: ast.Module) -> dict[str, Any]:
    """Module-level names bound to literals, and the registry's names imported from it."""
    from layercheck import registry

    names: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                names[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
        elif isinstance(node, ast.ImportFrom) and node.module == "layercheck.registry":
            for alias in node.names:
                value = getattr(registry, alias.name, _UNREADABLE)
                if isinstance(value, (str, tuple, bool)):
                    names[alias.asname or alias.name] = value
    return names


def _entry(call: ast.Call, names: dict[str, Any], where: str) -> Entry:
    def value(node: ast.expr) -> Any:
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise Unreadable(f"{where}: {node.id} is not a literal")
            return names[node.id]
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise Unreadable(f"{where}: {ast.unparse(node)} is not a literal") from None

    if not call.args:
        raise Unreadable(f"{where}: no check id")
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    variants: tuple[str, ...] | None = ("",)
    if "variants" in keywords:
        try:
            variants = tuple(value(keywords["variants"]))
        except Unreadable:
            variants = None  # known at run time only
    return Entry(
        id=value(call.args[0]),
        title=value(keywords["title"]),
        matlab=value(keywords["matlab"]) if "matlab" in keywords else "",
        default=value(keywords["default"]) if "default" in keywords else True,
        variants=variants,
        optional_variants=tuple(value(keywords["optional_variants"])) if "optional_variants" in keywords else (),
    )

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
import collections
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from layercheck.parent.errors import UsageError, did_you_mean
from layercheck.parent.registry import SPEC_ORDER

_PACKAGE = Path(__file__).resolve().parent.parent
_CHECKS = _PACKAGE / "checks"
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


@dataclass(frozen=True)
class Page:
    """What ``layercheck checks ID`` shows of one check: its entry, what it needs, whether it
    samples large batches, its tolerances (dtype, default, what it bounds) and its docstring."""

    entry: Entry
    requires: tuple[str, ...] = ()
    any_batch: bool = False
    tolerances: tuple[tuple[str, float, str], ...] = ()
    doc: str = ""


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
    if not selectors:
        return  # nothing to read the catalogue for (a run without --check, --skip, --enable)
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


def page(check_id: str) -> Page:
    """A check's page, read from source where its declaration can be (no torch), else from the
    imported registry. Raises UsageError for an unknown id. A built-in check's page is read from
    its own module alone (the other modules parsed only for an id that is not a built-in's)."""
    try:
        return static_page(check_id)
    except Unreadable:
        check_selectors((check_id,), "checks")  # an unknown id: the usage error, as for --check
        return imported_page(check_id)


def imported_page(check_id: str) -> Page:
    from layercheck.parent import registry

    info = registry.get(check_id)
    entry = Entry(info.id, info.title, info.matlab, info.default, info.variants, info.optional_variants)
    return Page(entry, info.requires, info.any_batch, tuple((t.dtype, t.default, t.bounds) for t in info.tolerances),
                info.doc)


def static_page(check_id: str) -> Page:
    """The page of a built-in check read from its module's source; raises Unreadable where the
    declaration is computed (tolerances from a table, variants known at run time) or the check
    is a plug-in's."""
    quoted = (f'"{check_id}"', f"'{check_id}'")
    for path in sorted(p for p in _CHECKS.glob("*.py") if p.name != "__init__.py"):
        if not any(q in path.read_text(encoding="utf-8") for q in quoted):
            continue  # no declaration of it here: not worth parsing
        tree = _tree(path)
        for node, call in _declarations(tree):
            if call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value == check_id:
                return _page(node, call, _literal_names(tree), f"{path.name}:{node.name}")
    raise Unreadable(f"{check_id}: not a built-in check")


def _page(node: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, names: dict[str, Any], where: str) -> Page:
    entry = _entry(call, names, where)  # variants None: known when the checks run (the accelerators present)
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    value = _evaluator(names, where)
    requires = list(value(keywords["requires"])) if "requires" in keywords else []
    if "uses" in keywords:
        runs = _shared_runs()
        for use in _elements(keywords["uses"], where):
            if not isinstance(use, ast.Name) or use.id not in runs:
                raise Unreadable(f"{where}: {ast.unparse(use)} is not a shared run of runs.py")
            requires += runs[use.id]
    tolerances = []
    declared = keywords.get("tolerances")
    if isinstance(declared, ast.Name) and isinstance(names.get(declared.id), ast.AST):
        declared = names[declared.id]
    for element in [] if declared is None else declared.elts if isinstance(declared, (ast.Tuple, ast.List)) \
            else [declared]:
        tolerances += _tolerances(element, names, where)
    return Page(entry, tuple(dict.fromkeys(requires)),
                bool(value(keywords["any_batch"])) if "any_batch" in keywords else False,
                tuple(tolerances), ast.get_docstring(node) or "")


def _elements(node: ast.expr, where: str) -> list[ast.expr]:
    if not isinstance(node, (ast.Tuple, ast.List)) or any(isinstance(e, ast.Starred) for e in node.elts):
        raise Unreadable(f"{where}: {ast.unparse(node)} is not a literal tuple")
    return list(node.elts)


def _tolerances(node: ast.expr, names: dict[str, Any], where: str) -> list[tuple[str, float, str]]:
    """``Tolerance(dtype, default, bounds)`` of literals, or ``path_tolerances(bounds)`` /
    ``rounding_tolerances(bounds)`` (their tables read from runs.py and compare.py)."""
    if isinstance(node, ast.Name) and isinstance(names.get(node.id), ast.Call):
        node = names[node.id]
    if not isinstance(node, ast.Call) or node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise Unreadable(f"{where}: {ast.unparse(node)} is not a Tolerance declaration")
    args = [_evaluator(names, where)(a) for a in node.args]
    called = _called(node.func)
    if called == "Tolerance" and len(args) == 3:
        return [(args[0], args[1], args[2])]
    if called in ("path_tolerances", "rounding_tolerances") and len(args) == 1:
        if called == "path_tolerances":
            table = _table("support/runs.py", "PATH_RTOL")
        else:
            table = _table("support/compare.py", "ROUNDING")
        return [(dtype, rtol[0] if isinstance(rtol, tuple) else rtol, args[0]) for dtype, rtol in table.items()]
    raise Unreadable(f"{where}: {ast.unparse(node)} is not a Tolerance declaration")


@dataclass(frozen=True)
class _Imported:
    """A name a check module imports from another module of layercheck (``path`` relative to the package)."""

    path: str


def _table(module: str, name: str) -> dict[str, Any]:
    """A module-level dict of layercheck/``module`` keyed by dtype (``torch.float32`` or
    ``"float32"``), read from source."""
    path = _PACKAGE / module
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
            table = {}
            for key, item in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Attribute) and isinstance(key.value, ast.Name) and key.value.id == "torch":
                    table[key.attr] = ast.literal_eval(item)
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    table[key.value] = ast.literal_eval(item)
                else:
                    raise Unreadable(f"{module}: {name} has a key that is not a dtype")
            return table
    raise Unreadable(f"{module}: no {name} table")


def _shared_runs() -> dict[str, list[str]]:
    """The shared runs declared in runs.py (``NAME = SharedRun("name", (required, ...))``): what each requires."""
    found = {}
    for node in ast.parse((_PACKAGE / "support" / "runs.py").read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and _called(node.value.func) == "SharedRun"
                and len(node.value.args) == 2):
            try:
                found[node.targets[0].id] = list(ast.literal_eval(node.value.args[1]))
            except ValueError:
                continue
    return found


def sample_elements() -> int:
    """subject.SAMPLE_ELEMENTS, read from source: how many elements an input may have before the
    checks that declare ``any_batch`` run on a sample of the batch."""
    for node in ast.parse((_PACKAGE / "target" / "subject.py").read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "SAMPLE_ELEMENTS"
                and all(isinstance(n, (ast.Constant, ast.BinOp, ast.operator)) for n in ast.walk(node.value))):
            return int(eval(compile(ast.Expression(node.value), "target/subject.py", "eval"), {"__builtins__": {}}))
    from layercheck.target.subject import SAMPLE_ELEMENTS

    return SAMPLE_ELEMENTS


def imported_entries() -> list[Entry]:
    from layercheck.parent import registry

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
# spec's), and `checks ID` for its page after the catalogue: each file is parsed once per
# process, again only when it changed, and its entries read once from that.
_TREES: dict[Path, tuple[tuple[int, int], ast.Module]] = {}
_READ: dict[Path, tuple[ast.Module, list[Entry]]] = {}


def _tree(path: Path) -> ast.Module:
    stat = path.stat()
    version = (stat.st_mtime_ns, stat.st_size)
    if path not in _TREES or _TREES[path][0] != version:
        _TREES[path] = version, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return _TREES[path][1]


def _read(path: Path) -> list[Entry]:
    tree = _tree(path)
    if path not in _READ or _READ[path][0] is not tree:
        names = _literal_names(tree)
        _READ[path] = tree, [_entry(call, names, f"{path.name}:{node.name}") for node, call in _declarations(tree)]
    return list(_READ[path][1])


def _declarations(tree: ast.Module) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.Call]]:
    """Each function decorated with ``@check(...)``, with the decorator's call."""
    found = []
    for node in _statements(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [(node, d) for d in node.decorator_list
                      if isinstance(d, ast.Call) and _called(d.func) == "check"]
    return found


def _statements(tree: ast.Module) -> Iterator[ast.AST]:
    """ast.walk's nodes in its order, but only statements and the clauses that hold them: a
    function is defined only by a statement, and the expressions (nine in ten of a module's
    nodes, walked for nothing before) hold none."""
    todo: collections.deque[ast.AST] = collections.deque([tree])
    while todo:
        node = todo.popleft()
        todo.extend(child for child in ast.iter_child_nodes(node)
                    if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)))
        yield node


def _called(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _literal_names(tree: ast.Module) -> dict[str, Any]:
    """Module-level names bound to literals, and the registry's names imported from it."""
    from layercheck.parent import registry

    names: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                names[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                calls = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                if calls and all(isinstance(c, ast.Call) and _called(c.func) == "Tolerance" for c in calls):
                    names[node.targets[0].id] = node.value  # Tolerance declarations, read by _tolerances
        elif isinstance(node, ast.ImportFrom) and node.module in (
                "layercheck.parent.registry", "layercheck.registry"):  # a plug-in's old import, old path: kept
            for alias in node.names:
                value = getattr(registry, alias.name, _UNREADABLE)
                if isinstance(value, (str, tuple, bool)):
                    names[alias.asname or alias.name] = value
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("layercheck."):
            module = "/".join((node.module or "").split(".")[1:]) + ".py"
            for alias in node.names:
                if alias.asname is None:  # a table, for _table (GRADIENT_TOLERANCE[torch.float64])
                    names.setdefault(alias.name, _Imported(module))
    return names


def _evaluator(names: dict[str, Any], where: str) -> Any:
    def value(node: ast.expr) -> Any:
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and isinstance(names.get(node.value.id), _Imported) and isinstance(node.slice, ast.Attribute)):
            table = _table(names[node.value.id].path, node.value.id)  # GRADIENT_TOLERANCE[torch.float64]
            if node.slice.attr not in table:
                raise Unreadable(f"{where}: {ast.unparse(node)} is not in its table")
            return table[node.slice.attr]
        if isinstance(node, ast.Name):
            if node.id not in names or isinstance(names[node.id], (ast.AST, _Imported)):
                raise Unreadable(f"{where}: {node.id} is not a literal")
            return names[node.id]
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise Unreadable(f"{where}: {ast.unparse(node)} is not a literal") from None

    return value


def _entry(call: ast.Call, names: dict[str, Any], where: str) -> Entry:
    value = _evaluator(names, where)
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

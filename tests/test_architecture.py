"""The import structure, read from source (ast): no module of layercheck imports, directly or
through others, a module that imports it back, and the engine never imports the command line.

Every import counts: at the top of a module, inside a function, under ``TYPE_CHECKING``. A
circle makes the order modules load in matter and ties layers that should stack; the
command line sits on top, and only the entry points (``launch``, ``__main__``) import it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "layercheck"
ENTRY_POINTS = {"layercheck.launch", "layercheck.__main__"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def imports_of(name: str) -> set[str]:
    """The layercheck modules ``name`` imports (``from layercheck import runner``: the module
    runner; ``from layercheck import __version__``: the package root)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                named.add(full if full in MODULES else base)
    found = set()
    for module in named:
        while module and module not in MODULES:
            module = module.rpartition(".")[0]
        if module and module != name:
            found.add(module)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    graph = {name: imports_of(name) for name in MODULES}
    assert circles(graph) == []


def test_only_the_entry_points_import_the_command_line() -> None:
    importers = sorted(name for name in MODULES if "layercheck.cli.commands" in imports_of(name))
    assert set(importers) <= ENTRY_POINTS, importers


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_circles_are_found(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert circles(graph) == expected


def test_imports_are_read_from_every_place_an_import_can_be(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "layercheck" / "parent" / "fake.py"
    module.parent.mkdir(parents=True)
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from layercheck.parent.result import Report\n"
                      "def f():\n    from layercheck.engine import runner\n    from . import errors\n")
    monkeypatch.setitem(MODULES, "layercheck.parent.fake", module)
    assert imports_of("layercheck.parent.fake") == {"layercheck.parent.result", "layercheck.engine.runner",
                                                    "layercheck.parent.errors"}


def _functions(name: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(MODULES[name].read_text())
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _annotation(arg: ast.arg) -> str:
    return ast.unparse(arg.annotation) if arg.annotation is not None else ""


def test_a_spec_and_the_options_meet_only_in_the_plan() -> None:
    """One resolved plan: only ``plan.TargetPlan.of`` takes a spec beside the command line's
    options; everything after it (the CLI's checks, the runner, the workers, the pytest plugin,
    the Python API) is handed the TargetPlan, never a (spec, options) pair to resolve again."""
    pairs = []
    for name in MODULES:
        for function in _functions(name):
            args = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
            kinds = {_annotation(a).rpartition(".")[2] for a in args}
            if "TargetSpec" in kinds and "Options" in kinds:
                pairs.append(f"{name}.{function.name}")
    assert pairs == ["layercheck.parent.plan.of"]


def test_the_catalogue_resolves_a_plan_in_one_place() -> None:
    """The selection and the tolerance overrides become the engine's checks in runner.py's
    ``checks_of`` (and what it calls), nowhere else."""
    callers = set()
    for name in MODULES:
        if name == "layercheck.parent.registry":
            continue
        for function in _functions(name):
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    called = ast.unparse(node.func).removeprefix("registry.")
                    if called in ("select", "resolve_tolerances"):  # the registry's (not Shard.select)
                        callers.add(f"{name}.{function.name}")
    assert callers <= {"layercheck.engine.runner.checks_of", "layercheck.engine.runner.check_options",
                       "layercheck.engine.runner._tolerances"}, callers


def test_the_engine_and_the_workers_take_the_resolved_plan() -> None:
    wanted = {("layercheck.engine.runner", "run"): "plans", ("layercheck.engine.runner", "run_plan"): "plan",
              ("layercheck.engine.runner", "load_target"): "plan", ("layercheck.target.prepare", "make_target"): "plan",
              ("layercheck.target.prepare", "prepare"): "plan",
              ("layercheck.parent.isolation", "run"): "plans", ("layercheck.engine.serve", "_load"): "plan"}
    for (module, function_name), parameter in wanted.items():
        (function,) = [f for f in _functions(module) if f.name == function_name and f.col_offset == 0]
        (arg,) = [a for a in function.args.args if a.arg == parameter]
        assert "TargetPlan" in _annotation(arg), (module, function_name, _annotation(arg))


# -- the layers: ARCHITECTURE.md's table against the tree and its imports ---------------------------

ARCHITECTURE = PACKAGE.parent / "ARCHITECTURE.md"
LINE_LIMIT = 700  # a module you can hold in your head (STYLE.md 15)
# Imports the table does not allow, each for a reason: importer -> imported.
EXCEPTIONS = {
    ("layercheck.parent.workers", "layercheck.engine.serve"):
        "the fork server's main, imported inside the function the worker runs, never in the parent",
    ("layercheck.parent.result", "layercheck.reporting.registry"):
        "a Report renders through the reporter registry (the reporters read parent/result back)",
    ("layercheck.parent.registry", "layercheck.target.subject"): "the Target type, under TYPE_CHECKING only",
    ("layercheck.parent.listing", "layercheck.target.subject"):
        "SAMPLE_ELEMENTS, imported inside a function when it cannot be read from source",
    ("layercheck.support.ranks", "layercheck.engine.serve"):
        "a rank process dies with its parent as a worker does (_die_with_parent, inside rank_main)",
}


def layer_table(text: str) -> tuple[dict[str, list[str]], dict[str, set[str] | None]]:
    """ARCHITECTURE.md's table: layer -> where (``name/`` a package, ``name`` a top-level module),
    and layer -> the layers it may import (None: everything)."""
    lines = text[text.index("| layer | where | may import |"):].splitlines()[2:]
    rows: list[tuple[str, list[str], str]] = []
    for line in lines:
        if not line.startswith("|"):
            break
        layer, where, may = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append((layer, [w.strip("`") for w in (part.strip() for part in where.split(",")) if w], may))
    places = {layer: where for layer, where, _ in rows}
    by_place = {w: layer for layer, where, _ in rows for w in where}
    allowed: dict[str, set[str] | None] = {}
    for layer, _, may in rows:
        if may.startswith("everything"):
            allowed[layer] = None
            continue
        named = {part.strip("`") for part in re.findall(r"`[^`]+`|\b[A-Za-z]+\b", may.split(";")[0])}
        allowed[layer] = {by_place.get(n, n) for n in named if n in by_place or n in places}
    return places, allowed


def layer_of(module: str, places: dict[str, list[str]]) -> str | None:
    parts = module.split(".")
    for layer, where in places.items():
        for place in where:
            if module == "layercheck" and place == "__init__":
                return layer
            if len(parts) > 1 and (parts[1] == place.rstrip("/")) and (place.endswith("/") or len(parts) == 2):
                return layer
    return None


PLACES, ALLOWED = layer_table(ARCHITECTURE.read_text())


def test_the_table_and_the_tree_say_the_same_thing() -> None:
    """Every package and top-level module of layercheck has one row of ARCHITECTURE.md's table,
    and every place the table names exists."""
    tree = {p.name + "/" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    tree |= {p.stem for p in PACKAGE.glob("*.py")}
    named = [place for where in PLACES.values() for place in where]
    assert len(named) == len(set(named)), f"a place in two rows: {sorted(named)}"
    assert sorted(tree - set(named)) == [], "in the tree, not in ARCHITECTURE.md's table"
    assert sorted(set(named) - tree) == [], "in ARCHITECTURE.md's table, not in the tree"


def test_every_import_is_one_the_table_allows() -> None:
    wrong = []
    for name in sorted(MODULES):
        mine = layer_of(name, PLACES)
        allowed = ALLOWED[mine] if mine is not None else set()
        for other in sorted(imports_of(name)):
            theirs = layer_of(other, PLACES)
            if theirs == mine or allowed is None or theirs in allowed or (name, other) in EXCEPTIONS:
                continue
            wrong.append(f"{name} ({mine}) imports {other} ({theirs})")
    assert wrong == []


def test_the_exceptions_are_still_needed() -> None:
    """An exception whose import is gone goes from the list."""
    stale = [pair for pair in EXCEPTIONS if pair[1] not in imports_of(pair[0])]
    assert stale == []


def test_the_table_is_read_as_written() -> None:
    places, allowed = layer_table("| layer | where | may import |\n|---|---|---|\n"
                                  "| top | `a/`, `b` | everything |\n| mid | `m/` | `low/`; never `a/` |\n"
                                  "| low | `low/` | nothing above it |\n\nafter\n")
    assert places == {"top": ["a/", "b"], "mid": ["m/"], "low": ["low/"]}
    assert allowed == {"top": None, "mid": {"low"}, "low": set()}
    assert layer_of("layercheck.m.x", places) == "mid" and layer_of("layercheck.b", places) == "top"
    assert layer_of("layercheck.b.x", places) is None  # b is a module, not a package


def test_no_module_is_over_the_line_limit() -> None:
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > LINE_LIMIT}
    assert long == {}

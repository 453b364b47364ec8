"""The import structure, read from source (ast): no module of layercheck imports, directly or
through others, a module that imports it back, and the engine never imports the command line.

Every import counts: at the top of a module, inside a function, under ``TYPE_CHECKING``. A
circle makes the order modules load in matter and ties layers that should stack; the
command line sits on top, and only the entry points (``launch``, ``__main__``) import it.
"""

from __future__ import annotations

import ast
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

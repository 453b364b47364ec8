"""The catalogue read from source (no torch) says what the imported registry says."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from layercheck.parent import listing
from layercheck.parent.errors import UsageError
from layercheck.parent.registry import catalogue as registered


def test_the_source_reading_matches_the_registry() -> None:
    static = {e.id: e for e in listing.static_entries()}
    imported = {e.id: e for e in listing.imported_entries()}
    assert static.keys() == imported.keys()
    for check_id, entry in imported.items():
        read = static[check_id]
        if read.variants is None:  # computed at import time (the accelerators present)
            read = listing.Entry(read.id, read.title, read.matlab, read.default, entry.variants,
                                   read.optional_variants)
        assert read == entry
    assert [e.id for e in listing.entries()] == [i.id for i in registered()]


def test_a_check_page_read_from_source_matches_the_registry() -> None:
    """`layercheck checks ID` reads the page from source: what it needs (its shared runs'
    prerequisites too), its tolerances (path_tolerances, rounding_tolerances and the tables they
    read included) and its docstring. Variants that are the accelerators present are left to
    the run (None): the rest of those pages is the registry's."""
    at_run_time = []
    for entry in listing.imported_entries():
        read, imported = listing.static_page(entry.id), listing.imported_page(entry.id)
        if read.entry.variants is None:
            at_run_time.append(entry.id)
            read = dataclasses.replace(read, entry=dataclasses.replace(read.entry, variants=imported.entry.variants))
        assert read == imported, entry.id
    assert sorted(at_run_time) == ["autocast", "device"]


def test_a_built_in_check_s_page_parses_its_own_module_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`layercheck checks gradients` parses checks/gradients.py, not the whole catalogue (a
    tenth of a second of CPU); an unknown id still reads the catalogue for its suggestion."""
    monkeypatch.setattr(listing, "_TREES", {})
    page = listing.page("gradients")
    assert page.entry.id == "gradients" and "finite differences" in page.doc
    assert [p.name for p in listing._TREES] == ["gradients.py"]
    with pytest.raises(UsageError, match="did you mean 'gradients'"):
        listing.page("gradiens")
    assert len(listing._TREES) > 10


def test_a_tolerance_table_the_source_does_not_settle_leaves_the_page_to_the_registry(tmp_path: Path) -> None:
    module = tmp_path / "mine.py"
    module.write_text('from layercheck.parent.registry import check, Tolerance\n\n'
                      '@check("mine", title="t", tolerances=(Tolerance("float32", 1e-3, "b"),))\ndef mine(ctx):\n'
                      '    """Doc."""\n\n'
                      '@check("other", title="t", tolerances=make())\ndef other(ctx): ...\n')
    tree = ast.parse(module.read_text())
    (mine, mine_call), (other, other_call) = listing._declarations(tree)
    names = listing._literal_names(tree)
    page = listing._page(mine, mine_call, names, "mine")
    assert page.tolerances == (("float32", 1e-3, "b"),) and page.doc == "Doc."
    with pytest.raises(listing.Unreadable, match="make"):
        listing._page(other, other_call, names, "other")


def test_reading_the_catalogue_imports_no_torch() -> None:
    code = "import sys; from layercheck import listing; listing.entries(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_declaration_the_source_does_not_settle_is_unreadable(tmp_path: Path) -> None:
    module = tmp_path / "mine.py"
    module.write_text('from layercheck.parent.registry import check\nTITLE = "a title"\n\n'
                      '@check("mine", title=TITLE, variants=compute())\ndef mine(ctx): ...\n\n'
                      '@check("other", title=make_title())\ndef other(ctx): ...\n')
    with pytest.raises(listing.Unreadable, match="make_title"):
        listing._read(module)
    module.write_text(module.read_text().split("\n\n@check(\"other\"")[0])
    (entry,) = listing._read(module)
    assert entry == listing.Entry("mine", "a title", variants=None)


def test_the_declarations_are_found_in_ast_walk_s_order_wherever_a_statement_can_hold_them() -> None:
    source = textwrap.dedent('''
        @check("a")
        def a(ctx): ...
        if FLAG:
            @check("b")
            def b(ctx): ...
        try:
            pass
        except ImportError:
            @check("c")
            def c(ctx): ...
        class Holder:
            @check("d")
            def d(self, ctx):
                @check("e")
                async def e(ctx): ...
        match KIND:
            case "x":
                @check("f")
                def f(ctx): ...
        g = lambda ctx: check("g")
    ''')
    tree = ast.parse(source)
    walked = [node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert [node.name for node, _ in listing._declarations(tree)] == walked == ["a", "b", "d", "c", "e", "f"]
    for path in sorted((Path(listing.__file__).parent / "checks").glob("*.py")):  # the built-in checks too
        tree = ast.parse(path.read_text())
        assert ([node for node, _ in listing._declarations(tree)]
                == [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and any(isinstance(d, ast.Call) and listing._called(d.func) == "check"
                            for d in node.decorator_list)])

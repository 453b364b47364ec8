"""Report formats as plug-ins: the ``@reporter`` decorator, ``--format`` on the command line,
third-party formats through the ``layercheck.reporters`` entry-point group."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

import layercheck
from layercheck.cli import app
from layercheck.reporting import registry
from layercheck.reporting.json import load
from layercheck.result import Report

from conftest import ROOT

SMALL = ["layers/prelu.py", "--layout", "2,3,4:BCS", "--check", "signatures"]

cli = CliRunner()


@pytest.fixture(autouse=True)
def in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Formats registered by a test vanish after it."""
    registry.load_reporters()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_built_in_formats_register_through_the_decorator() -> None:
    infos = {info.name: info for info in registry.catalogue()}
    assert list(infos)[:6] == ["table", "json", "junit", "markdown", "html", "github"]
    modules = {name: info.func.__module__ for name, info in infos.items()}
    assert modules == {"table": "layercheck.reporting.console", "json": "layercheck.reporting.json",
                       "junit": "layercheck.reporting.junit", "markdown": "layercheck.reporting.markdown",
                       "html": "layercheck.reporting.html", "github": "layercheck.reporting.github"}
    assert {name: info.suffix for name, info in infos.items()} == {
        "table": ".txt", "json": ".json", "junit": ".xml", "markdown": ".md", "html": ".html", "github": ""}
    assert all(info.title for info in infos.values())
    assert layercheck.reporter is registry.reporter and "reporter" in layercheck.__all__


def test_a_registered_format_is_a_format_everywhere(scratch_registry: None, tmp_path: Path) -> None:
    @layercheck.reporter("count", title="how many results", suffix=".count")
    def render(report: Report) -> str:
        return f"{len(report.results)} result(s)\n"

    result = cli.invoke(app, ["run", *SMALL, "--format", "count"])
    assert result.exit_code == 0 and result.stdout == "1 result(s)\n"
    out = tmp_path / "r.count"  # the suffix picks the format
    result = cli.invoke(app, ["run", *SMALL, "--output", str(out)])
    assert result.exit_code == 0 and out.read_text() == "1 result(s)\n"
    assert registry.render(Report(runs=[], environment={}, version="", seconds=0.0), "count") == "0 result(s)\n"


def test_names_are_checked_and_registered_once(scratch_registry: None) -> None:
    with pytest.raises(ValueError, match="lowercase"):
        layercheck.reporter("My Format", title="x")
    with pytest.raises(ValueError, match=r"must start with '\.'"):
        layercheck.reporter("mine", title="x", suffix="txt")

    def render(report: Report) -> str:
        return ""

    with pytest.raises(ValueError, match="report format 'json' registered twice"):
        layercheck.reporter("json", title="another json")(render)


def test_output_suffix_picks_the_format_unless_one_is_named(tmp_path: Path) -> None:
    xml = tmp_path / "r.xml"
    assert cli.invoke(app, ["run", *SMALL, "-o", str(xml)]).exit_code == 0
    assert ET.parse(xml).getroot().tag == "testsuites"
    page = tmp_path / "r.html"
    assert cli.invoke(app, ["run", *SMALL, "-o", str(page)]).exit_code == 0
    assert page.read_text().startswith("<!DOCTYPE html>")
    named = tmp_path / "r.html.log"
    assert cli.invoke(app, ["run", *SMALL, "-o", str(named), "--format", "json"]).exit_code == 0
    assert json.loads(named.read_text())["runs"][0]["results"][0]["check"] == "signatures"
    plain = tmp_path / "r.log"  # no format has it: the table
    assert cli.invoke(app, ["run", *SMALL, "-o", str(plain)]).exit_code == 0
    assert plain.read_text().splitlines()[-1].startswith("1 passed, 0 failed, 0 skipped, 0 errors in")


def test_an_unknown_format_is_a_usage_error_before_anything_runs(tmp_path: Path) -> None:
    marker = tmp_path / "constructed"
    layer = tmp_path / "layer.py"
    layer.write_text(f"from torch import nn\n\nclass Layer(nn.Module):\n    def __init__(self):\n"
                     f"        super().__init__()\n        open({str(marker)!r}, 'w').close()\n\n"
                     f"    def forward(self, x):\n        return x\n")
    result = cli.invoke(app, ["run", str(layer), "--layout", "4,3:BC", "--format", "jsn"])
    assert result.exit_code == 2
    assert result.stderr == ("layercheck: error: unknown report format 'jsn'; did you mean 'json'? "
                             f"(formats: {', '.join(registry.formats())})\n")
    assert result.stdout == "" and not marker.exists()


def test_help_lists_the_formats() -> None:
    top = cli.invoke(app, ["--help"], env={"COLUMNS": "200"})
    run = cli.invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    names = ", ".join(registry.formats())
    assert f"Report formats (run --format): {names}." in top.stdout
    assert f"Report format: {names} (default:" in " ".join(run.stdout.split())


def test_reporters_import_neither_torch_nor_each_other_through_result() -> None:
    code = ("import sys, layercheck.result\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('layercheck.reporting.'))\n"
            "from layercheck.reporting import registry\nregistry.load_reporters()\n"
            "print(loaded, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['layercheck.reporting.registry'] False"


def _module_imports(path: Path) -> set[str]:
    """Modules ``path`` imports when it is imported: at module level, not under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_no_static_import_cycle_between_result_and_the_reporters() -> None:
    package = ROOT / "layercheck"
    files = {"layercheck.result": package / "result.py", "layercheck.reporting": package / "reporting" / "__init__.py"}
    files |= {f"layercheck.reporting.{p.stem}": p for p in (package / "reporting").glob("*.py") if p.stem != "__init__"}
    graph = {name: _module_imports(path) & set(files) for name, path in files.items()}
    assert graph["layercheck.reporting.registry"] == set()  # neither result nor any reporter
    assert graph["layercheck.result"] == {"layercheck.reporting", "layercheck.reporting.registry"}

    def cycle_from(start: str, seen: tuple[str, ...]) -> tuple[str, ...] | None:
        for nxt in sorted(graph[start]):
            if nxt in seen:
                return (*seen[seen.index(nxt):], nxt)
            found = cycle_from(nxt, (*seen, nxt))
            if found:
                return found
        return None

    for name in files:
        assert cycle_from(name, (name,)) is None, " -> ".join(cycle_from(name, (name,)) or ())


# -- a third party's format, installed as a distribution ------------------------------------------

SHOUT = '''
from layercheck import Report, reporter


@reporter("shout", title="every verdict in capitals", suffix=".shout")
def render(report: Report) -> str:
    lines = [f"{run.target.upper()}: {run.status.value.upper()}" for run in report.runs]
    lines += [f"{result.check.upper()} {result.status.value.upper()}" for result in report.results]
    return "\\n".join(lines) + "\\n"
'''

WHISPER = '''
from layercheck import Report, reporter


@reporter("whisper", title="the summary in lowercase")
def render(report: Report) -> str:
    return f"psst: {sum(run.summary['passed'] for run in report.runs)} passed\\n"
'''


def _env(*paths: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding an installed distribution: two reporter modules and their entry points,
    one naming a module, the other an object."""
    site = tmp_path_factory.mktemp("site")
    (site / "layercheck_shout.py").write_text(SHOUT)
    (site / "layercheck_whisper.py").write_text(WHISPER)
    info = site / "layercheck_shout-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: layercheck-shout\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[layercheck.reporters]\nshout = layercheck_shout\nwhisper = layercheck_whisper:render\n")
    return site


def _layercheck(plugin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "layercheck", *args], check=False, capture_output=True, text=True,
                          cwd=ROOT, timeout=180, env=_env(plugin))


@pytest.mark.slow
def test_a_third_party_format_from_an_entry_point(plugin: Path, tmp_path: Path) -> None:
    done = _layercheck(plugin, "run", *SMALL, "--format", "shout")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "LAYERS/PRELU.PY: PASSED\nSIGNATURES PASSED\n"
    out = tmp_path / "verdict.shout"
    done = _layercheck(plugin, "run", *SMALL, "--format", "whisper", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "psst: 1 passed\n"


@pytest.mark.slow
def test_help_and_errors_list_third_party_formats(plugin: Path) -> None:
    done = _layercheck(plugin, "run", "--help")
    assert "table, json, junit, markdown, html, github, shout, whisper" in " ".join(done.stdout.split())
    done = _layercheck(plugin, "run", *SMALL, "--format", "nosuch")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("layercheck: error: unknown report format 'nosuch' "
                           "(formats: table, json, junit, markdown, html, github, shout, whisper)\n")


def test_the_readme_example_reporter_works(scratch_registry: None, tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    section = text.split("Report formats are plug-ins too.")[1]
    module = tmp_path / "readme_tap.py"
    module.write_text(section.split("```python\n")[1].split("```")[0])
    spec = importlib.util.spec_from_file_location("readme_tap", module)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # registers "tap"
    report = load(json.dumps({"schema": Report.SCHEMA, "runs": [
        {"target": "t", "seed": 0, "inputs": [], "results": [
            {"check": "signatures", "variant": "", "status": "passed", "seconds": 0.1},
            {"check": "gradients", "variant": "float64", "status": "failed", "seconds": 0.1}]}]}))
    assert report.render("tap") == "1..2\nok 1 signatures\nnot ok 2 gradients\n"
    assert 'tap = "mypkg.tap"' in section and "layercheck.reporters" in section

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
from layercheck.cli.commands import app
from layercheck.parent.result import Report
from layercheck.reporting import registry
from layercheck.reporting.json import load

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
    code = ("import sys, layercheck.parent.result\n"
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
    files = {"layercheck.parent.result": package / "parent" / "result.py",
             "layercheck.reporting": package / "reporting" / "__init__.py"}
    files |= {f"layercheck.reporting.{p.stem}": p for p in (package / "reporting").glob("*.py") if p.stem != "__init__"}
    graph = {name: _module_imports(path) & set(files) for name, path in files.items()}
    assert graph["layercheck.reporting.registry"] == set()  # neither result nor any reporter
    assert graph["layercheck.parent.result"] == {"layercheck.reporting", "layercheck.reporting.registry"}

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


def test_the_json_report_records_the_reporter_plugins_that_wrote_the_run(
        scratch_registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reporter plug-in found through a (fake) entry point and used for one of the run's
    outputs is listed, with its package and version, beside the check plug-ins in the JSON
    report's environment; one installed but not used is not."""
    from importlib.metadata import EntryPoint

    from layercheck.parent import plugins

    (tmp_path / "layercheck_count.py").write_text(
        "from layercheck import reporter\n\n\n@reporter('count', title='how many results', suffix='.count')\n"
        "def render(report):\n    return f'{len(report.results)} result(s)\\n'\n")
    (tmp_path / "layercheck_quiet.py").write_text(
        "from layercheck import reporter\n\n\n@reporter('quiet', title='nothing')\ndef render(report):\n"
        "    return ''\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = [(plugins.Plugin(name, "reporter", f"layercheck_{name}", f"layercheck-{name}", "0.3"),
              EntryPoint(name, f"layercheck_{name}", plugins.REPORTERS)) for name in ("count", "quiet")]
    monkeypatch.setattr(plugins, "_found", {**plugins._found, plugins.REPORTERS: found})
    monkeypatch.setattr(plugins, "_loaded", plugins._loaded - {("group", plugins.REPORTERS)})
    registry.load_reporters()

    report = tmp_path / "r.json"
    result = cli.invoke(app, ["run", *SMALL, "--format", "count", "--output", str(report),
                              "--output", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    assert result.stdout == "1 result(s)\n"
    listed = json.loads(report.read_text())["environment"]["plugins"]
    assert [p for p in listed if p["kind"] == "reporter"] == [
        {"name": "count", "kind": "reporter", "package": "layercheck-count", "version": "0.3"}]
    assert load(report.read_text()).environment["plugins"] == listed  # read back as written

    result = cli.invoke(app, ["run", *SMALL, "--output", str(report)])  # built-in formats only
    assert result.exit_code == 0 and json.loads(report.read_text())["environment"]["plugins"] == []


def test_the_readme_example_reporter_works(scratch_registry: None, tmp_path: Path) -> None:
    text = (ROOT / "docs" / "howto" / "extending.md").read_text()
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


# -- several --output files, and a saved report rendered again ------------------------------------


def test_each_output_file_takes_the_format_its_suffix_names(tmp_path: Path) -> None:
    files = {suffix: tmp_path / "reports" / f"r{suffix}" for suffix in (".json", ".xml", ".md", ".html", ".txt")}
    options = [arg for path in files.values() for arg in ("--output", str(path))]
    result = cli.invoke(app, ["run", *SMALL, *options])
    assert result.exit_code == 0, result.output
    report = load(files[".json"].read_text())
    assert [r.check for r in report.results] == ["signatures"]
    assert files[".xml"].read_text() == report.render("junit")
    assert files[".md"].read_text() == report.render("markdown")
    assert files[".html"].read_text() == report.render("html")
    assert files[".txt"].read_text() == report.render("table")
    assert result.stdout.splitlines()[-1].startswith("1 passed, 0 failed")  # the terminal's table
    assert result.stderr.splitlines() == [f"report written to {path}" for path in files.values()]
    # --format is then the terminal's
    named = cli.invoke(app, ["run", *SMALL, "--format", "json", "-o", str(tmp_path / "a.md"), "-o",
                             str(tmp_path / "a.xml")])
    assert named.exit_code == 0 and json.loads(named.stdout)["runs"][0]["results"][0]["check"] == "signatures"
    assert (tmp_path / "a.md").read_text().startswith("## ✅ layercheck passed")


def test_several_outputs_need_suffixes_that_name_formats(tmp_path: Path) -> None:
    for outputs, says in (([tmp_path / "a.json", tmp_path / "b.log"], "no report format has the suffix '.log'"),
                          ([tmp_path / "a.json", tmp_path / "a.json"], "given twice")):
        result = cli.invoke(app, ["run", "nowhere.yaml", *[a for p in outputs for a in ("-o", str(p))]])
        assert result.exit_code == 2 and result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"layercheck: error: --output {outputs[1]}: ") and says in line
        assert not list(tmp_path.iterdir())


def test_report_files_honour_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        assert cli.invoke(app, ["run", *SMALL, "-o", str(tmp_path / "r.json")]).exit_code == 0
        assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
        os.umask(0o027)
        assert cli.invoke(app, ["report", str(tmp_path / "r.json"), "-o", str(tmp_path / "r.html")]).exit_code == 0
        assert (tmp_path / "r.html").stat().st_mode & 0o777 == 0o640
        (tmp_path / "r.html").chmod(0o664)  # a file that exists keeps its mode, as open() would
        assert cli.invoke(app, ["report", str(tmp_path / "r.json"), "-o", str(tmp_path / "r.html")]).exit_code == 0
        assert (tmp_path / "r.html").stat().st_mode & 0o777 == 0o664
    finally:
        os.umask(old)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSON report of a failing run, as CI would keep it."""
    path = tmp_path_factory.mktemp("saved") / "report.json"
    layer = ROOT / "tests" / "zoo" / "predict_raises.py"
    # --no-store: a module-scoped fixture runs before the autouse one that keeps the store in tmp
    result = cli.invoke(app, ["run", str(layer), "--layout", "4,3:BC", "--check", "predict_runs", "--no-store",
                              "-o", str(path)])
    assert result.exit_code == 1, result.output
    return path


def test_report_renders_a_saved_report_in_every_format(saved: Path, tmp_path: Path) -> None:
    report = load(saved.read_text())
    for fmt in registry.formats():
        result = cli.invoke(app, ["report", str(saved), "--format", fmt])
        assert result.exit_code == 0, (fmt, result.output)  # converted: whatever the report says
        expected = report.render(fmt) if fmt != "table" else None
        if expected is not None:
            assert result.stdout == expected, fmt
    table = cli.invoke(app, ["report", str(saved)], env={"COLUMNS": "100"}).stdout
    assert "FAILED predict_runs" in table and table.splitlines()[-1] == report.render("table").splitlines()[-1]
    out = [tmp_path / "r.html", tmp_path / "r.xml"]
    result = cli.invoke(app, ["report", str(saved), "-o", str(out[0]), "-o", str(out[1])])
    assert result.exit_code == 0 and out[0].read_text() == report.render("html")
    assert ET.parse(out[1]).getroot().find("testsuite/testcase/failure") is not None
    assert load(cli.invoke(app, ["report", str(saved), "-f", "json"]).stdout) == report


def test_report_refuses_what_is_not_a_layercheck_report(saved: Path, tmp_path: Path) -> None:
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "other.json").write_text('{"schema": "other/1"}')
    (tmp_path / "broken.json").write_text(json.dumps({"schema": Report.SCHEMA, "runs": [{"seed": 0}]}))
    cases = [([str(tmp_path / "none.json")], "cannot read it"), ([str(tmp_path)], "cannot read it"),
             ([str(tmp_path / "text.json")], "not a layercheck report: not JSON"),
             ([str(tmp_path / "other.json")], "not a layercheck report: its schema is 'other/1'"),
             ([str(tmp_path / "broken.json")], "not a layercheck report: KeyError 'target'"),
             ([str(saved), "--format", "htm"], "unknown report format 'htm'; did you mean 'html'?")]
    for args, says in cases:
        result = cli.invoke(app, ["report", *args])
        assert result.exit_code == 2 and result.stdout == "", args
        (line,) = result.stderr.splitlines()
        assert line.startswith("layercheck: error: ") and says in line, line


def test_report_imports_no_torch(saved: Path, tmp_path: Path) -> None:
    probe = ("import sys\nfrom layercheck.cli.commands import app\n"
             "try:\n    app(sys.argv[1:], prog_name='layercheck')\nexcept SystemExit as exc:\n    code = exc.code\n"
             "print(code, 'torch imported' if 'torch' in sys.modules else 'no torch', file=sys.stderr)\n")
    for args, code in ((["report", str(saved), "-f", "html", "-o", str(tmp_path / "r.html")], 0),
                       (["report", str(saved), "-f", "markdown"], 0), (["report", str(tmp_path / "none.json")], 2)):
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=ROOT,
                              env=_env(), timeout=120)
        assert done.stderr.strip().splitlines()[-1] == f"{code} no torch", (args, done.stderr)
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")

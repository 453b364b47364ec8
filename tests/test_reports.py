"""The JUnit and Markdown reports, parsed back and compared with the JSON report of the same run."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import ROOT, write_spec
from layercheck import runner
from layercheck.cli import app
from layercheck.reporting import formats, render
from layercheck.result import Report, Status
from layercheck.spec import load_spec

PRELU = f"{ROOT / 'layers' / 'prelu.py'}:PReLU"
CHECKS = ("initialize", "forward_predict_agree")  # plus predict_runs and forward_runs, which it needs

BROKEN = '''
import torch
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            raise ValueError("bad | value <x>\\n second line \\x1b[31m red")
        return x * 2
'''

HANGS = '''
import time
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            time.sleep(5)
        return x
'''


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """One real run over four targets: valid, broken (failed), hanging (error), missing (load error)."""
    folder = tmp_path_factory.mktemp("reports")
    (folder / "broken.py").write_text(BROKEN)
    (folder / "hangs.py").write_text(HANGS)
    specs = [
        write_spec(folder, "good.yaml", PRELU, "4,3,5:BCU"),
        write_spec(folder, "broken.yaml", "broken.py:Layer", "4,3:BC"),
        write_spec(folder, "hangs.yaml", "hangs.py:Layer", "4,3:BC"),
        write_spec(folder, "missing.yaml", "nowhere.py:Layer", "4,3:BC"),
    ]
    options = runner.Options(only=CHECKS, timeout=0.5)
    return runner.run([load_spec(path) for path in specs], options)


def by_name(report: Report, suffix: str):
    return next(run for run in report.runs if run.target.endswith(suffix))


def test_the_fixture_covers_every_status(report: Report) -> None:
    statuses = {r.status for r in report.results}
    assert statuses == set(Status)
    assert by_name(report, "missing.yaml").error is not None


def test_junit_counts_agree_with_the_json_report(report: Report) -> None:
    root = ET.fromstring(render(report, "junit"))
    data = json.loads(render(report, "json"))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [run["target"] for run in data["runs"]]
    for suite, run in zip(suites, data["runs"]):
        load_failed = run["error"] is not None
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases) == len(run["results"]) + load_failed
        assert int(suite.get("failures")) == run["summary"]["failed"] == len(suite.findall("testcase/failure"))
        assert int(suite.get("errors")) == run["summary"]["error"] + load_failed == len(suite.findall("testcase/error"))
        assert int(suite.get("skipped")) == run["summary"]["skipped"] == len(suite.findall("testcase/skipped"))
        names = [c.get("name") for c in cases if c.get("name") != "load"]
        assert names == [f"{r['check']}[{r['variant']}]" if r["variant"] else r["check"] for r in run["results"]]
    for key, json_key in (("failures", "failed"), ("errors", "error"), ("skipped", "skipped")):
        loads = sum(run["error"] is not None for run in data["runs"]) if key == "errors" else 0
        assert int(root.get(key)) == data["summary"][json_key] + loads
    assert int(root.get("tests")) == len(root.findall("testsuite/testcase"))


def test_junit_failure_carries_message_details_and_reproduce(report: Report) -> None:
    root = ET.fromstring(render(report, "junit"))
    suite = next(s for s in root.findall("testsuite") if s.get("name").endswith("broken.yaml"))
    failure = suite.find("testcase[@name='predict_runs']/failure")
    assert failure is not None
    assert failure.get("message").startswith("predict raised ValueError: bad | value <x>")
    # The escape character would make the file unreadable XML; it is written visibly instead.
    assert "\x1b" not in failure.get("message") and "\\x1b[31m red" in failure.get("message")
    assert "reproduce: layercheck run" in failure.text and "--check predict_runs" in failure.text
    skipped = suite.find("testcase[@name='forward_predict_agree']/skipped")
    assert skipped is not None and skipped.get("message") == "needs predict_runs, which failed"


def test_junit_error_for_a_timeout_and_for_a_layer_that_cannot_be_loaded(report: Report) -> None:
    root = ET.fromstring(render(report, "junit"))
    suites = {s.get("name").rsplit("/", 1)[-1]: s for s in root.findall("testsuite")}
    error = suites["hangs.yaml"].find("testcase[@name='predict_runs']/error")
    assert error is not None and "time limit of 0.5 s" in error.get("message")
    (case,) = suites["missing.yaml"].findall("testcase")
    assert case.get("name") == "load"
    assert "nowhere.py" in case.find("error").get("message")
    props = {p.get("name"): p.get("value") for p in suites["good.yaml"].iter("property")}
    assert props["inputs"] == "4,3,5:BCU" and props["kind"] == "module" and props["custom_backward"] == "true"


def test_markdown_puts_failures_first_and_escapes_table_cells(report: Report) -> None:
    text = render(report, "markdown")
    lines = text.splitlines()
    assert lines[0] == "## ❌ layercheck failed: 1 of 4 layers valid"
    assert report.render("table").splitlines()[-1] in text  # the same summary line as the terminal
    headings = [line for line in lines if line.startswith("### ")]
    assert [h.split("`")[1].rsplit("/", 1)[-1] for h in headings] == ["good.yaml", "broken.yaml", "hangs.yaml",
                                                                       "missing.yaml"]
    assert headings[0].startswith("### ✅") and headings[1].startswith("### ❌") and headings[3].startswith("### ⚠️")
    section = text.split(headings[1])[1].split(headings[2])[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    assert [row.split("`")[1] for row in rows] == ["predict_runs", "initialize", "forward_predict_agree", "forward_runs"]
    assert "bad \\| value &lt;x&gt;<br> second line" in rows[0]
    assert "layercheck run" in section and "--check predict_runs" in section
    good = text.split(headings[0])[1].split(headings[1])[0]
    assert "<details>" in good and "❌" not in good
    missing = text.split(headings[3])[1]
    assert "could not be checked" in missing and "nowhere.py" in missing


def test_table_titles_name_the_target_and_its_status(report: Report) -> None:
    text = report.render("table")
    assert f"{by_name(report, 'good.yaml').target} [passed]" in text  # "[passed]" is not rich markup
    assert f"{by_name(report, 'broken.yaml').target} [failed]" in text


def test_every_format_renders(report: Report) -> None:
    assert {"table", "json", "junit", "markdown"} <= set(formats())
    for fmt in formats():
        assert report.runs[0].target in report.render(fmt)


def test_cli_writes_junit_and_markdown(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "good.yaml", PRELU, "4,3,5:BCU")
    out = tmp_path / "reports" / "layercheck.xml"
    cli = CliRunner()
    result = cli.invoke(app, ["run", str(spec), "--check", "predict_runs", "--format", "junit", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert f"report written to {out}" in result.stderr
    suite = ET.parse(out).getroot().find("testsuite")
    assert suite.get("name") == str(spec) and suite.get("failures") == "0"
    assert [c.get("name") for c in suite.findall("testcase")] == ["predict_runs"]
    result = cli.invoke(app, ["run", str(spec), "--check", "predict_runs", "--format", "markdown"])
    assert result.exit_code == 0
    assert result.stdout.startswith("## ✅ layercheck passed") and "`predict_runs`" in result.stdout

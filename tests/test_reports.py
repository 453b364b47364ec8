"""The reports as a user reads them: JUnit, Markdown, HTML and GitHub annotations parsed back and
compared with the JSON report of the same run; notes and summary counts in every format."""

from __future__ import annotations

import html
import io
import json
import re
import shutil
import struct
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rich.console import Console
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.engine import runner
from layercheck.parent.result import CheckResult, Report, RunReport, Status
from layercheck.parent.spec import load_spec
from layercheck.reporting import console, formats, render
from layercheck.reporting.json import load

from conftest import ROOT, run_zoo, write_spec

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
    return runner.run([runner.TargetPlan.of(load_spec(path), options) for path in specs], options)


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
        # A layer that could not be loaded is an error in both: its `load` testcase, its summary.
        assert int(suite.get("errors")) == run["summary"]["error"] == len(suite.findall("testcase/error"))
        assert int(suite.get("skipped")) == run["summary"]["skipped"] == len(suite.findall("testcase/skipped"))
        names = [c.get("name") for c in cases if c.get("name") != "load"]
        assert names == [f"{r['check']}[{r['variant']}]" if r["variant"] else r["check"] for r in run["results"]]
    for key, json_key in (("failures", "failed"), ("errors", "error"), ("skipped", "skipped")):
        assert int(root.get(key)) == data["summary"][json_key]
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
    # the layers that did not pass first, in the order given; then the passed ones, a row each
    assert [h.split("`")[1].rsplit("/", 1)[-1] for h in headings[:3]] == ["broken.yaml", "hangs.yaml", "missing.yaml"]
    assert headings[0].startswith("### ❌") and headings[2].startswith("### ⚠️") and headings[3] == "### ✅ passed"
    section = text.split(headings[0])[1].split(headings[1])[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    expected = ["predict_runs", "initialize", "forward_predict_agree", "signatures", "forward_runs"]
    assert [row.split("`")[1] for row in rows] == expected
    # the table's cell: the message's first line; the whole message folded under the table
    assert rows[0].endswith("| predict raised ValueError: bad \\| value &lt;x&gt; … |")
    whole = section.split("<code>predict_runs</code>: the whole message</summary>")[1].split("</details>")[0]
    assert "predict raised ValueError: bad | value &lt;x&gt;<br>\n second line" in whole
    assert "layercheck run" in section and "--check predict_runs" in section
    good = text.split(headings[3])[1]
    (row,) = [line for line in good.splitlines() if line.startswith("| `")]
    assert "good.yaml` |" in row and "`4,3,5:BCU`" in row and "<details>" not in good and "❌" not in good
    missing = text.split(headings[2])[1].split(headings[3])[0]
    assert "could not be checked" in missing and "nowhere.py" in missing


def test_table_titles_name_the_target_and_its_status(report: Report) -> None:
    text = report.render("table")
    assert f"{by_name(report, 'good.yaml').target} [passed]" in text  # "[passed]" is not rich markup
    assert f"{by_name(report, 'broken.yaml').target} [failed]" in text


def test_every_format_renders(report: Report) -> None:
    assert {"table", "json", "junit", "markdown", "html", "github"} <= set(formats())
    broken = by_name(report, "broken.yaml")
    for fmt in formats():
        assert broken.target in report.render(fmt), fmt


def test_cli_writes_junit_and_markdown(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "good.yaml", PRELU, "4,3,5:BCU")
    out = tmp_path / "reports" / "layercheck.xml"
    cli = CliRunner()
    result = cli.invoke(app, ["run", str(spec), "--check", "predict_runs", "--format", "junit", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert f"report written to {out}" in result.stderr
    suite = ET.parse(out).getroot().find("testsuite")
    assert suite.get("name") == str(spec) and suite.get("failures") == "0"
    assert [c.get("name") for c in suite.findall("testcase")] == ["signatures", "predict_runs"]
    result = cli.invoke(app, ["run", str(spec), "--check", "predict_runs", "--format", "markdown"])
    assert result.exit_code == 0
    assert result.stdout.startswith("## ✅ layercheck passed") and "good.yaml` | 2 passed |" in result.stdout


def test_a_layer_that_could_not_be_loaded_counts_as_an_error(report: Report) -> None:
    # hangs.yaml timed out (an errored check), missing.yaml could not be loaded
    assert by_name(report, "missing.yaml").summary == {"passed": 0, "failed": 0, "skipped": 0, "error": 1}
    assert report.summary["error"] == 2
    assert json.loads(render(report, "json"))["summary"]["error"] == 2
    assert ", 2 errors in " in report.render("table").splitlines()[-1]


# -- notes, summary words, location: a hand-made report -------------------------------------------

GOOD_NOTE = "the gradient of parameter 'bias' has shape (1, 3), which autograd reduces to its shape (3,)"
BAD_NOTE = "parameter 'scale' has no effect on the output"
TRACEBACK = 'Traceback (most recent call last):\n  File "layers/bad.py", line 9, in load\nRuntimeError: boom'
REPRODUCE = "layercheck run layers/bad.py:Bad --layout 4,3:BC --check gradients:float64 --seed 0"


def _direction(analytic: float, numeric: float, error: float) -> dict[str, Any]:
    return {"analytic": analytic, "numeric": numeric, "one_sided": [numeric, numeric], "relative_error": error,
            "step": 1e-8, "kink_crossed": False}


def _element(index: list[int], analytic: float, numeric: float, value: float | None) -> dict[str, Any]:
    element: dict[str, Any] = {"index": index, "analytic": analytic, "numeric": numeric,
                               "relative_error": abs(analytic - numeric) / 2}
    if value is not None:
        element["value"] = value
    return element


def gradients_failure(*, values: bool = True) -> CheckResult:
    """A failed gradients result shaped as the check writes it: three joint directions (one fine),
    and input 0 wrong for values above 2.5 (two wrong elements, one right)."""
    elements = [_element([0, 3], 2.0, 1.0, 2.7), _element([1, 1], 1.5, 0.5, 3.0), _element([0, 0], 0.5, 0.5, -1.0)]
    if not values:
        elements = [{k: v for k, v in e.items() if k != "value"} for e in elements]
    details = {
        "tolerance": 1e-6,
        "directions": [_direction(4.7, 5.3, 3e-3), _direction(-47.0, -62.9, 0.079), _direction(1.0, 1.0, 0.0)],
        "wrong": [{"tensor": "input 0", "tolerance": 1e-6,
                   "directions": [_direction(-353.3, -346.5, 0.034), _direction(1.04, -4.99, 0.03)],
                   "regions": ["values in [2.5, 3.1] (2.78% of the elements)"], "elements": elements}],
        "reproduce": REPRODUCE,
    }
    return CheckResult("gradients", "float64", Status.FAILED, 0.07, "float64 analytic gradients disagree",
                       details=details, notes=(BAD_NOTE,))


def handmade(*runs: RunReport) -> Report:
    """A report with a passing layer (a note, a known location), a failing one (a failed gradient
    check with a note, an errored check) and one that could not be loaded."""
    if not runs:
        good = RunReport(
            target="layers/good.py:Good", kind="module", inputs=[{"size": [4, 3], "format": "BC"}], seed=0,
            seconds=0.2, custom_backward=False, location={"file": "layers/good.py", "line": 12},
            results=[CheckResult("signatures", "", Status.PASSED, 0.001, "1 input(s) accepted by forward"),
                     CheckResult("backward_size", "", Status.PASSED, 0.01, "every gradient has its tensor's size",
                                 notes=(GOOD_NOTE,))])
        crashed = CheckResult("state_dict", "", Status.ERROR, 0.02, "load_state_dict raised RuntimeError: boom",
                              details={"traceback": TRACEBACK})
        bad = RunReport(target="layers/bad.py:Bad", kind="module", inputs=[{"size": [4, 3], "format": "BC"}], seed=0,
                        seconds=0.3, results=[gradients_failure(), crashed], custom_backward=True)
        runs = (good, bad, _missing())
    return Report(runs=list(runs), environment={"python": "3.11", "torch": "2.13", "devices": ["cpu"]},
                  version="0.1.0", seconds=0.5)


def _missing() -> RunReport:
    return RunReport(target="missing.py:Layer", kind=None, inputs=[{"size": [4, 3], "format": "BC"}], seed=0,
                     seconds=0.0, results=[], error="no such file missing.py")


def test_summary_line_counts_notes_and_load_errors_in_singular_and_plural() -> None:
    report = handmade()
    assert report.summary == {"passed": 2, "failed": 1, "skipped": 0, "error": 2, "seconds": 0.5}
    line = "2 passed, 1 failed, 0 skipped, 2 errors, 2 notes in 0.50 s"
    assert report.render("table").splitlines()[-1] == line
    assert line in report.render("markdown") and report.render("github").splitlines()[-1] == line
    one = handmade(handmade().runs[0], _missing())
    assert one.render("table").splitlines()[-1] == "2 passed, 0 failed, 0 skipped, 1 error, 1 note in 0.50 s"
    clean = handmade(RunReport(target="t", kind="module", inputs=[], seed=0, seconds=0.1,
                               results=[CheckResult("signatures", "", Status.PASSED, 0.1)]))
    assert clean.render("table").splitlines()[-1] == "1 passed, 0 failed, 0 skipped, 0 errors in 0.50 s"


def test_notes_and_location_survive_the_json_round_trip() -> None:
    report = handmade()
    data = json.loads(report.render("json"))
    good, bad, missing = data["runs"]
    assert good["results"][1]["notes"] == [GOOD_NOTE] and good["results"][0]["notes"] == []
    assert good["location"] == {"file": "layers/good.py", "line": 12} and bad["location"] is None
    assert missing["status"] == "error" and missing["summary"]["error"] == 1 and data["summary"]["error"] == 2
    back = load(report.render("json"))
    assert back.runs[0].results[1].notes == (GOOD_NOTE,) and back.runs[1].results[0].notes == (BAD_NOTE,)
    assert back.runs[0].location == {"file": "layers/good.py", "line": 12}
    assert back.render("table") == report.render("table")


def test_every_format_shows_the_notes() -> None:
    report = handmade()
    for fmt in formats():
        text = report.render(fmt)
        assert BAD_NOTE in text, fmt
        assert GOOD_NOTE in " ".join(text.split()), fmt  # the table may wrap it


def test_junit_puts_notes_in_system_out() -> None:
    root = ET.fromstring(handmade().render("junit"))
    size = root.find("testsuite[@name='layers/good.py:Good']/testcase[@name='backward_size']")
    assert size.find("system-out").text == f"every gradient has its tensor's size\nnote: {GOOD_NOTE}"
    gradients = root.find("testsuite[@name='layers/bad.py:Bad']/testcase[@name='gradients[float64]']")
    assert gradients.find("failure") is not None and gradients.find("system-out").text == f"note: {BAD_NOTE}"
    assert root.find("testsuite[@name='layers/bad.py:Bad']/testcase[@name='state_dict']/system-out") is None
    props = {p.get("name"): p.get("value") for p in root.iter("property") if p.get("name") == "location"}
    assert props == {"location": "layers/good.py:12"}


def test_markdown_lists_notes_per_layer() -> None:
    text = handmade().render("markdown")
    good = text.split("### ✅ passed")[1].split("### ")[0]
    assert f"- `layers/good.py:Good` `backward_size`: {GOOD_NOTE}" in good
    assert "| `layers/good.py:Good` | 2 passed, 1 note |" in good  # the layer's own counts
    bad = text.split("`layers/bad.py:Bad`")[1].split("### ")[0]
    assert f"- `gradients[float64]`: {BAD_NOTE}" in bad and "1 failed, 1 error, 1 note" in bad


def test_the_compact_report_folds_passed_checks_and_cuts_lines_to_80_columns() -> None:
    buffer = io.StringIO()
    console.print_report(handmade(), Console(file=buffer, width=80, color_system=None))
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    # every line fits but a reproduce command, left whole so that it can be copied
    assert max(len(line) for line in lines if not line.startswith("  reproduce")) <= 80
    assert lines[0] == "layers/good.py:Good passed  2 passed, 1 note (0.2s)"
    assert lines[1].startswith("  note    backward_size: the gradient of parameter 'bias'") and lines[1].endswith("…")
    assert "  error   state_dict: load_state_dict raised RuntimeError: boom" in lines
    assert lines[lines.index("FAILED gradients[float64] (layers/bad.py:Bad):") + 1] == \
        "  float64 analytic gradients disagree"
    assert "signatures" not in buffer.getvalue()  # a passed check is only counted


def test_the_verbose_table_shows_notes_under_their_layer_at_80_columns() -> None:
    buffer = io.StringIO()
    console.print_report(handmade(), Console(file=buffer, width=80, color_system=None), verbose=True)
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    assert max(len(line) for line in lines if not line.startswith(("Traceback", "  File"))) <= 80
    at = lines.index("note backward_size the gradient of parameter 'bias' has shape (1, 3), which")
    assert lines[at + 1].strip() == "autograd reduces to its shape (3,)"
    assert lines[at + 1].index("autograd") == lines[at].index("the gradient")  # wrapped beside the check
    assert lines[at - 1] == "    every gradient has its tensor's size"  # the last check's message, under its row
    assert lines[at + 2].startswith("layers/bad.py:Bad [error]")
    assert f"note gradients[float64] {BAD_NOTE}" in lines
    quiet = io.StringIO()
    console.print_report(handmade(), Console(file=quiet, width=80, color_system=None), quiet=True)
    assert "note " not in quiet.getvalue() and "2 notes" in quiet.getvalue()


# -- GitHub annotations ---------------------------------------------------------------------------


def test_github_annotates_failures_errors_load_errors_and_notes() -> None:
    lines = handmade().render("github").splitlines()
    assert lines == [
        ("::error title=layercheck layers/bad.py%3ABad%3A gradients[float64] failed::"
         f"float64 analytic gradients disagree%0A%0Areproduce: {REPRODUCE}"),
        "::error title=layercheck layers/bad.py%3ABad%3A state_dict error::load_state_dict raised RuntimeError: boom",
        "::error title=layercheck missing.py%3ALayer%3A could not be checked::no such file missing.py",
        ("::notice file=layers/good.py,line=12,title=layercheck layers/good.py%3AGood%3A backward_size note::"
         f"{GOOD_NOTE}"),
        f"::notice title=layercheck layers/bad.py%3ABad%3A gradients[float64] note::{BAD_NOTE}",
        "2 passed, 1 failed, 0 skipped, 2 errors, 2 notes in 0.50 s",
    ]


def test_github_escapes_messages_and_properties() -> None:
    result = CheckResult("dtype", "float16", Status.FAILED, 0.1, "100% wrong\r\nsecond line: a, b",
                         notes=("50% of 'x'\nis zero",))
    run = RunReport(target="odd,name.py:Layer", kind="module", inputs=[], seed=0, seconds=0.1, results=[result],
                    location={"file": "src/a,b.py", "line": 7})
    error, notice, _ = handmade(run).render("github").splitlines()
    assert error == ("::error file=src/a%2Cb.py,line=7,title=layercheck odd%2Cname.py%3ALayer%3A dtype[float16] failed"
                     "::100%25 wrong%0D%0Asecond line: a, b")
    assert notice.endswith("::50%25 of 'x'%0Ais zero")


def test_github_caps_annotations_at_ten_of_a_kind() -> None:
    results = [CheckResult(f"check{i}", "", Status.FAILED, 0.0, f"wrong {i}", notes=(f"note {i}",)) for i in range(13)]
    run = RunReport(target="t.py:L", kind="module", inputs=[], seed=0, seconds=0.1, results=results[:12])
    lines = handmade(run).render("github").splitlines()
    errors = [line for line in lines if line.startswith("::error ")]
    notices = [line for line in lines if line.startswith("::notice ")]
    assert len(errors) == len(notices) == 10
    assert errors[-1].endswith("::wrong 9") and notices[-1].endswith("::note 9")
    assert lines[10].startswith("layercheck: 2 more error annotations left out (GitHub Actions shows 10")
    assert lines[21].startswith("layercheck: 2 more notice annotations left out")
    assert lines[-1] == "0 passed, 12 failed, 0 skipped, 0 errors, 12 notes in 0.50 s" and len(lines) == 23
    one_more = handmade(RunReport(target="t.py:L", kind="module", inputs=[], seed=0, seconds=0.1, results=results[:11]))
    assert "layercheck: 1 more error annotation left out" in one_more.render("github")


def test_github_format_from_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(BROKEN)
    result = CliRunner().invoke(app, ["run", str(tmp_path / "broken.py"), "--layout", "4,3:BC", "--check",
                                      "predict_runs", "--format", "github"])
    assert result.exit_code == 1
    first, last = result.stdout.splitlines()[0], result.stdout.splitlines()[-1]
    # on the line that raised, not the class's
    line = next(i for i, text in enumerate(BROKEN.splitlines(), 1) if "raise ValueError" in text)
    where = (tmp_path / "broken.py").resolve().as_posix()  # outside the working directory: absolute
    assert first.startswith(f"::error file={where},line={line},title=layercheck ")
    assert "predict_runs failed (in forward)::predict raised ValueError" in first
    assert "%0A" in first and "\n" not in first
    assert last.startswith("1 passed, 1 failed, 0 skipped, 0 errors in ")  # signatures passed


# -- HTML -----------------------------------------------------------------------------------------


class Node:
    """An element of a parsed page."""

    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.attrs = tag, attrs
        self.children: list[Node | str] = []

    @property
    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self, tag: str | None = None, cls: str | None = None) -> Iterator[Node]:
        for child in self.children:
            if isinstance(child, Node):
                if (tag is None or child.tag == tag) and (cls is None or cls in child.classes):
                    yield child
                yield from child.iter(tag, cls)

    def kids(self, tag: str) -> list[Node]:
        """Direct children only."""
        return [c for c in self.children if isinstance(c, Node) and c.tag == tag]

    def all(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        return list(self.iter(tag, cls))

    def one(self, tag: str | None = None, cls: str | None = None) -> Node:
        (found,) = self.iter(tag, cls)
        return found


class _Page(HTMLParser):
    VOID: ClassVar[set[str]] = {"meta", "link", "br", "hr", "img", "input"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>: not well nested"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_html(text: str) -> Node:
    page = _Page()
    page.feed(text)
    page.close()
    assert len(page.stack) == 1, f"unclosed <{page.stack[-1].tag}>"
    return page.root


def test_html_is_one_self_contained_page() -> None:
    text = handmade().render("html")
    assert text.startswith("<!DOCTYPE html>\n<html lang=\"en\">")
    page = parse_html(text)
    assert not page.all("script") and not page.all("link") and not page.all("img") and not page.all("iframe")
    assert not [n for n in page.iter() if "src" in n.attrs or n.attrs.get("href", "#").startswith(("http", "//"))]
    style = page.one("style").text()
    assert "url(" not in style and "@import" not in style
    assert page.one("h1").text() == "failed layercheck report"
    assert page.one("p", "summary").text() == "2 passed, 1 failed, 0 skipped, 2 errors, 2 notes in 0.50 s"


def test_html_has_a_section_per_layer_with_facts_checks_and_notes() -> None:
    report = handmade()
    page = parse_html(report.render("html"))
    sections = page.all("section", "run")
    assert [s.attrs["id"] for s in sections] == ["run-1", "run-2", "run-3"]
    assert [s.classes[1] for s in sections] == ["passed", "error", "error"]
    overview = [a.attrs["href"] for a in page.one("table", "overview").iter("a")]
    assert overview == ["#run-1", "#run-2", "#run-3"]
    good, bad, missing = sections
    facts = dict(zip((dt.text() for dt in good.iter("dt")), (dd.text() for dd in good.iter("dd"))))
    assert facts == {"status": "passed", "summary": "2 passed, 0 failed, 0 skipped, 0 errors, 1 note",
                     "kind": "module", "inputs": "4,3:BC", "seed": "0", "time": "0.20 s",
                     "custom backward": "no (autograd)", "defined at": "layers/good.py:12"}
    rows = [tr for tr in good.one("table", "checks").iter("tr") if tr.classes]
    assert [(tr.classes[0], tr.all("td")[1].text()) for tr in rows] == [("passed", "signatures"),
                                                                       ("passed", "backward_size")]
    assert [li.text() for li in good.one("ul", "notes").iter("li")] == [f"backward_size: {GOOD_NOTE}"]
    assert [li.text() for li in bad.one("ul", "notes").iter("li")] == [f"gradients[float64]: {BAD_NOTE}"]
    assert missing.one("pre", "load-error").text() == "no such file missing.py" and not missing.all("table")


def test_html_spells_out_each_failure_and_error() -> None:
    page = parse_html(handmade().render("html"))
    bad = page.all("section", "run")[1]
    links = [a.attrs["href"] for a in bad.one("table", "checks").iter("a")]
    problems = bad.all("article", "problem")
    assert links == [f"#{a.attrs['id']}" for a in problems] == ["#run-2-gradients-float64", "#run-2-state_dict"]
    gradients, crashed = problems
    assert gradients.one("pre", "message").text() == "float64 analytic gradients disagree"
    assert gradients.one("p").text() == f"Reproduce: {REPRODUCE}"
    details = gradients.one("details")
    keys = [tr.kids("th")[0].text() for tr in details.all("table", "kv")[0].kids("tr")]
    assert keys == ["tolerance", "directions", "wrong"]  # the reproduce command is shown above, not twice
    directions = details.all("table", "rows")[0]
    assert [th.text() for th in directions.all("th")] == ["analytic", "numeric", "one_sided", "relative_error", "step",
                                                         "kink_crossed"]
    assert [td.text() for td in directions.all("tr")[2].all("td")][:4] == ["-47", "-62.9", "-62.9, -62.9", "0.079"]
    assert crashed.classes == ["problem", "error"] and crashed.one("pre", "traceback").text() == TRACEBACK
    assert not crashed.all("svg")


def _circles(svg: Node) -> list[Node]:
    return svg.all("circle", "point")


def test_html_plots_a_gradient_failure_one_point_per_direction_and_element() -> None:
    page = parse_html(handmade().render("html"))
    gradients = page.all("article", "problem")[0]
    plots = gradients.all("svg", "plot")
    assert [(svg.attrs["data-plot"], len(_circles(svg))) for svg in plots] == [
        ("directions", 3), ("directions", 2), ("elements", 3)]
    joint = plots[0]
    # bad points (relative error above the tolerance 1e-6) stand out; the one on the line does not
    assert sorted(c.classes == ["point", "bad"] for c in _circles(joint)) == [False, True, True]
    assert "tolerance 1e-06" in joint.text()
    assert [f.one("b").text() for f in gradients.all("figure")] == [
        "Errors per direction: all tensors together", "Errors per direction: input 0", "Elements: input 0"]
    # Against the elements' values: left to right -1.0 (right), 2.7 and 3.0 (wrong), errors 0, 1, 1.
    by_x = sorted(_circles(plots[2]), key=lambda c: float(c.attrs["cx"]))
    assert [c.one("title").text().split(":")[0] for c in by_x] == [
        "element (0, 0), value -1", "element (0, 3), value 2.7", "element (1, 1), value 3"]
    assert float(by_x[0].attrs["cy"]) > float(by_x[1].attrs["cy"]) == float(by_x[2].attrs["cy"])
    assert "value of the element of input 0" in plots[2].text()


def test_html_plots_elements_against_their_position_without_values() -> None:
    run = RunReport(target="t.py:L", kind="module", inputs=[], seed=0, seconds=0.1,
                    results=[gradients_failure(values=False)])
    plot = parse_html(handmade(run).render("html")).all("svg", "plot")[2]
    by_x = sorted(_circles(plot), key=lambda c: float(c.attrs["cx"]))
    assert [c.one("title").text().split(":")[0] for c in by_x] == ["element (0, 0)", "element (0, 3)", "element (1, 1)"]
    assert "element of input 0 (index)" in plot.text() and "(0, 3)" in plot.text()


@pytest.fixture(scope="module")
def region_bug() -> Report:
    """A real failing gradient check: a backward wrong only where x > 2.5."""
    run = run_zoo("gradients_region_bug", only=("gradients",))
    return Report(runs=[run], environment={}, version="test", seconds=run.seconds)


def test_html_plots_a_real_gradient_failure(region_bug: Report) -> None:
    page = parse_html(region_bug.render("html"))
    (result,) = [r for r in region_bug.results if r.check == "gradients" and r.variant == "float64"]
    assert result.status is Status.FAILED
    article = page.all("article", "problem")[0]  # float64 first
    plots = article.all("svg", "plot")
    (wrong,) = result.details["wrong"]
    assert [len(_circles(svg)) for svg in plots] == [
        len(result.details["directions"]), len(wrong["directions"]), len(wrong["elements"])]
    assert any("bad" in c.classes for c in _circles(plots[0]))


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Measured by the browser once the page is laid out, written into the body's attributes for --dump-dom.
MEASURE = """<script>
const shown = (e) => e.checkVisibility();
const failure = document.querySelector("section.run.failed tr.failed");
const folded = document.querySelector("section.run.failed details.checks");
document.body.dataset.height = document.documentElement.scrollHeight;
document.body.dataset.passingShown = [...document.querySelectorAll("section tr.passed")].filter(shown).length;
document.body.dataset.failureFirst = failure.getBoundingClientRect().top < folded.getBoundingClientRect().top;
document.body.dataset.plots = [...document.querySelectorAll("svg.plot")].filter(
  (svg) => svg.getBoundingClientRect().width > 300).length;
</script>"""


def _tiny_layers(region_bug: Report) -> Report:
    """Five layers that pass thirty checks each, and one whose backward is wrong for x > 2.5."""
    passing = [RunReport(target=f"layers/tiny{i}.py:Tiny", kind="module", inputs=[{"size": [4, 3], "format": "BC"}],
                         seed=0, seconds=0.1, results=[CheckResult(f"check{j}", "", Status.PASSED, 0.01, "fine")
                                                       for j in range(30)]) for i in range(5)]
    return handmade(*passing, *region_bug.runs)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium to render the page")
def test_html_in_chromium_shows_failures_first_and_folds_passing_checks(region_bug: Report, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    text = _tiny_layers(region_bug).render("html")
    page.write_text(text.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    shot = tmp_path / "report.png"
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([*CHROMIUM, f"--user-data-dir={profile}", "--window-size=1200,2000", "--dump-dom",
                               page.as_uri()], check=False, capture_output=True, text=True, timeout=120)
        subprocess.run([*CHROMIUM, f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1200,2000",
                        page.as_uri()], check=False, capture_output=True, timeout=120)
    measured = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', done.stdout.split("<body", 1)[1].split(">", 1)[0]))
    assert measured["passing-shown"] == "0" and measured["failure-first"] == "true", measured
    assert int(measured["height"]) < 4000, measured  # six small layers: 2,946 px here, 9,055 px before
    assert int(measured["plots"]) >= 3, measured  # the error plots are drawn at their size
    assert shot.is_file(), "chromium wrote no screenshot"
    assert _png_size(shot) == (1200, 2000) and shot.stat().st_size > 50_000  # a page, not a blank


# -- quiet by default: skips that do not apply, folded; checks that could not judge, counted -------


def _skip(check: str, message: str, skip: str | None, variant: str = "") -> CheckResult:
    return CheckResult(check, variant, Status.SKIPPED, 0.0, message, skip=skip)


NO_OPERATOR = "the layer calls no custom operator (torch.library.custom_op)"


def skipping(*, kinds: bool = True) -> Report:
    """A layer whose skips are of every kind (``kinds``), or a report written before skips had one."""
    results = [
        CheckResult("signatures", "", Status.PASSED, 0.001, "1 input(s) accepted by forward"),
        CheckResult("forward_runs", "", Status.FAILED, 0.01, "forward raised ValueError: no"),
        _skip("device", "no CUDA or MPS device", "not_applicable"),
        _skip("op_schema", NO_OPERATOR, "not_applicable"),
        _skip("op_fake", NO_OPERATOR, "not_applicable"),
        _skip("gradients", "float16 rounding noise hides any error: not judged", "not_judged", "float16"),
        _skip("state_valid", "needs forward_runs, which failed", "blocked"),
    ]
    if not kinds:
        results = [replace(r, skip=None) for r in results]
    run = RunReport(target="skips.py:Skips", kind="module", inputs=[{"size": [4, 3], "format": "BC"}], seed=0,
                    seconds=0.2, results=results)
    return handmade(run)


def _console_lines(report: Report, *, width: int = 80, verbose: bool = False) -> list[str]:
    buffer = io.StringIO()
    console.print_report(report, Console(file=buffer, width=width, color_system=None), verbose=verbose)
    return [line.rstrip() for line in buffer.getvalue().splitlines()]


def test_skips_that_do_not_apply_fold_into_one_line_and_verbose_lists_them() -> None:
    lines = _console_lines(skipping())
    assert lines[0] == "skips.py:Skips failed  1 passed, 1 failed, 5 skipped (1 not judged) (0.2s)"
    assert "  skipped 3 that do not apply (-v lists them): device, op_schema, op_fake" in lines
    assert not [line for line in lines if NO_OPERATOR in line or "no CUDA" in line]  # folded: no line of their own
    # the skips that are not "does not apply" keep their lines
    assert "  skipped gradients[float16]: float16 rounding noise hides any error: not judged" in lines
    assert "  skipped state_valid: needs forward_runs, which failed" in lines
    assert lines[-1] == "1 passed, 1 failed, 5 skipped (1 not judged), 0 errors in 0.50 s"
    text = "\n".join(_console_lines(skipping(), verbose=True))
    assert "no CUDA or MPS device" in text and NO_OPERATOR in text and "do not apply" not in text


def test_a_report_without_skip_kinds_folds_nothing() -> None:
    lines = _console_lines(skipping(kinds=False))
    assert "  skipped device: no CUDA or MPS device" in lines
    assert any(line.startswith("  skipped op_schema, op_fake: the layer calls no custom operator") for line in lines)
    assert not [line for line in lines if "do not apply" in line or "not judged)" in line]
    assert lines[-1] == "1 passed, 1 failed, 5 skipped, 0 errors in 0.50 s"


def test_the_skip_kind_survives_the_json_round_trip_and_reaches_every_summary_line() -> None:
    report = skipping()
    data = json.loads(report.render("json"))
    assert [r["skip"] for r in data["runs"][0]["results"]] == [
        None, None, "not_applicable", "not_applicable", "not_applicable", "not_judged", "blocked"]
    assert [r.skip for r in load(report.render("json")).results] == [r.skip for r in report.results]
    line = "1 passed, 1 failed, 5 skipped (1 not judged), 0 errors in 0.50 s"
    assert report.render("github").splitlines()[-1] == line and line in report.render("markdown")
    assert parse_html(report.render("html")).one("p", "summary").text() == line


# -- the verbose table at 80 columns: messages under their rows, no word cut -------------------------


LONG = ("the layer calls no custom operator (torch.library.custom_op) and the constructor of "
        "MeanPReLUWithAVeryLongName accepts neither device= nor dtype=; see torch.nn.utils.parametrize")


def test_the_verbose_report_at_80_columns_cuts_no_word() -> None:
    run = RunReport(target="layers/long.py:Long", kind="module", inputs=[], seed=0, seconds=0.1, results=[
        CheckResult("op_autograd_registration", "", Status.SKIPPED, 0.0, LONG),
        CheckResult("gradients", "float64", Status.FAILED, 0.1, LONG, details={"reproduce": REPRODUCE})])
    lines = _console_lines(handmade(run), verbose=True)
    assert max(map(len, lines)) <= 80
    words = {word for line in lines for word in line.split()}
    assert set(LONG.split()) <= words  # every word whole: none folded at the edge of a narrow column
    row = lines.index("  op_autograd_registration  skipped  0.00s")
    assert lines[row + 1].startswith("    the layer calls no custom operator (torch.library.custom_op)")
    # the reproduce command, broken between words with shell continuations, is the command again
    at = next(i for i, line in enumerate(lines) if line.startswith("  reproduce: "))
    command = [lines[at].removeprefix("  reproduce: ")]
    while command[-1].endswith(" \\"):
        at += 1
        command.append(lines[at])
    assert len(command) > 1 and " ".join(part.removesuffix(" \\").strip() for part in command) == REPRODUCE


def test_a_wide_terminal_keeps_the_table_and_the_command_on_one_line() -> None:
    lines = _console_lines(handmade(), width=160, verbose=True)
    assert any(line.startswith("┃ check") for line in lines)
    assert f"  reproduce: {REPRODUCE}" in lines


# -- Markdown: whole messages ---------------------------------------------------------------------


def test_markdown_keeps_each_long_message_whole_under_its_table() -> None:
    message = ("wrong gradient of parameter 'slope': analytic = 0.125 × numeric for all 3 elements (a mean where a "
               "sum belongs?); directional derivative analytic -0.07 vs numeric -0.61, relative error 8.2 > "
               "tolerance 1e-06. float64 analytic gradients disagree with float64 finite differences [*see* "
               "the_table] <b>x</b>")
    run = RunReport(target="t.py:L", kind="module", inputs=[], seed=0, seconds=0.1,
                    results=[CheckResult("gradients", "float64", Status.FAILED, 0.1, message)])
    text = handmade(run).render("markdown")
    row = next(line for line in text.splitlines() if line.startswith("| ❌ failed | `gradients[float64]`"))
    assert row.endswith("(a mean where a sum belongs?) … |")  # cut at the end of a clause
    block = text.split("<code>gradients[float64]</code>: the whole message</summary>")[1].split("</details>")[0]
    shown = html.unescape(re.sub(r"\\(.)", r"\1", block)).strip()  # what GitHub renders: escapes undone
    assert shown == message
    assert "<b>" not in block and "\\*see\\*" in block  # no raw HTML, no emphasis


# -- Triton's interpreter: every format says the kernels were not compiled ----------------------


def test_every_format_says_when_triton_kernels_ran_under_the_interpreter() -> None:
    """A run whose kernels ran interpreted passed on CPU tensors, not compiled: each report a CI
    reader may look at says so, and at which sizes (runs[].interpreter in JSON)."""
    interpreter = {"kernels": ["_leaky_forward"], "sizes": "reduced", "inputs": [{"size": [6, 4], "format": "BC"}],
                   "why": None}
    run = RunReport(target="tests/gpu/triton_leaky.py", kind="module", inputs=[{"size": [96, 4], "format": "BC"}],
                    seed=0, seconds=0.5, location={"file": "tests/gpu/triton_leaky.py", "line": 9},
                    interpreter=interpreter,
                    results=[CheckResult("signatures", "", Status.PASSED, 0.001, "1 input(s) accepted by forward")])
    said = "Triton interpreter, kernels not compiled at 6,4:BC (reduced)"
    report = handmade(run)
    assert said in report.render("markdown")
    facts = parse_html(report.render("html")).all("dl", "facts")[0].text()
    assert said in facts, facts
    suite = ET.fromstring(report.render("junit")).find("testsuite")
    assert suite is not None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["triton_interpreter"] == said
    (notice,) = [line for line in report.render("github").splitlines() if line.startswith("::notice")]
    assert notice.startswith("::notice file=tests/gpu/triton_leaky.py,line=9,") and "not compiled" in notice
    assert json.loads(report.render("json"))["runs"][0]["interpreter"] == interpreter
    compiled = handmade(replace(run, interpreter=None))
    assert "interpreter" not in compiled.render("markdown") + compiled.render("github")


# -- GitHub annotations on the layer's lines ------------------------------------------------------


def test_github_puts_a_backward_failure_on_the_backward_and_the_rest_on_the_layer() -> None:
    location = {"file": "layers/act.py", "line": 30,
                "backward": {"name": "ActFunction.backward", "file": "layers/act_fn.py", "line": 12}}
    crashed = CheckResult("state_dict", "", Status.ERROR, 0.02, "boom")
    pinned = CheckResult("meta_device", "", Status.FAILED, 0.02, "pinned",
                         details={"location": {"file": "layers/act.py", "line": 41}})
    run = RunReport(target="layers/act.py:Act", kind="module", inputs=[], seed=0, seconds=0.1, custom_backward=True,
                    location=location, results=[gradients_failure(), crashed, pinned])
    errors = [line for line in handmade(run).render("github").splitlines() if line.startswith("::error")]
    assert errors[0].startswith("::error file=layers/act_fn.py,line=12,title=layercheck layers/act.py%3AAct%3A "
                                "gradients[float64] failed (in ActFunction.backward)::")
    assert errors[1].startswith("::error file=layers/act.py,line=30,title=layercheck layers/act.py%3AAct%3A "
                                "state_dict error::")
    assert errors[2].startswith("::error file=layers/act.py,line=41,")  # the check knew the line
    article = parse_html(handmade(run).render("html")).all("article", "problem")[0]
    assert article.one("p", "where").text() == "Where: layers/act_fn.py:12 (ActFunction.backward)"


def _line_of(path: Path, start: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if line.lstrip().startswith(start))


def test_a_run_knows_where_its_layer_and_its_backward_are_defined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    zoo = ROOT / "tests" / "zoo" / "gradients_batch_mean.py"
    result = CliRunner().invoke(app, ["run", "tests/zoo/gradients_batch_mean.py", "--layout", "8,3,5:BCU",
                                      "--check", "gradients", "--format", "github"])
    assert result.exit_code == 1, result.output
    (error,) = [line for line in result.stdout.splitlines() if line.startswith("::error")]
    line = _line_of(zoo, "def backward")
    assert error.startswith(f"::error file=tests/zoo/gradients_batch_mean.py,line={line},title=layercheck "
                            "tests/zoo/gradients_batch_mean.py%3A gradients[float64] failed "
                            "(in MeanPReLUFunction.backward)::in MeanPReLUFunction.backward "
                            f"(tests/zoo/gradients_batch_mean.py:{line}): wrong gradient of parameter 'slope'")
    data = json.loads(CliRunner().invoke(app, ["run", "tests/zoo/gradients_batch_mean.py", "--layout", "8,3,5:BCU",
                                               "--check", "forward_runs", "--format", "json"]).stdout)
    assert data["runs"][0]["location"] == {
        "file": "tests/zoo/gradients_batch_mean.py", "line": _line_of(zoo, "class MeanPReLU("),
        "backward": {"name": "MeanPReLUFunction.backward", "file": "tests/zoo/gradients_batch_mean.py",
                     "line": line}}
    # torch's own layer: no file of the user's to point at
    torch_layer = json.loads(CliRunner().invoke(app, ["run", "torch.nn:PReLU", "--layout", "4,3:BC", "--check",
                                                      "signatures", "--format", "json"]).stdout)
    assert torch_layer["runs"][0]["location"] is None


def test_a_layer_whose_worker_died_keeps_its_location(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(app, ["run", "tests/hostile/os_exit.py", "--layout", "4,3:BC", "--check",
                                      "predict_runs", "--format", "json"])
    assert result.exit_code == 1, result.output
    (run,) = json.loads(result.stdout)["runs"]
    assert "exited with status 3" in run["results"][-1]["message"]  # the report the parent made
    assert run["location"] == {"file": "tests/hostile/os_exit.py",
                               "line": _line_of(ROOT / "tests" / "hostile" / "os_exit.py", "class Layer(")}


def test_an_operator_points_at_its_function_and_registered_backward() -> None:
    run = run_zoo("good_custom_op", only=("forward_runs",))
    zoo = ROOT / "tests" / "zoo" / "good_custom_op.py"
    assert run.location is not None and run.location["file"].endswith("tests/zoo/good_custom_op.py")
    assert run.location["line"] == _line_of(zoo, "def scaled_tanh(")
    assert run.location["backward"]["line"] == _line_of(zoo, "def _backward(")


# -- HTML: failures first, passing checks folded, internals folded, the error plotted ---------------


def test_html_puts_what_did_not_pass_first_and_folds_the_rest() -> None:
    page = parse_html(skipping().render("html"))
    section = page.all("section", "run")[0]
    children = [c for c in section.children if isinstance(c, Node)]
    shown = children[[c.tag for c in children].index("table")]
    assert [tr.classes[0] for tr in shown.kids("tr")[1:]] == ["failed", "skipped", "skipped"]  # failure first
    folds = section.kids("details")
    assert [f.one("summary").text() for f in folds] == ["1 check passed", "3 checks do not apply here"]
    assert all("open" not in f.attrs for f in folds)
    assert [tr.all("td")[1].text() for tr in folds[1].all("tr")[1:]] == ["device", "op_schema", "op_fake"]
    good = parse_html(handmade().render("html")).all("section", "run")[0]
    assert not good.kids("table") and good.one("details", "checks").one("summary").text() == "2 checks passed"


def test_html_folds_a_failure_internals_and_keeps_input_options() -> None:
    inputs = [{"size": [4, 10], "format": "BT", "dtype": "int64", "values": "integers:0:1000"},
              {"name": "mask", "size": [4, 10], "format": "BT", "dtype": "bool"},
              {"size": [4, 3], "format": "BC", "requires_grad": False}]
    run = RunReport(target="t.py:L", kind="module", inputs=inputs, seed=0, seconds=0.1,
                    results=[gradients_failure()])
    page = parse_html(handmade(run).render("html"))
    section = page.all("section", "run")[0]
    facts = dict(zip((dt.text() for dt in section.iter("dt")), (dd.text() for dd in section.iter("dd"))))
    assert facts["inputs"] == ("4,10:BT dtype=int64 values=integers:0:1000, mask=4,10:BT dtype=bool, "
                               "4,3:BC grad=no")
    (article,) = section.all("article", "problem")
    internals = article.one("details", "internals")
    assert "open" not in internals.attrs and "tolerance" in internals.text()
    assert article.one("p", "reproduce").text() == f"Reproduce: {REPRODUCE}"


def test_html_plots_the_error_of_each_direction_against_the_tolerance() -> None:
    """A 5 % error stands far above the tolerance line, where analytic against numeric would put
    it on the diagonal; an exact direction sits at the bottom."""
    details = {"tolerance": 1e-6, "directions": [_direction(1.05, 1.0, 0.05), _direction(2.0, 2.0, 0.0),
                                                 _direction(3.0, 3.0, 4e-10)]}
    run = RunReport(target="t.py:L", kind="module", inputs=[], seed=0, seconds=0.1,
                    results=[CheckResult("gradients", "float64", Status.FAILED, 0.1, "5 % off", details=details)])
    (svg,) = parse_html(handmade(run).render("html")).all("svg", "plot")
    tolerance = next(n for n in svg.all("line") if n.attrs.get("stroke") == "#c53030")
    level = float(tolerance.attrs["y1"])
    frame = svg.one("rect")
    top, bottom = float(frame.attrs["y"]), float(frame.attrs["y"]) + float(frame.attrs["height"])
    wrong, exact, close = sorted(_circles(svg), key=lambda c: float(c.attrs["cx"]))
    assert "bad" in wrong.classes and not {"bad"} & set(exact.classes + close.classes)
    assert level - float(wrong.attrs["cy"]) > 0.4 * (bottom - top)  # decades above the line
    assert float(exact.attrs["cy"]) == bottom and level < float(close.attrs["cy"]) < bottom
    assert "tolerance 1e-06" in svg.text() and "relative error 0.05 (above the tolerance 1e-06)" in wrong.text()

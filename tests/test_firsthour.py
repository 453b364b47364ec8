"""The first hour, second round (issue 51): what a newcomer meets, through the interfaces they touch.

Where the user's code raised, in every report: the console, JSON, GitHub annotations, the API.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layercheck.cli.commands import app

from conftest import ROOT, run_zoo

cli = CliRunner()

# A constructor that raises inside a helper it calls (line 7), and a forward that raises (line 12).
HELPER_RAISES = """\
import torch
from torch import nn


def make_weight(n):
    w = torch.zeros(n)
    return w.view(16, -1, 3)


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(make_weight(16))

    def forward(self, x):
        return x * 2
"""

FORWARD_RAISES = """\
import torch
from torch import nn


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(16))

    def forward(self, x):
        y = x * self.w
        return y.view(3, -1, 7)
"""


# A module that raises while it is imported, inside a helper its top level calls (line 6).
IMPORT_RAISES = """\
import torch
from torch import nn


def table(n):
    return torch.arange(n).view(3, -1)


TABLE = table(16)


class Fine(nn.Module):
    def forward(self, x):
        return x * 2
"""


@pytest.fixture
def layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "helper.py").write_text(HELPER_RAISES)
    (tmp_path / "forward.py").write_text(FORWARD_RAISES)
    (tmp_path / "on_import.py").write_text(IMPORT_RAISES)
    return tmp_path


def invoke(*args: str) -> tuple[int, str]:
    result = cli.invoke(app, ["run", *args], env={"COLUMNS": "100"})
    return result.exit_code, result.stdout


def test_the_console_shows_the_constructor_frames_down_to_the_helper_that_raised(layers: Path) -> None:
    for flags in ((), ("-v",), ("-q",)):
        code, out = invoke("helper.py", "--layout", "8,16:BC", *flags)
        assert code == 1
        lines = [line.strip() for line in out.splitlines()]
        trace = ['File "helper.py", line 13, in __init__', "self.w = nn.Parameter(make_weight(16))",
                 'File "helper.py", line 7, in make_weight', "return w.view(16, -1, 3)"]
        start = lines.index(trace[0]) if trace[0] in lines else -1
        assert lines[start:start + 4] == trace, (flags, out)
        assert "library frame" in out and "folded" in out


def test_json_locates_a_construction_error_on_the_line_that_raised(layers: Path) -> None:
    code, out = invoke("helper.py", "--layout", "8,16:BC", "--format", "json")
    (run,) = json.loads(out)["runs"]
    assert code == 1 and run["status"] == "error"
    where = run["location"]
    assert (where["file"], where["line"], where["name"]) == ("helper.py", 7, "make_weight")
    assert [(f["line"], f["name"]) for f in where["frames"]] == [(13, "__init__"), (7, "make_weight")]
    assert where["defined"] == {"file": "helper.py", "line": 10}  # the class, as before


@pytest.mark.parametrize("isolate", [(), ("--no-isolate",)], ids=["isolated", "in-process"])
def test_an_import_error_is_located_and_shown_where_the_module_raised(layers: Path, isolate: tuple[str, ...]) -> None:
    code, out = invoke("on_import.py:Fine", "--layout", "8,16:BC", *isolate)
    lines = [line.strip() for line in out.splitlines()]
    assert code == 1 and "importing on_import.py raised RuntimeError" in out
    trace = ['File "on_import.py", line 9, in <module>', "TABLE = table(16)",
             'File "on_import.py", line 6, in table', "return torch.arange(n).view(3, -1)"]
    start = lines.index(trace[0]) if trace[0] in lines else -1
    assert lines[start:start + 4] == trace, out
    code, out = invoke("on_import.py:Fine", "--layout", "8,16:BC", "--format", "json", *isolate)
    (run,) = json.loads(out)["runs"]
    assert (run["location"]["file"], run["location"]["line"], run["location"]["name"]) == ("on_import.py", 6, "table")


def test_json_and_github_put_a_forward_error_on_the_line_that_raised(layers: Path) -> None:
    _, out = invoke("forward.py", "--layout", "8,16:BC", "--check", "forward_runs", "--format", "json")
    (run,) = json.loads(out)["runs"]
    (failed,) = [r for r in run["results"] if r["status"] == "failed"]
    where = failed["details"]["location"]
    assert (where["file"], where["line"], where["code"]) == ("forward.py", 12, "return y.view(3, -1, 7)")
    assert run["location"] == {"file": "forward.py", "line": 5}  # the run's own: where the layer is defined

    _, annotations = invoke("forward.py", "--layout", "8,16:BC", "--check", "forward_runs", "--format", "github")
    (error,) = [line for line in annotations.splitlines() if line.startswith("::error")]
    assert error.startswith("::error file=forward.py,line=12,title=layercheck forward.py%3A forward_runs failed "
                            "(in forward)::")
    _, annotations = invoke("helper.py", "--layout", "8,16:BC", "--format", "github")
    assert annotations.startswith("::error file=helper.py,line=7,")


def test_the_api_assertion_shows_where_the_constructor_and_forward_raised(layers: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import layercheck

    monkeypatch.syspath_prepend(str(layers))
    helper, forward = pytest.importorskip("helper"), pytest.importorskip("forward")
    with pytest.raises(AssertionError) as raised:
        layercheck.assert_layer_valid(helper.Broken, "8,16:BC")
    assert 'File "helper.py", line 7, in make_weight\n    return w.view(16, -1, 3)' in str(raised.value)
    with pytest.raises(AssertionError) as raised:
        layercheck.assert_layer_valid(forward.Broken, "8,16:BC", checks=["forward_runs"])
    assert 'File "forward.py", line 12, in forward\n      return y.view(3, -1, 7)' in str(raised.value)


# -- the Python API: its reference page, Report.status, dir(layercheck) -------------------------


def test_dir_of_the_package_lists_the_public_names_only() -> None:
    import layercheck

    layercheck.check_layer  # noqa: B018 (loads the API and, with it, most submodules)
    assert dir(layercheck) == sorted(layercheck.__all__)
    assert not {"annotations", "TYPE_CHECKING", "result", "errors", "registry"} & set(dir(layercheck))
    assert layercheck.parent.result.Report is layercheck.Report  # the submodules are still there, unlisted


def test_report_status_is_the_verdict_of_the_whole_report(layers: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch import nn

    import layercheck

    monkeypatch.syspath_prepend(str(layers))
    assert layercheck.check_layer(nn.Tanh(), "4,3:BC", checks=["forward_runs"]).status == "passed"
    assert layercheck.check_layer(pytest.importorskip("forward").Broken, "8,16:BC",
                                  checks=["forward_runs"]).status is layercheck.Status.FAILED
    built = layercheck.check_layer(pytest.importorskip("helper").Broken, "8,16:BC")
    assert built.status is layercheck.Status.ERROR and not built.passed and built.exit_code == 1


def _api_page() -> str:
    import sys

    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import layercheck_docs
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    return str(layercheck_docs.api_page())


def test_the_api_reference_documents_exactly_the_public_and_stable_names() -> None:
    import re

    import layercheck
    from layercheck import sdk

    page = _api_page()
    top = set(re.findall(r"^\.\. \w+:: layercheck\.(\w+)$", page, flags=re.MULTILINE))
    stable = set(re.findall(r"^\.\. [\w:]+:: layercheck\.sdk\.(\w+)$", page, flags=re.MULTILINE))
    assert top == set(layercheck.__all__) - {"__version__"}
    also = set(re.findall(r"`(\w+)`", page.split("Also stable there")[1].split("\n")[0]))
    assert stable | also == set(sdk.STABLE) and not stable & also and also <= top
    # every one has something to say: a docstring of its own (or, for a constant, a #: comment)
    for name in top:
        assert (getattr(layercheck, name).__doc__ or "").strip(), name
    assert "check_layer" in top and "Report" in top and "Context" in stable


# -- strict=True with an instance -----------------------------------------------------------------

RMS_NORM = """\
import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self, channels, *, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels, device=device, dtype=dtype))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
"""


def test_strict_passes_a_correct_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An instance cannot be constructed again: factory_kwargs does not apply to it, and strict=True
    (which fails a check that applies but could not judge) passes a correct layer."""
    import layercheck

    (tmp_path / "rms.py").write_text(RMS_NORM)
    monkeypatch.syspath_prepend(str(tmp_path))
    layer = pytest.importorskip("rms").Layer
    report = layercheck.assert_layer_valid(layer(64), "8,10,64:BTC", strict=True)
    (factory,) = [r for r in report.results if r.check == "factory_kwargs"]
    assert factory.status == "skipped" and factory.skip == "not_applicable"
    # the class is checked by it, and passes it
    (factory,) = [r for r in layercheck.check_layer(layer, "8,10,64:BTC", kwargs={"channels": 64},
                                                     checks=["factory_kwargs"], strict=True).results
                  if r.check == "factory_kwargs"]
    assert factory.status == "passed"


# -- a wrong gradient on one branch of a torch.where, on one half of a dimension -------------------


def test_a_factor_on_one_branch_of_one_half_is_named_with_its_slab_condition_and_factor() -> None:
    run = run_zoo("gradients_glu_where_branch", only=("gradients",))
    failed = {r.variant: r for r in run.results if r.check == "gradients" and r.status == "failed"}
    message = failed["float64"].message
    share = re.search(r"the gradient is 2 × what finite differences give on the (\d+\.\d\d)% of its elements at "
                      r"indices 16\.\.31 of dimension 1 where the value is negative, and agrees on the others", message)
    assert share is not None, message
    assert 20 <= float(share[1]) <= 30  # the gate half's negative gates: about a quarter of the elements
    assert "a factor 2 missing or extra in the derivative on one branch only" in message
    assert "confined to values in" not in message  # the vague range it said before


def test_a_factor_over_the_whole_tensor_is_still_said_of_the_whole_tensor() -> None:
    run = run_zoo("gradients_batch_mean", only=("gradients",))
    (failed,) = [r for r in run.results if r.check == "gradients" and r.status == "failed"]
    assert "0.125 × what finite differences give, over all 3 elements" in failed.message
    assert "of its elements at indices" not in failed.message


# -- fix hints chosen by the mechanism measured ------------------------------------------------------


def _message(zoo: str, check: str) -> str:
    (failed,) = [r for r in run_zoo(zoo, only=(check,)).results if r.check == check and r.status == "failed"]
    return failed.message


def test_a_mask_reduced_over_the_batch_gets_the_mask_fix() -> None:
    message = _message("observations_mask_any_over_batch", "observations")
    fix = message[message.index("Fix:"):]
    assert "the layer combines that mask across the batch (mask.any(0)" in message
    assert fix.startswith("Fix: reduce a mask over its own observation's dimensions only")
    assert "running statistics" not in message and "squeeze" not in message


def test_values_mixed_across_the_batch_without_a_mask_get_the_reduction_fix() -> None:
    message = _message("observations_mask_leaks", "observations")  # a softmax over the whole batch
    assert "something reduces over the batch dimension" in message and "squeeze" not in message


def test_a_squeeze_that_drops_a_batch_of_one_gets_the_squeeze_fix_first() -> None:
    message = _message("observations_squeeze", "observations")
    assert message[message.index("Fix:"):].startswith("Fix: squeeze named dimensions only (x.squeeze(-1)")
    assert "running statistics" not in message


def test_a_float_mask_where_the_layer_wants_bool_gets_declare_dtype_bool(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "masked.py").write_text("from torch import nn\n\n\nclass Masked(nn.Module):\n"
                                        "    def forward(self, x, mask):\n        return x.masked_fill(~mask, 0.0)\n")
    code, out = invoke("masked.py", "--layout", "8,10:BT", "--layout", "8,10:BT", "--check", "predict_runs",
                       "--format", "json")
    (run,) = json.loads(out)["runs"]
    (failed,) = [r for r in run["results"] if r["check"] == "predict_runs"]
    assert code == 1 and failed["status"] == "failed"
    assert "Fix: declare the mask's dtype, --layout '8,10:BT dtype=bool'" in failed["message"]
    assert "take the layouts' inputs" not in failed["message"]  # the generic fix it gave before


def test_a_layer_writing_into_its_input_fails_input_unchanged_and_not_copy() -> None:
    run = run_zoo("input_unchanged_scales_input_in_place", only=("copy", "input_unchanged"))
    verdicts = {r.check: r.status for r in run.results}
    assert verdicts["input_unchanged"] == "failed" and verdicts["copy"] == "passed"


# -- CI: Markdown failures first and compact, JUnit's inputs with their qualifiers ----------------------


def test_junit_inputs_keep_their_qualifiers(layers: Path) -> None:
    import xml.etree.ElementTree as ET

    (layers / "where.py").write_text("import torch\nfrom torch import nn\n\n\nclass Where(nn.Module):\n"
                                     "    def forward(self, mask, x):\n        return torch.where(mask, x, 0.0)\n")
    code, out = invoke("where.py", "--layout", "4,10:BT dtype=bool", "--layout", "4,10:BT",
                       "--check", "signatures", "--format", "junit")
    assert code == 0, out
    (suite,) = ET.fromstring(out).iter("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["inputs"] == "4,10:BT dtype=bool; 4,10:BT"


def test_markdown_lists_failures_first_and_a_row_per_passing_layer() -> None:
    from layercheck.parent.result import CheckResult, Report, RunReport, Status

    def run(name: str, status: Status) -> RunReport:
        results = [CheckResult("signatures", "", Status.PASSED, 0.01, "1 input(s) accepted by forward " * 3),
                   CheckResult("gradients", "float64", status, 0.2, "wrong gradient of input 0 " * 20,
                               details={"reproduce": f"layercheck run {name} --check gradients"})]
        return RunReport(target=name, kind="module", inputs=[{"size": [4, 3], "format": "BC"}], seed=0, seconds=0.3,
                         results=results)

    runs = [run(f"layers/l{i:03}.py", Status.FAILED if i == 57 else Status.PASSED) for i in range(100)]
    text = Report(runs=runs, environment={}, version="0", seconds=1.0).render("markdown")
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == ["### ❌ `layers/l057.py`: failed", "### ✅ 99 passed"]
    rows = [line for line in text.split(headings[1])[1].splitlines() if line.startswith("| `layers/")]
    assert len(rows) == 99 and rows[0].startswith("| `layers/l000.py` | 2 passed |")
    assert "wrong gradient of input 0" not in text.split(headings[1])[1]  # passing layers' messages left out
    assert len(text.encode()) < 12_000  # was 50 KB: every passing layer's checks, folded, with their messages


# -- one exit status per kind of mistake; every spec problem in one pass ----------------------------------


def usage_lines(*args: str) -> list[str]:
    result = cli.invoke(app, ["run", *args], env={"COLUMNS": "100"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return result.stderr.strip().splitlines()


def test_a_spec_whose_layer_file_is_missing_is_a_usage_error(layers: Path) -> None:
    (layers / "missing.yaml").write_text("layer: nosuch.py:Layer\ninputs:\n  - layout: 8,16:BC\n")
    (layers / "typo.yaml").write_text("layer: forward.py:Brokn\ninputs:\n  - layout: 8,16:BC\n")
    lines = usage_lines("missing.yaml", "typo.yaml")  # both, in one pass
    assert lines == [f"layercheck: error: missing.yaml: layer: nosuch.py:Layer: no such file {layers / 'nosuch.py'}",
                     "typo.yaml: layer: forward.py:Brokn: no 'Brokn' in forward.py; did you mean 'Broken'? "
                     "(layers there: Broken)"]


def test_an_unknown_constructor_keyword_is_a_usage_error_with_did_you_mean(layers: Path) -> None:
    (layers / "kw.py").write_text("from torch import nn\n\n\nclass Scale(nn.Module):\n"
                                  "    def __init__(self, factor=2.0):\n        super().__init__()\n"
                                  "        self.factor = factor\n\n    def forward(self, x):\n"
                                  "        return x * self.factor\n")
    lines = usage_lines("kw.py", "--layout", "4,3:BC", "--kwarg", "facter=3")
    assert lines[-1].endswith("Scale() takes no keyword argument 'facter'; did you mean 'factor'? (its keywords: "
                              "factor)")
    assert usage_lines("kw.py", "--layout", "4,3:BC", "--kwarg", "facter=3", "--no-isolate") == lines
    (layers / "kw.yaml").write_text("layer: kw.py:Scale\nkwargs: {facter: 3}\ninputs:\n  - layout: 4,3:BC\n")
    assert usage_lines("kw.yaml")[-1].startswith("layercheck: error: kw.yaml: args and kwargs: Scale() "
                                                 "takes no keyword argument 'facter'; did you mean 'factor'?")

    import layercheck
    from layercheck.target.loading import resolve

    scale = resolve("kw.py:Scale", base_dir=layers)
    with pytest.raises(layercheck.UsageError, match="did you mean 'factor'"):
        layercheck.check_layer(scale, "4,3:BC", kwargs={"facter": 3})


def test_every_problem_of_a_spec_is_said_in_one_pass(layers: Path) -> None:
    (layers / "two.yaml").write_text("layer: forward.py:Broken\nsed: 3\ninputs:\n  - layout: 8,16,4:BCC\n"
                                     "  - layout: 8,16:BC\nchecks:\n  skp: [device]\n")
    assert usage_lines("two.yaml") == [
        "layercheck: error: two.yaml: sed: unknown key; did you mean 'seed'? (keys: "
        + ", ".join(__import__("layercheck.parent.spec", fromlist=["_KEYS"])._KEYS) + ")",
        'two.yaml: inputs[0].layout: "8,16,4:BCC": 2 C labels, at most one allowed',
        "two.yaml: checks.skp: unknown key; did you mean 'skip'? (keys: skip, enable)",
    ]


# -- smaller: the spec schema as a table, no padding, no internal names, the warm-up apart ---------------


def test_the_spec_schema_page_has_a_row_per_key_with_type_default_and_example() -> None:
    from layercheck.parent.inputs import _INPUT_KEYS
    from layercheck.parent.spec import _KEYS

    text = (ROOT / "docs" / "reference" / "spec-schema.md").read_text()
    keys, inputs = text.split("## The keys")[1].split("### An input")
    header = "| key | type | default | example | what it is |"
    for table, expected in ((keys, _KEYS), (inputs, _INPUT_KEYS)):
        assert header in table
        rows = re.findall(r"^\| `(\w+)` \|([^|]+)\|([^|]+)\|([^|]+)\|([^|]+)\|$", table, flags=re.M)
        assert [row[0] for row in rows] == list(expected)
        assert all(cell.strip() for row in rows for cell in row)
    assert '"Inputs" above' not in text


def test_piped_output_has_no_trailing_spaces(layers: Path) -> None:
    code, out = invoke("forward.py", "--layout", "8,16:BC")
    assert code == 1 and "forward raised RuntimeError" in out
    padded = [line for line in out.splitlines() if line != line.rstrip()]
    assert padded == []


def test_user_pages_and_check_pages_name_no_internal_file_or_note() -> None:
    user_pages = [ROOT / "README.md", ROOT / "docs" / "index.md", ROOT / "docs" / "install.md",
                  ROOT / "docs" / "tutorial.md", *sorted((ROOT / "docs" / "howto").glob("*.md")),
                  *sorted((ROOT / "docs" / "reference").glob("*.md"))]
    internal = re.compile(r"Note \[|\b(building|subject|runner|engine|locate|calibration|triton_interpret)\.py\b")
    for page in user_pages:
        assert not internal.search(page.read_text()), page.name
    from typer.testing import CliRunner

    for check_id in ("gradients", "gradgrad", "forward_ad", "observations"):
        text = CliRunner().invoke(app, ["checks", check_id]).stdout
        assert not internal.search(text) and "numerics/" not in text, check_id


def test_the_notes_page_is_under_contributing() -> None:
    contributing = (ROOT / "docs" / "contributing.md").read_text()
    assert "generated/notes" in contributing.split("```{toctree}")[1]
    assert "generated/notes" not in (ROOT / "docs" / "explanation" / "index.md").read_text()


def test_a_run_of_several_targets_reports_the_start_up_apart(layers: Path) -> None:
    for name in ("one", "two"):
        (layers / f"{name}.yaml").write_text("layer: torch.nn:Tanh\ninputs:\n  - layout: 4,3:BC\n")
    result = cli.invoke(app, ["run", "one.yaml", "two.yaml", "--check", "predict_runs", "--format", "json"])
    report = json.loads(result.stdout)
    startup = report["environment"]["startup_seconds"]
    first, second = (run["seconds"] for run in report["runs"])
    assert startup > 0 and first + second + startup <= report["summary"]["seconds"] + 1e-3
    text = cli.invoke(app, ["run", "one.yaml", "two.yaml", "--check", "predict_runs"]).stdout
    assert re.search(r"^start-up \d+\.\ds \(Python, torch and the checks imported once", text, flags=re.M)
    alone = cli.invoke(app, ["run", "one.yaml", "--check", "predict_runs", "--format", "json"]).stdout
    assert "startup_seconds" not in json.loads(alone)["environment"]  # one target: its time is the run's

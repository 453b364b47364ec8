"""The command line as a user meets it: exit codes, one-line errors, reports parsed back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.reporting.json import load

runner = CliRunner()

SMALL_PRELU = ["layers/prelu.py", "--layout", "4,3,5,2:SSCB"]


@pytest.fixture(autouse=True)
def in_root(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root)


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_run_layer_prints_table_and_summary_and_exits_0() -> None:
    result = invoke("run", *SMALL_PRELU, "--check", "forward_predict_agree")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("layers/prelu.py passed  4 passed (")
    verbose = invoke("run", *SMALL_PRELU, "--check", "forward_predict_agree", "--verbose")
    assert "forward_predict_agree" in verbose.stdout and "passed" in verbose.stdout
    assert "4 passed, 0 failed, 0 skipped, 0 errors in" in result.stdout  # with signatures and the two runs


def test_json_report_matches_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = invoke("run", *SMALL_PRELU, "--format", "json", "--output", str(out), "--check", "predict_runs")
    assert result.exit_code == 0, result.output
    assert f"report written to {out}" in result.stderr
    data = json.loads(out.read_text())
    assert data["schema"] == "layercheck.report/1"
    assert set(data) == {"schema", "layercheck_version", "environment", "runs", "summary"}
    assert set(data["environment"]) == {"python", "torch", "devices", "plugins"}
    assert data["environment"]["plugins"] == []  # the check plug-ins that ran: none installed here
    (run,) = data["runs"]
    assert set(run) == {"target", "kind", "custom_backward", "inputs", "status", "error", "location", "seed",
                        "seconds", "summary", "results", "interpreter", "explore"}
    assert run["interpreter"] is None  # no Triton kernel: nothing ran under Triton's interpreter
    assert run["target"] == "layers/prelu.py" and run["kind"] == "module" and run["status"] == "passed"
    assert run["inputs"] == [{"size": [4, 3, 5, 2], "format": "SSCB"}]
    assert [r["check"] for r in run["results"]] == ["signatures", "predict_runs"]
    assert set(run["results"][0]) == {"check", "variant", "status", "seconds", "peak_memory", "skip", "message",
                                      "notes", "details"}
    assert data["summary"]["passed"] == run["summary"]["passed"] == 2
    peaks = [r["peak_memory"] for r in run["results"]]
    assert all(isinstance(peak, int) and peak >= 0 for peak in peaks), peaks  # bytes, measured on Linux
    loaded = load(out.read_text()).runs[0].results  # round trip
    assert loaded[-1].check == "predict_runs" and [r.peak_memory for r in loaded] == peaks


def test_json_to_stdout_without_output() -> None:
    result = invoke("run", *SMALL_PRELU, "--format", "json", "--check", "signatures")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["runs"][0]["results"][0]["status"] == "passed"


def test_layer_whose_forward_raises_exits_1_with_failed_result(tmp_path: Path) -> None:
    (tmp_path / "boom.py").write_text(
        "from torch import nn\n\nclass Boom(nn.Module):\n    def forward(self, x):\n        return x.view(-1, 7)\n"
    )
    out = tmp_path / "r.json"
    result = invoke("run", str(tmp_path / "boom.py"), "--layout", "4,3:BC", "--format", "json", "-o", str(out),
                    "--check", "predict_runs", "--check", "forward_runs")
    assert result.exit_code == 1
    results = {r["check"]: r for r in json.loads(out.read_text())["runs"][0]["results"]}
    assert results["predict_runs"]["status"] == "failed"
    assert "predict raised RuntimeError" in results["predict_runs"]["message"]
    assert "boom.py" in results["predict_runs"]["details"]["traceback"]
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["layers/prelu.py", "--layout", "4,3:BCS"], '"4,3:BCS": 2 sizes but 3 labels'),
        (["layers/prelu.py", "--layout", "4,x:BC"], 'size "x" is not an integer'),
        (["layers/prelu.py", "--layout", "4,0:BC"], "size 0 must be a positive integer"),
        (["layers/prelu.py", "--layout", "4,3:BQ"], 'unknown label "Q"'),
        (["layers/prelu.py", "--layout", "4,3:CC"], "2 C labels, at most one allowed"),
        (["no/such/layer.py", "--layout", "4,3:BC"], "no such file"),
        (["layers/prelu.py:Nope", "--layout", "4,3:BC"], "no 'Nope' in layers/prelu.py (layers there: PReLU)"),
        (["torch.nn:Conv2D", "--layout", "4,3:BC"], "no 'Conv2D' in torch.nn; did you mean 'Conv2d'?"),
        (["layers/prelu.py"], "needs --layout"),
        (["no_such.yaml"], "no_such.yaml: no such spec file"),
        (["specs", "--layout", "4,3:BC"], "apply to layer targets"),
        (["layers/prelu.py", "--layout", "4,3:BC", "--check", "gradient_check"], "unknown check id 'gradient_check'"),
        (["layers/prelu.py", "--layout", "4,3:BC", "--tolerance", "float32"], "expected NAME=VALUE"),
        (["layers/prelu.py", "--layout", "4,3:BC", "--tolerance", "float8=1"], "unknown dtype"),
    ],
)
def test_invalid_command_lines_exit_2_with_one_line(args: list[str], message: str) -> None:
    result = invoke("run", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("layer: ../layers/prelu.py\ninputs:\n  - layout: 4,3:BC\nfoo: 1\n", "foo: unknown key"),
        ("layer: ../layers/prelu.py\ninputs:\n  - layout: [1, 2\n", "YAML syntax error"),
        ("layer: ../layers/prelu.py\ninputs:\n  - layout: 4,3,3:BCC\n", "inputs[0].layout"),
        ("layer: ../layers/prelu.py\ninputs:\n  - layout: 4,3:BC\nchecks: {skip: [nope]}\n", "unknown check id 'nope'"),
    ],
)
def test_invalid_specs_exit_2_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    result = invoke("run", str(spec))
    assert result.exit_code == 2, result.output
    assert str(spec) in result.stderr and message in result.stderr


def test_a_bad_spec_in_a_folder_stops_everything_before_anything_runs(tmp_path: Path, root: Path) -> None:
    (tmp_path / "a_good.yaml").write_text(f"layer: {root}/layers/prelu.py\ninputs:\n  - layout: 4,3:BC\n")
    (tmp_path / "b_bad.yaml").write_text("layer: x.py\n")
    result = invoke("run", str(tmp_path))
    assert result.exit_code == 2 and "b_bad.yaml: inputs: missing" in result.stderr
    assert "passed" not in result.stdout


def test_spec_constructor_arguments_and_seed(tmp_path: Path) -> None:
    spec = tmp_path / "conv.yaml"
    spec.write_text("layer: torch.nn:Conv2d\nargs: [3, 4]\nkwargs: {kernel_size: 3}\nseed: 5\n"
                    "inputs:\n  - layout: 2,3,6,6:BCSS\n")
    out = tmp_path / "r.json"
    result = invoke("run", str(spec), "--check", "predict_runs", "-f", "json", "-o", str(out))
    assert result.exit_code == 0, result.output
    run = json.loads(out.read_text())["runs"][0]
    assert run["seed"] == 5 and "(2, 4, 4, 4)" in run["results"][-1]["message"]
    result = invoke("run", str(spec), "--check", "predict_runs", "--seed", "9", "-f", "json")
    assert json.loads(result.stdout)["runs"][0]["seed"] == 9


def test_constructor_arguments_on_the_command_line() -> None:
    result = invoke("run", "torch.nn:Linear", "--arg", "5", "--kwarg", "out_features=2", "--layout", "4,5:BC",
                    "--check", "predict_runs", "-f", "json")
    assert result.exit_code == 0, result.output
    assert "(4, 2)" in json.loads(result.stdout)["runs"][0]["results"][-1]["message"]


def test_constructor_that_raises_is_a_run_error_exit_1() -> None:
    result = invoke("run", "torch.nn:Linear", "--layout", "4,5:BC", "--arg=-1", "--arg", "2", "-f", "json")
    assert result.exit_code == 1
    run = json.loads(result.stdout)["runs"][0]
    assert run["status"] == "error" and "constructing Linear(-1, 2) raised RuntimeError" in run["error"]


def test_constructor_arguments_that_do_not_fit_are_a_usage_error_exit_2() -> None:
    """Missing, or a keyword the constructor does not take: the command line's mistake, said
    before anything is built (it was exit 1, 'constructing Linear() raised TypeError')."""
    result = invoke("run", "torch.nn:Linear", "--layout", "4,5:BC")
    assert result.exit_code == 2 and "missing a required argument: 'in_features'" in result.stderr
    result = invoke("run", "torch.nn:Linear", "--layout", "4,5:BC", "--arg", "5", "--arg", "2", "--kwarg", "bais=false")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "layercheck: error: the constructor arguments (--arg and --kwarg; check_layer's args and kwargs): Linear() "
        "takes no keyword argument 'bais'; did you mean 'bias'? (its keywords: in_features, out_features, bias, "
        "device, dtype)"]


def test_checks_lists_the_catalogue_and_documents_one() -> None:
    result = invoke("checks")
    assert result.exit_code == 0
    for cid in ("signatures", "initialize", "predict_runs", "forward_runs", "forward_predict_agree"):
        assert cid in result.stdout
    assert "predictDoesNotError" in result.stdout
    one = invoke("checks", "forward_predict_agree")
    assert one.exit_code == 0 and "needs: predict_runs, forward_runs" in one.stdout
    assert invoke("checks", "nope").exit_code == 2


@pytest.mark.slow
def test_python_dash_m_works_like_the_command(root: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "layercheck", "run", *SMALL_PRELU, "--check", "signatures"],
                          capture_output=True, text=True, cwd=root, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "1 passed, 0 failed, 0 skipped, 0 errors" in proc.stdout


def test_the_reproduce_command_reruns_just_the_failing_variant() -> None:
    first = invoke("run", "tests/zoo/dtype_constant_float32.py:Layer", "--layout", "4,3,5:BCU",
                   "--enable", "dtype:float16", "--seed", "4", "-f", "json")
    failed = [r for r in json.loads(first.stdout)["runs"][0]["results"] if r["status"] == "failed"]
    assert [(r["check"], r["variant"]) for r in failed] == [("dtype", "float16")]
    command = failed[0]["details"]["reproduce"]
    assert command.startswith("layercheck run ")
    again = invoke(*command.split()[1:], "-f", "json")
    assert again.exit_code == 1
    results = json.loads(again.stdout)["runs"][0]["results"]
    assert [(r["check"], r["variant"], r["status"]) for r in results if r["check"] == "dtype"] == [
        ("dtype", "float16", "failed")]
    assert json.loads(again.stdout)["runs"][0]["seed"] == 4

"""What a new user meets in the first hour: one root cause reported once, failure messages
that lead with what to fix, skips that never point at a check that did not run."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layercheck.cli.commands import app

cli = CliRunner()


@pytest.fixture(autouse=True)
def in_root(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root)


def run_json(*args: str) -> tuple[int, dict[tuple[str, str], dict]]:
    result = cli.invoke(app, ["run", *args, "--format", "json"], env={"COLUMNS": "200"})
    assert result.exit_code in (0, 1), result.output
    (run,) = json.loads(result.stdout)["runs"]
    return result.exit_code, {(r["check"], r["variant"]): r for r in run["results"]}


def write_layer(folder: Path, name: str, body: str) -> str:
    path = folder / f"{name}.py"
    path.write_text("import torch\nfrom torch import nn\n\n" + textwrap.dedent(body))
    return str(path)


# -- root causes once --------------------------------------------------------------------------


def test_a_wrong_backward_fails_float64_once_and_float32_is_skipped_naming_it() -> None:
    code, results = run_json("tests/zoo/gradients_batch_mean.py", "--layout", "8,3,5:BCU", "--check", "gradients")
    assert code == 1
    assert results["gradients", "float64"]["status"] == "failed"
    skipped = results["gradients", "float32"]
    assert skipped["status"] == "skipped"
    assert "gradients[float64] reports wrong" in skipped["message"]


def test_with_float64_skipped_the_float32_variant_reports_the_wrong_backward_itself() -> None:
    code, results = run_json("tests/zoo/gradients_batch_mean.py", "--layout", "8,3,5:BCU", "--check", "gradients",
                             "--skip", "gradients:float64")
    assert code == 1
    assert ("gradients", "float64") not in results
    assert results["gradients", "float32"]["status"] == "failed"
    assert "parameter 'slope'" in results["gradients", "float32"]["message"]


def test_skipping_finite_does_not_turn_a_non_finite_layer_green(tmp_path: Path) -> None:
    layer = write_layer(tmp_path, "nan_layer", """
        class Layer(nn.Module):
            def forward(self, x):
                return torch.log(x - 100.0)  # NaN for every generated input
        """)
    code, results = run_json(layer, "--layout", "4,3:BC", "--skip", "finite")
    assert code == 1
    gradients = results["gradients", "float64"]
    assert gradients["status"] == "failed"
    assert "not finite" in gradients["message"] and "finite check, which did not run" in gradients["message"]
    skips = [r["message"] for r in results.values() if r["status"] == "skipped"]
    assert not any("finite reports it" in m or "the finite check reports it" in m for m in skips)


def test_with_finite_planned_gradients_points_at_it() -> None:
    _, results = run_json("tests/zoo/finite_zero_running_var.py", "--layout", "4,3,5:BCU")
    assert results["finite", ""]["status"] == "failed"
    assert results["gradients", "float64"]["status"] == "passed"  # training mode is finite: judged normally


# -- messages that lead with what to fix -------------------------------------------------------


@pytest.mark.parametrize(("layer", "layout", "starts"), [
    ("gradients_batch_mean.py", "8,3,5:BCU",
     "in MeanPReLUFunction.backward (tests/zoo/gradients_batch_mean.py:19): wrong gradient of parameter 'slope': "
     "the gradient is 0.125 × what finite differences give, over all 3 elements (0.125 = 1/8, the batch size: a "
     "mean where a sum belongs?)"),
    ("gradients_wrong_sign.py", "5,4:BC",
     "in Affine.backward (tests/zoo/gradients_wrong_sign.py:18): wrong gradient of parameter 'shift': the gradient "
     "is −1 × what finite differences give, over all 4 elements: the sign is flipped"),
    ("gradients_scaled.py", "4,6,5:BCU",
     "in HalfTanh.backward (tests/zoo/gradients_scaled.py:18): wrong gradient of input 0: the gradient is 2 × what "
     "finite differences give, over all 120 elements (a constant factor 2"),
])
def test_a_constant_factor_or_sign_is_named_first(layer: str, layout: str, starts: str) -> None:
    _, results = run_json(f"tests/zoo/{layer}", "--layout", layout, "--check", "gradients:float64")
    message = results["gradients", "float64"]["message"]
    assert message.startswith(starts), message
    # then the combined numbers
    assert "finite differences (all tensors together: along a random direction the gradient gives" in message


def test_gradients_returned_in_the_wrong_order_are_named() -> None:
    args = ["--layout", "6,5,4,3:SSCB"] + ["--layout", "1,1,4,1:UUCU"] * 4
    _, results = run_json("tests/zoo/gradients_swapped_outputs.py", *args, "--check", "gradients:float64")
    message = results["gradients", "float64"]["message"]
    assert "input 2: its gradient is the one input 3 should get" in message
    assert "gradients returned in the wrong order?" in message


def test_a_transposed_gradient_is_named(tmp_path: Path) -> None:
    layer = write_layer(tmp_path, "transposed", """
        class MatMul(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w):
                ctx.save_for_backward(x, w)
                return x @ w

            @staticmethod
            def backward(ctx, grad):
                x, w = ctx.saved_tensors
                return grad @ w.t(), (x.t() @ grad).t()  # the bug: transposed weight gradient


        class Layer(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(4, 4))

            def forward(self, x):
                return MatMul.apply(x, self.weight)
        """)
    _, results = run_json(layer, "--layout", "6,4:BC", "--check", "gradients:float64")
    message = results["gradients", "float64"]["message"]
    assert message.startswith(f"in MatMul.backward ({Path(layer).as_posix()}:12): wrong gradient of parameter "
                              "'weight': its gradient is the transpose (dims 0 and 1 swapped) of the right one, over "
                              "all 16 elements"), message


def test_a_gradient_wrong_in_one_region_is_not_called_a_constant_factor() -> None:
    _, results = run_json("tests/zoo/gradients_region_bug.py", "--layout", "8,8,4,16:SSCB",
                          "--check", "gradients:float64")
    entry = results["gradients", "float64"]
    assert entry["status"] == "failed"
    (wrong,) = entry["details"]["wrong"]
    assert wrong["pattern"] is None and "disagreement confined to values in" in entry["message"]


def test_one_layout_for_a_two_input_layer_fails_signatures_only_and_says_how_to_fix_it(tmp_path: Path) -> None:
    layer = write_layer(tmp_path, "two", """
        class Layer(nn.Module):
            def forward(self, x, y):
                return x * y
        """)
    code, results = run_json(layer, "--layout", "4,3:BC")
    assert code == 1
    failed = [key for key, r in results.items() if r["status"] in ("failed", "error")]
    assert failed == [("signatures", "")]
    assert "one --layout per positional input" in results["signatures", ""]["message"]
    assert results["predict_runs", ""]["message"] == "needs signatures, which failed"
    skipped = results["gradients", "float64"]["message"]
    assert skipped == "needs forward_runs, which was skipped because signatures failed"


# -- mistakes of the first minutes -------------------------------------------------------------


def test_a_constructor_without_its_arguments_is_counted_and_hints_at_arg_and_kwarg(tmp_path: Path) -> None:
    """The command line's mistake (issue 51: exit 2 before anything is built, not an error run)."""
    result = cli.invoke(app, ["run", "torch.nn:Conv2d", "--layout", "2,3,16,16:BCSS", "-o", str(tmp_path / "r.json")],
                        env={"COLUMNS": "200"})
    assert result.exit_code == 2 and not (tmp_path / "r.json").exists()
    assert "missing a required argument: 'in_channels'" in result.stderr
    assert "the constructor arguments (--arg and --kwarg; check_layer's args and kwargs)" in result.stderr


def test_a_mistyped_spec_key_gets_a_did_you_mean(tmp_path: Path) -> None:
    spec = tmp_path / "typo.yaml"
    spec.write_text("layer: torch.nn:Tanh\ninput:\n  - layout: 4,3:BC\n")
    result = cli.invoke(app, ["run", str(spec)])
    assert result.exit_code == 2
    assert "input: unknown key; did you mean 'inputs'?" in result.stderr


def test_a_mistyped_class_gets_a_did_you_mean() -> None:
    result = cli.invoke(app, ["run", "torch.nn:Conv2D", "--layout", "2,3,16,16:BCSS"])
    assert result.exit_code == 2
    assert "did you mean 'Conv2d'?" in result.stderr and "Traceback" not in result.output


def test_a_folder_scan_skips_hidden_folders_and_yaml_that_is_not_a_spec(tmp_path: Path) -> None:
    (tmp_path / "tanh.yaml").write_text("layer: torch.nn:Tanh\ninputs:\n  - layout: 4,3:BC\n")
    (tmp_path / ".pre-commit-config.yaml").write_text("repos: []\n")
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "ci.yaml").write_text("layer: nowhere.py\n")
    (tmp_path / "other.yml").write_text("jobs: {build: 1}\n")
    result = cli.invoke(app, ["run", str(tmp_path), "--check", "predict_runs", "--format", "json", "--verbose"])
    assert result.exit_code == 0, result.output
    assert [run["target"] for run in json.loads(result.stdout)["runs"]] == [str(tmp_path / "tanh.yaml")]
    assert f"not specs (no layer: key), left out: {tmp_path / 'other.yml'}" in result.stderr
    named = cli.invoke(app, ["run", str(tmp_path / "other.yml")])  # named explicitly: still an error
    assert named.exit_code == 2 and "jobs: unknown key" in named.stderr


@pytest.mark.parametrize(("destination", "says"), [
    ("afile/r.json", "afile is a file, not a folder"),
    ("/proc/layercheck.xml", "cannot write in /proc"),
])
def test_an_impossible_output_is_refused_before_anything_runs(tmp_path: Path, destination: str, says: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    result = cli.invoke(app, ["run", "torch.nn:Tanh", "--layout", "4,3:BC", "-o", destination])
    assert result.exit_code == 2 and says in result.stderr, result.output
    assert "Traceback" not in result.output and "passed" not in result.stdout  # nothing ran


@pytest.mark.parametrize("device", ["tpu", "cuda:7"])
def test_a_device_that_is_not_here_is_a_usage_error(device: str) -> None:
    result = cli.invoke(app, ["run", "torch.nn:Tanh", "--layout", "4,3:BC", "--device", device])
    assert result.exit_code == 2 and f"--device {device}" in result.stderr.replace("'", "")


# -- the screens at 80 and 120 columns ---------------------------------------------------------


@pytest.mark.parametrize("columns", [80, 120])
def test_the_catalogue_breaks_no_word_and_fits_the_terminal(columns: int) -> None:
    from layercheck.parent.registry import catalogue

    result = cli.invoke(app, ["checks"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= columns
    words = set(result.stdout.split())
    for info in catalogue():
        assert info.id in words
        assert set(info.title.split()) <= words, info.title  # every word whole
    doc = cli.invoke(app, ["checks", "gradients"], env={"COLUMNS": str(columns)})
    assert max(len(line.rstrip()) for line in doc.stdout.splitlines()) <= columns
    assert "gradientsAreNumericallyCorrect" in doc.stdout.split()
    assert "analytic gradients of inputs and parameters agree" in " ".join(doc.stdout.split())


# -- the command line's manners ----------------------------------------------------------------


def test_version_short_help_and_completion() -> None:
    version = cli.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.startswith("layercheck 0.") and "torch" in version.stdout
    short = cli.invoke(app, ["run", "-h"], env={"COLUMNS": "100"})
    assert short.exit_code == 0 and "--layout" in short.stdout
    assert "--install-completion" in cli.invoke(app, ["--help"]).stdout


@pytest.mark.parametrize("command", [["run"], ["checks"], ["init"], []])
def test_help_shows_readable_placeholders(command: list[str]) -> None:
    result = cli.invoke(app, [*command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    assert not re.search(r"<(list|int|float|str|file|path)\b", result.stdout), result.stdout


@pytest.mark.parametrize(("args", "says"), [
    (["run", "--bogus"], "No such option: --bogus"),
    (["run", "specs", "--seed", "-1"], "Invalid value for '--seed'"),
    (["run", "specs", "--seed", str(2**32)], "Invalid value for '--seed'"),
    (["run", "specs", "--jobs", "x"], "Invalid value for '--jobs'"),
    (["run"], "Missing argument"),
    (["frobnicate"], "No such command"),
    (["run", "specs", "--check", "gradiens"], "unknown check id 'gradiens'; did you mean 'gradients'?"),
])
def test_every_usage_error_is_one_line_in_one_style(args: list[str], says: str) -> None:
    result = cli.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("layercheck: error: ") and says in lines[0], result.stderr
    assert "Traceback" not in result.output and "Usage:" not in result.output


def test_help_checks_and_usage_errors_do_not_import_torch(root: Path) -> None:
    import subprocess
    import sys

    probe = ("import sys\nfrom layercheck.cli.commands import app\n"
             "try:\n    app(sys.argv[1:], prog_name='layercheck')\nexcept SystemExit:\n    pass\n"
             "print('torch imported' if 'torch' in sys.modules else 'no torch', file=sys.stderr)\n")
    for args in (["--help"], ["checks"], ["checks", "gradiens"], ["run", "specs", "--check", "gradiens"],
                 ["run", "nowhere.yaml"], ["run", "layers/prelu.py", "--layout", "4,3:XX"]):
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=root)
        assert done.stderr.strip().endswith("no torch"), (args, done.stderr)

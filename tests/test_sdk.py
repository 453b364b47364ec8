"""The check SDK as users and check authors meet it: reproduce commands that reproduce, per-check
tolerances, tolerance values written as YAML reads them, and a third-party check installed as
a package that imports only ``layercheck.sdk``."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import layercheck
from layercheck.cli.commands import app
from layercheck.parent.result import Report

from conftest import ROOT, install_package, write_spec

runner = CliRunner()

BUGGY = '''
import torch
from torch import nn


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor * 2, None   # the bug: twice the derivative


class Scaled(nn.Module):
    """A layer that needs constructor arguments (one positional, one keyword)."""

    def __init__(self, factor, *, offset=0.0):
        super().__init__()
        self.factor = float(factor)
        self.offset = float(offset)

    def forward(self, x):
        return _Scale.apply(x, self.factor) + self.offset
'''


def _run(*args: str) -> dict:
    result = runner.invoke(app, ["run", *args, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def _verdicts(report: dict) -> dict[str, str]:
    return {f"{r['check']}[{r['variant']}]": r["status"] for run in report["runs"] for r in run["results"]}


def _failure(report: dict, check: str) -> dict:
    return next(r for r in report["runs"][0]["results"] if r["check"] == check and r["status"] == "failed")


def _rerun(command: str) -> dict:
    words = shlex.split(command)
    assert words[:2] == ["layercheck", "run"], command
    return _run(*words[2:])


@pytest.fixture
def buggy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "my layers").mkdir()
    path = tmp_path / "my layers" / "buggy.py"
    path.write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    return path


def test_a_reproduce_command_rebuilds_a_layer_with_constructor_arguments_and_options(buggy: Path) -> None:
    first = _run("my layers/buggy.py:Scaled", "--layout", "4,8:BC", "--arg", "2.0", "--kwarg", "offset=0.5",
                 "--tolerance", "needs_input_grad.float32=0.01", "--device", "cpu", "--enable", "dtype:float16",
                 "--seed", "3")
    failed = _failure(first, "gradients")
    command = failed["details"]["reproduce"]
    for words in ("--arg 2.0", "--kwarg offset=0.5", "--tolerance needs_input_grad.float32=0.01", "--device cpu",
                  "--seed 3", "--check gradients:float64", "'my layers/buggy.py:Scaled'"):
        assert words in command, command
    again = _rerun(command)
    assert _verdicts(again)["gradients[float64]"] == "failed"
    assert _failure(again, "gradients")["message"] == failed["message"]


def test_a_reproduce_command_of_a_module_path_target(buggy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(buggy.parent))
    monkeypatch.delitem(sys.modules, "buggy", raising=False)
    failed = _failure(_run("buggy:Scaled", "--layout", "4,8:BC", "--arg", "2"), "gradients")
    command = failed["details"]["reproduce"]
    assert command.startswith("layercheck run buggy:Scaled --layout 4,8:BC --arg 2 --check gradients:float64")
    assert _failure(_rerun(command), "gradients")["message"] == failed["message"]


def test_a_reproduce_command_of_a_spec_keeps_the_command_line_options(buggy: Path) -> None:
    spec = write_spec(buggy.parent, "buggy.yaml", "buggy.py:Scaled", "4,8:BC", args=[2.0], kwargs={"offset": 1.0})
    failed = _failure(_run(str(spec.relative_to(Path.cwd())), "--tolerance", "observations.float32=1e-3"),
                      "gradients")
    command = failed["details"]["reproduce"]
    assert command == ("layercheck run 'my layers/buggy.yaml' --check gradients:float64 --seed 0 "
                       "--tolerance observations.float32=0.001")
    assert _failure(_rerun(command), "gradients")["message"] == failed["message"]


def test_an_instance_checked_from_python_is_reproduced_in_python(buggy: Path) -> None:
    namespace: dict = {}
    exec(compile(BUGGY, str(buggy), "exec"), namespace)
    layer = namespace["Scaled"](2.0, offset=0.25)
    report = layercheck.check_layer(layer, "4,8:BC", seed=2, tolerance={"needs_input_grad.float32": 0.01})
    failed = next(r for r in report.results if r.check == "gradients" and r.status.value == "failed")
    hint = failed.details["reproduce"]
    assert hint == ("layercheck.check_layer(layer, '4,8:BC', only=['gradients:float64'], seed=2, "
                    "tolerance={'needs_input_grad.float32': 0.01})")
    again: Report = eval(hint, {"layercheck": layercheck, "layer": layer})
    assert [(r.check, r.variant, r.status, r.message) for r in again.results if r.check == "gradients"] == [
        ("gradients", "float64", failed.status, failed.message)]


def test_a_class_checked_from_python_is_reproduced_on_the_command_line(buggy: Path) -> None:
    from layercheck.target.loading import resolve

    cls = resolve("my layers/buggy.py:Scaled", base_dir=Path.cwd())
    report = layercheck.check_layer(cls, "4,8:BC", args=[2.0])
    failed = next(r for r in report.results if r.check == "gradients" and r.status.value == "failed")
    command = failed.details["reproduce"]
    assert command.startswith("layercheck run 'my layers/buggy.py:Scaled' --layout 4,8:BC --arg 2.0 --check")
    assert _failure(_rerun(command), "gradients")["message"] == failed.message


def test_the_readme_tolerance_example_reads_1e_5_as_a_number() -> None:
    result = runner.invoke(app, ["run", str(ROOT / "specs/srelu.yaml"), "--tolerance", "float64=1e-5",
                                 "--check", "gradients:float64", "--format", "json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)["runs"][0]["results"]
    assert [r["details"]["tolerance"] for r in found if r["check"] == "gradients"] == [1e-5]


def test_a_spec_tolerance_written_without_a_dot_is_a_number(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "t.yaml", str(ROOT / "layers/prelu.py"), "4,3:BC")
    spec.write_text(spec.read_text() + "tolerance: {float64: 1e-5, needs_input_grad.float32: 2e-3}\n")
    report = _run(str(spec), "--check", "gradients:float64", "--check", "needs_input_grad")
    tolerances = {r["check"]: r["details"].get("tolerance") for r in report["runs"][0]["results"]}
    assert tolerances["gradients"] == 1e-5


class MixesBatch(nn.Module):
    """A real bug: in predict, each observation is normalised by the whole batch's mean."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return x - x.mean(dim=1, keepdim=True)
        return x - x.mean(dim=(0, 1), keepdim=True)


def test_loosening_one_check_cannot_silence_another() -> None:
    loose = layercheck.check_layer(MixesBatch(), "4,6:BC", only=["observations"], tolerance={"float32": 0.5})
    assert [r.status.value for r in loose.results if r.check == "observations"] == ["failed"]
    silenced = layercheck.check_layer(MixesBatch(), "4,6:BC", only=["observations"],
                                      tolerance={"observations.float32": 100.0})
    assert [r.status.value for r in silenced.results if r.check == "observations"] == ["passed"]


@pytest.mark.parametrize(
    ("tolerance", "message"),
    [
        ("nosuch.float32=1", "unknown check id 'nosuch'"),
        ("observations.float8=1", "unknown dtype"),
        ("signatures.float32=1", "check 'signatures' has no float32 tolerance; its tolerances: none"),
        ("gradients.float32=-1", "expected a positive number"),
        ("gradients.float32=much", "expected a positive number"),
    ],
)
def test_a_tolerance_no_check_declares_is_a_usage_error(tolerance: str, message: str) -> None:
    result = runner.invoke(app, ["run", str(ROOT / "layers/prelu.py"), "--layout", "4,3:BC", "--tolerance", tolerance])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Traceback" not in result.output


def test_the_catalogue_lists_a_checks_tolerances() -> None:
    result = runner.invoke(app, ["checks", "needs_input_grad"])
    assert result.exit_code == 0
    assert "needs_input_grad.float32 = 0.001" in result.stdout


def test_every_check_uses_only_tolerances_it_declares() -> None:
    """No hard-coded tolerance a user cannot reach: a check that asks for an undeclared one ends in
    an error (ctx.tolerance raises CheckError), which the zoo would show; here the declarations
    themselves are checked to cover what the README promises."""
    from layercheck.parent.registry import catalogue

    declared = {info.id: {t.dtype for t in info.tolerances} for info in catalogue()}
    for check in ("gradients", "needs_input_grad", "noncontiguous", "device", "observations", "state_dict",
                  "reset_state", "forward_predict_agree", "export", "compile", "gradgrad", "forward_ad"):
        assert "float32" in declared[check] or "float64" in declared[check], check


# -- a third-party check, installed as a package -------------------------------------------------


def _readme_block(heading: str) -> str:
    """The first ```python block after ``heading`` in the docs' how-to on checks and reporters."""
    text = (ROOT / "docs" / "howto" / "extending.md").read_text()
    start = text.index(heading)
    match = re.search(r"```python\n(.*?)```", text[start:], re.S)
    assert match is not None, f"no python block after {heading!r}"
    return match.group(1)


def _layercheck(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "layercheck", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)


@pytest.mark.slow
def test_the_readme_walk_through_adds_a_check_from_its_own_package(tmp_path: Path) -> None:
    code = _readme_block("# Writing a check or a reporter")
    assert "from layercheck.sdk import" in code
    imports = {line.split()[1] for line in code.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "layercheck.sdk", "torch"}, imports
    install_package(tmp_path, "bounded_outputs", code, "layercheck.checks")

    listed = _layercheck(tmp_path, "checks", "bounded_outputs")
    assert listed.returncode == 0, listed.stderr
    assert "bounded_outputs.float32 = 100" in listed.stdout

    passed = _layercheck(tmp_path, "run", "layers/prelu.py", "--layout", "2,3,4:BCS", "--enable", "bounded_outputs",
                         "--format", "json")
    assert passed.returncode == 0, passed.stderr
    results = {r["check"]: r for r in json.loads(passed.stdout)["runs"][0]["results"]}
    assert results["bounded_outputs"]["status"] == "passed"

    strict = _layercheck(tmp_path, "run", "layers/prelu.py", "--layout", "2,3,4:BCS", "--check", "bounded_outputs",
                         "--tolerance", "bounded_outputs.float32=0.01", "--format", "json",
                         "--no-store")  # run in the checkout: its failure is not kept there
    assert strict.returncode == 1, strict.stderr
    failed = {r["check"]: r for r in json.loads(strict.stdout)["runs"][0]["results"]}["bounded_outputs"]
    assert failed["status"] == "failed" and "0.01" in failed["message"]
    # a plug-in's failure ends with its own docstring's fix, as a built-in check's does
    assert failed["message"].endswith(". Fix: normalise, or bound what you exponentiate (more: layercheck checks "
                                      "bounded_outputs).")
    assert "--tolerance bounded_outputs.float32=0.01" in failed["details"]["reproduce"]


def test_a_check_that_reads_a_shared_run_it_did_not_declare_is_an_error_not_a_verdict() -> None:
    from layercheck.engine.runner import run_target
    from layercheck.parent.registry import CheckInfo, Planned
    from layercheck.sdk import Context, reference_predict
    from layercheck.target.subject import Target

    def sloppy(ctx: Context) -> None:
        reference_predict(ctx)

    info = CheckInfo(id="sloppy", title="sloppy", func=sloppy)
    run = run_target(Target(nn.Tanh(), [layercheck.Layout.parse("2,3:BC")]), [Planned(info, ("",))])
    assert run.results[0].status.value == "error"
    assert "without declaring it" in run.results[0].message


def test_the_sdk_is_the_one_import_of_every_built_in_check() -> None:
    """A built-in check takes what it shares with others from layercheck.sdk (the stable names)
    and layercheck._sdk_internal (the rest), never an internal name from layercheck.sdk."""
    from layercheck import sdk

    for path in sorted((ROOT / "layercheck" / "checks").glob("*.py")):
        text = textwrap.dedent(path.read_text())
        private = re.findall(r"^from layercheck\.(runner|runs|compare|context|errors)\b", text, re.M)
        assert not private, f"{path.name} imports layercheck.{private[0]} instead of layercheck.sdk"
    for path in sorted((ROOT / "layercheck").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "layercheck.sdk":
                unstable = {alias.name for alias in node.names} - sdk.STABLE
                assert not unstable, f"{path.name} imports {', '.join(sorted(unstable))} from layercheck.sdk"


def test_the_sdk_exports_the_stable_names_and_hands_out_the_internal_ones_with_a_warning() -> None:
    from layercheck import _sdk_internal, sdk

    assert set(sdk.__all__) == sdk.STABLE and not set(_sdk_internal.__all__) & sdk.STABLE
    namespace: dict = {}
    exec("from layercheck.sdk import *", namespace)
    assert set(namespace) - {"__builtins__"} == sdk.STABLE
    # a plug-in written against what layercheck.sdk exported before keeps working for a release, warned
    with pytest.warns(DeprecationWarning, match=r"^layercheck\.sdk\.ratio is internal, not part of the stable SDK "
                                                 r".* It lives in layercheck\._sdk_internal"):
        exec("from layercheck.sdk import ratio", namespace)
    assert namespace["ratio"] is _sdk_internal.ratio
    with pytest.raises(ImportError, match="nosuch"):
        exec("from layercheck.sdk import nosuch", namespace)


def _checks_imported(path: Path) -> set[str]:
    """The modules under ``layercheck/checks/`` that ``path`` (one of them) imports, anywhere in
    it: at module level or inside a function, absolutely or relatively."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = {0: "", 1: "layercheck.checks", 2: "layercheck"}.get(node.level, "")
            module = ".".join(part for part in (base, node.module or "") if part)
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    package = ROOT / "layercheck" / "checks"
    checks = {f"layercheck.checks.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    return {c for c in checks if any(name == c or name.startswith(f"{c}.") for name in found)}


def test_no_built_in_check_imports_another() -> None:
    """What two checks share lives in the SDK or in layercheck/numerics/, never in one of them."""
    for path in sorted((ROOT / "layercheck" / "checks").glob("*.py")):
        imported = _checks_imported(path)
        assert not imported, f"checks/{path.name} imports {', '.join(sorted(imported))}"


def test_the_stable_sdk_is_listed_in_the_docs_and_every_documented_example_keeps_to_it(root: Path) -> None:
    from layercheck import sdk

    assert set(sdk.__all__) == sdk.STABLE
    text = (root / "docs" / "howto" / "extending.md").read_text()
    table = text.split("<!-- sdk-stable:", 1)[1].split("\n\n", 1)[0]
    assert set(re.findall(r"`([A-Za-z_]+)`", table.split("\n", 1)[1])) == sdk.STABLE
    # what the docs teach a plug-in author to import is stable
    for imported in re.findall(r"^from layercheck\.sdk import (.+)$", text, flags=re.M):
        assert {name.strip() for name in imported.split(",")} <= sdk.STABLE, imported

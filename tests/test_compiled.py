"""The opt-in export and compile checks as a user sees them: what passes, what a failure
says (torch's long errors condensed to the layer's line), when they are skipped, and that
they stay isolated and quiet. tests/test_zoo.py judges the export_*, compile_* and
good_compiled_* zoo layers against the whole suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.engine.runner import run_target
from layercheck.parent.layout import Layout
from layercheck.parent.registry import get, select
from layercheck.parent.result import CheckResult, RunReport
from layercheck.target.subject import Target

from conftest import ROOT, run_zoo, write_spec

LAYERS = ROOT / "layers"
_is_compiling = getattr(torch.compiler, "is_compiling", None) or torch._dynamo.is_compiling


def run(layer: type, *layouts: str, checks: tuple[str, ...]) -> RunReport:
    return run_target(Target(layer, [Layout.parse(text) for text in layouts], name="test-layer"),
                      select(only=checks))


def result(report: RunReport, check: str) -> CheckResult:
    found = [r for r in report.results if r.check == check]
    assert found, f"no {check} in {[r.check for r in report.results]}"
    return found[0]


def cli_json(*args: str) -> dict[str, Any]:
    outcome = CliRunner().invoke(app, ["run", *args, "--format", "json"])
    assert outcome.exit_code in (0, 1), outcome.output
    return json.loads(outcome.stdout)


# -- catalogue ----------------------------------------------------------------------------------


def test_export_and_compile_are_opt_in_and_name_their_matlab_counterparts() -> None:
    assert not get("export").default and not get("compile").default
    default = {p.info.id for p in select()}
    assert not default & {"export", "compile"}
    assert {p.info.id for p in select(enable=("export", "compile"))} >= {"export", "compile"}
    assert get("compile").matlab == "Acceleratable"
    assert "code generation" in get("export").matlab
    outcome = CliRunner().invoke(app, ["checks"])
    assert outcome.exit_code == 0
    assert "export" in outcome.stdout and "compile" in outcome.stdout


# -- the bundled layers pass both ---------------------------------------------------------------


@pytest.mark.slow
def test_bundled_srelu_module_and_operation_export_and_compile(tmp_path: Path) -> None:
    """SReLU's forward calls an autograd.Function with a hand-written backward: non-strict
    export traces through its forward; TorchDynamo runs it in eager behind one graph break,
    because it defines a jvp (for forward mode), which dynamo does not trace in torch 2.13 (torch
    2.11 gives the operation called directly another reason: its setup_context)."""
    small = "4,3,5:BCU"
    module = write_spec(tmp_path, "srelu.yaml", f"{LAYERS / 'srelu.py'}:SReLU", small)
    operation = write_spec(tmp_path, "function.yaml", f"{LAYERS / 'srelu_function.py'}:SReLUFunction",
                           small, *["1,3,1:UCU"] * 4)
    report = cli_json(str(module), str(operation), "--check", "export", "--check", "compile")
    for entry in report["runs"]:
        results = {r["check"]: r for r in entry["results"]}
        assert results["export"]["status"] == "passed", results["export"]
        assert "non-strict" in results["export"]["message"]
        assert results["compile"]["status"] == "passed", results["compile"]
        assert sum(results["compile"]["details"]["graph_breaks"].values()) == 1
        # x and the four parameters (module) or the four parameter inputs (operation)
        assert "5 gradient(s)" in results["compile"]["message"]
    assert [entry["kind"] for entry in report["runs"]] == ["module", "function"]


# -- export -------------------------------------------------------------------------------------


def test_export_failure_is_condensed_to_torchs_reason_and_the_layers_line(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_zoo("export_data_dependent", only=("export",))
    found = result(report, "export")
    assert found.status.value == "failed"
    assert "export_data_dependent.py:18 in forward" in found.message
    assert "if peak > 1e4" in found.message
    assert "data-dependent" in found.message and "torch.where" in found.message
    assert "\n" not in found.message and len(found.message) < 700
    assert "data-dependent" in found.details["error"]  # torch's full text is kept in the details
    assert "--check export" in found.details["reproduce"]
    printed = capsys.readouterr()
    assert "def forward" not in printed.out + printed.err  # torch prints the partial graph; the check keeps it


def test_export_captures_predict_when_the_layer_defines_it() -> None:
    """The exported program must be predict's, not forward's: they differ here on purpose."""

    class HalvedPredict(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(x)

        def predict(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(x) * 0.5

    found = result(run(HalvedPredict, "4,3,5:BCU", checks=("export",)), "export")
    assert found.status.value == "passed", found.message


def test_exported_program_that_differs_from_eager_names_the_tensor_and_both_values() -> None:
    """A layer that branches on torch.is_grad_enabled() is captured as predict runs (no grad);
    one that branches on is_compiling() (True while exporting) is caught."""

    class CompileOnlyScale(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * (3.0 if _is_compiling() else 2.0)

    class GradModeBranch(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * (3.0 if torch.is_grad_enabled() else 2.0)

    found = result(run(CompileOnlyScale, "4,3,5:BCU", checks=("export",)), "export")
    assert found.status.value == "failed"
    assert found.message.startswith("the exported program vs eager predict: output 0 differs at index")
    assert "exported" in found.message and "eager" in found.message and "elements differ by more than" in found.message
    assert found.details["allowance"].startswith("rtol=")
    assert found.details["actual"] == pytest.approx(1.5 * found.details["expected"])
    assert result(run(GradModeBranch, "4,3,5:BCU", checks=("export",)), "export").status.value == "passed"


def test_export_of_a_state_that_changes_size_says_so() -> None:
    found = result(run_zoo("good_contract_recurrent", only=("export",)), "export")
    assert found.status.value == "failed"
    assert "changes the size of state 'h' from (1, 6) to (3, 6)" in found.message


def test_export_is_skipped_where_torch_has_no_export(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.export

    monkeypatch.delattr(torch.export, "export")
    found = result(run(nn.Tanh, "4,3,5:BCU", checks=("export",)), "export")
    assert found.status.value == "skipped"
    assert "no torch.export.export" in found.message


# -- compile ------------------------------------------------------------------------------------


@pytest.mark.slow  # about 20 s: torch.compile compiles the zoo layer's fast path afresh
def test_compiled_values_that_differ_from_eager_fail_with_both_values() -> None:
    found = result(run_zoo("compile_fast_path", only=("compile",)), "compile")
    assert found.status.value == "failed"
    assert found.message.startswith("compiled predict vs eager: output 0 differs at index")
    assert "compiled " in found.message and "eager " in found.message
    assert "elements differ by more than 0.0001 of their size" in found.message
    assert abs(found.details["actual"] - found.details["expected"]) > found.details["atol"]


def test_compile_error_in_the_layer_fails_with_the_layers_line() -> None:
    class ReshapesWrongWhenCompiled(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if _is_compiling():
                return x.view(-1, 7)
            return x * 2

    found = result(run(ReshapesWrongWhenCompiled, "4,3,5:BCU", checks=("compile",)), "compile")
    assert found.status.value == "failed"
    assert found.message.startswith("under torch.compile, predict raised (eager runs) at ")
    assert f"{Path(__file__).name}:" in found.message and "x.view(-1, 7)" in found.message
    assert "is invalid for input of size 60" in found.message
    assert "Traceback" in found.details["traceback"]


def test_dropout_compares_sizes_only_and_says_why() -> None:
    found = result(run(nn.Dropout, "4,3,5:BCU", checks=("compile",)), "compile")
    assert found.status.value == "passed", found.message
    assert "forward draws random numbers" in found.message and "sizes and dtypes" in found.message
    assert found.details["random"] == ["forward"]


def test_graph_breaks_are_reported_per_check_not_accumulated() -> None:
    """TorchDynamo's counters are process-wide; a second identical run must report the same
    breaks (one per mode), and the caches are emptied between runs."""

    class ScalesByItsPeak(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x / float(x.detach().abs().max())

    first, second = (result(run(ScalesByItsPeak, "4,3,5:BCU", checks=("compile",)), "compile") for _ in range(2))
    for found in (first, second):
        assert found.status.value == "passed", found.message
        assert sum(found.details["graph_breaks"].values()) == 2
        # dynamo's words for the break: "item()" in torch 2.13, "Tensor.item" in 2.6
        assert "2 graph break(s)" in found.message and "item" in found.message.split("run in eager:")[1]


def test_compile_without_a_cpp_compiler_is_skipped() -> None:
    import torch._inductor.config as inductor

    class Shifted(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sin(x) * 3.25 + 0.125

    # torch's own patch(), not monkeypatch: pytest 9.2 undoes a setattr on this config proxy
    # by deleting the key, which breaks inductor for every later test
    with inductor.patch({"cpp.cxx": (None, "/nonexistent/layercheck-g++")}):
        found = result(run(Shifted, "4,3,5:BCU", checks=("compile",)), "compile")
    assert found.status.value == "skipped"
    assert "C++ compiler" in found.message


def test_compile_is_skipped_where_torch_has_no_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch, "compile")
    found = result(run(nn.Tanh, "4,3,5:BCU", checks=("compile",)), "compile")
    assert found.status.value == "skipped"
    assert "no torch.compile" in found.message


def test_a_crash_inside_torchs_compiler_is_an_error_not_the_layers_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.compile_fx
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    # inductor fails in code it generated (as it did here with a corrupted config): no frame
    # of the layer is involved, so the layer must not be blamed
    namespace: dict[str, Any] = {}
    exec(compile("def backend(*args, **kwargs):\n    raise AttributeError('torch._inductor.config.cpp.cxx "
                 "does not exist')\n", str(Path(cache_dir()) / "generated.py"), "exec"), namespace)
    monkeypatch.setattr(torch._inductor.compile_fx, "compile_fx", namespace["backend"])

    class Shifted(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sin(x) * 3.25 + 0.125

    found = result(run(Shifted, "4,3,5:BCU", checks=("compile",)), "compile")
    assert found.status.value == "error", found.message
    assert "inside torch, at no line of the layer" in found.message

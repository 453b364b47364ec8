"""--on DEVICE (spec key on:): every check with the layer and its inputs on one device, for
layers that only run on a GPU. On a machine without CUDA the CUDA tests skip; what can be
checked here is that --on cpu changes no verdict, that the option and the key are validated
and carried into reproduce commands, and that a GPU-only layer run on the CPU is told about
--on. tests/gpu/ holds the Triton layers (each correct one beside its buggy twin) the CUDA tests
check; tests/test_triton.py checks them on CPU tensors under Triton's interpreter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

import layercheck
from layercheck.cli.commands import app
from layercheck.parent.result import Status
from layercheck.target.loading import resolve
from layercheck.target.subject import Target

from conftest import ROOT

runner = CliRunner()
GPU = ROOT / "tests" / "gpu"
SRELU = str(ROOT / "layers" / "srelu.py") + ":SReLU"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _triton_present() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


needs_triton = pytest.mark.skipif(not (torch.cuda.is_available() and _triton_present()),
                                  reason="needs a CUDA device and Triton")


def statuses(report: layercheck.Report) -> list[tuple[str, str, str]]:
    return [(r.check, r.variant, r.status.value) for r in report.results]


def test_on_cpu_gives_the_verdicts_of_a_plain_run_and_is_in_the_reproduce_command(tmp_path: Path) -> None:
    plain = layercheck.check_layer(resolve(SRELU, base_dir=ROOT), "3,4,2,5:SSCB", seed=1)
    on_cpu = layercheck.check_layer(resolve(SRELU, base_dir=ROOT), "3,4,2,5:SSCB", seed=1, on="cpu")
    assert statuses(plain) == statuses(on_cpu)
    out = tmp_path / "report.json"
    done = runner.invoke(app, ["run", str(ROOT / "tests" / "zoo" / "gradients_wrong_sign.py") + ":AffineLayer",
                               "--layout", "5,4:BC", "--check", "gradients", "--on", "cpu", "--output", str(out)])
    assert done.exit_code == 1, done.output
    failed = [r for r in json.loads(out.read_text())["runs"][0]["results"] if r["status"] == "failed"]
    assert failed and all(r["details"]["reproduce"].endswith("--on cpu") for r in failed)


def test_a_spec_says_on_and_the_command_line_overrides_it(tmp_path: Path) -> None:
    spec = tmp_path / "srelu.yaml"
    spec.write_text(yaml.safe_dump({"layer": SRELU, "inputs": [{"layout": "3,4,2,5:SSCB"}], "on": "cpu"}))
    done = runner.invoke(app, ["run", str(spec), "--check", "forward_runs", "--format", "json"])
    assert done.exit_code == 0, done.output
    spec.write_text(yaml.safe_dump({"layer": SRELU, "inputs": [{"layout": "3,4,2,5:SSCB"}], "on": "cuda:7"}))
    done = runner.invoke(app, ["run", str(spec), "--check", "forward_runs"])
    if torch.cuda.device_count() < 8:
        assert done.exit_code == 2
        assert "on: cuda:7: not present on this machine" in done.output
    done = runner.invoke(app, ["run", str(spec), "--check", "forward_runs", "--on", "cpu"])
    assert done.exit_code == 0, done.output


@pytest.mark.parametrize(("value", "message"), [
    ("gpu", "--on: 'gpu' is not a device torch knows"),
    ("cuda:99", "--on cuda:99: not present on this machine"),
])
def test_a_bad_or_absent_device_exits_2_with_one_line(value: str, message: str) -> None:
    done = runner.invoke(app, ["run", SRELU, "--layout", "3,4,2,5:SSCB", "--on", value])
    assert done.exit_code == 2
    assert message in done.output and "Traceback" not in done.output


def test_a_spec_written_by_hand_says_on_as_a_bare_key(tmp_path: Path) -> None:
    """YAML 1.1 reads a bare `on:` key as the boolean true; the spec still means the device."""
    spec = tmp_path / "srelu.yaml"
    spec.write_text(f"layer: {SRELU}\ninputs:\n  - layout: 3,4,2,5:SSCB\non: cpu\n")
    done = runner.invoke(app, ["run", str(spec), "--check", "forward_runs"])
    assert done.exit_code == 0, done.output
    spec.write_text(f"layer: {SRELU}\ninputs:\n  - layout: 3,4,2,5:SSCB\non: cuda:7\n")
    if torch.cuda.device_count() < 8:
        done = runner.invoke(app, ["run", str(spec), "--check", "forward_runs"])
        assert done.exit_code == 2 and "on: cuda:7: not present on this machine" in done.output, done.output


def test_a_bad_on_in_a_spec_names_the_file(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump({"layer": SRELU, "inputs": [{"layout": "3,4:BC"}], "on": "gpu"}))
    done = runner.invoke(app, ["run", str(spec)])
    assert done.exit_code == 2
    assert f"{spec}: on: 'gpu' is not a device torch knows" in done.output


class _NeedsCuda(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.cuda()).to(x.device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the layer runs where CUDA is present")
def test_a_layer_that_needs_a_gpu_is_told_about_on_when_it_fails_on_the_cpu() -> None:
    report = layercheck.check_layer(_NeedsCuda, "4,3:BC", checks=["forward_runs"])
    (result,) = [r for r in report.results if r.check == "forward_runs"]
    assert result.status is Status.FAILED
    assert "seems to run only on a GPU" in result.message and "--on cuda" in result.message


def test_a_layer_that_fails_on_the_cpu_for_another_reason_gets_no_gpu_hint() -> None:
    class Broken(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("wrong number of channels")

    report = layercheck.check_layer(Broken, "4,3:BC", checks=["forward_runs"])
    (result,) = [r for r in report.results if r.check == "forward_runs"]
    assert result.status is Status.FAILED and "--on" not in result.message


@needs_cuda
def test_on_cuda_runs_every_check_there_and_the_bundled_layers_pass() -> None:
    for reference in (SRELU, str(ROOT / "layers" / "prelu.py") + ":PReLU"):
        report = layercheck.check_layer(resolve(reference, base_dir=ROOT), "3,4,2,5:SSCB", on="cuda")
        failed = [(r.check, r.variant, r.message) for r in report.results if r.status in (Status.FAILED, Status.ERROR)]
        assert not failed, failed
        (device,) = [r for r in report.results if r.check == "device"]
        assert device.status is Status.PASSED and "(--on)" in device.message


@needs_triton
def test_a_triton_layer_passes_on_cuda_and_its_buggy_twin_fails_gradients() -> None:
    good = layercheck.check_layer(resolve(str(GPU / "triton_leaky.py") + ":LAYER", base_dir=ROOT), "8,6,16:BCT",
                                  on="cuda")
    failed = [(r.check, r.variant, r.message) for r in good.results if r.status in (Status.FAILED, Status.ERROR)]
    assert not failed, failed
    (device,) = [r for r in good.results if r.check == "device"]
    assert device.status is Status.SKIPPED and "does not run on the CPU" in device.message
    bad = layercheck.check_layer(resolve(str(GPU / "triton_leaky_bug.py") + ":LAYER", base_dir=ROOT), "8,6,16:BCT",
                                 on="cuda")
    failed_checks = {r.check for r in bad.results if r.status is Status.FAILED}
    assert "gradients" in failed_checks, statuses(bad)
    on_cpu = layercheck.check_layer(resolve(str(GPU / "triton_leaky.py") + ":LAYER", base_dir=ROOT), "8,6,16:BCT",
                                    checks=["forward_runs"])
    (result,) = [r for r in on_cpu.results if r.check == "forward_runs"]
    assert result.status is Status.FAILED and "--on cuda" in result.message


@needs_triton
@pytest.mark.parametrize(("name", "layout", "wrong"), [
    ("triton_rmsnorm", "4,8,32:BTC", ["parameter 'weight'"]),
    ("triton_gated_mlp", "4,8,16:BTC", ["input 0", "parameter 'gate'"]),
])
def test_the_other_triton_layers_pass_compiled_on_cuda_and_their_twins_fail_gradients(name: str, layout: str,
                                                                                      wrong: list[str]) -> None:
    """tests/test_triton.py runs them interpreted on CPU tensors; here Triton compiles them."""
    good = layercheck.check_layer(resolve(str(GPU / f"{name}.py") + ":LAYER", base_dir=ROOT), layout, on="cuda")
    failed = [(r.check, r.variant, r.message) for r in good.results if r.status in (Status.FAILED, Status.ERROR)]
    assert not failed, failed
    bad = layercheck.check_layer(resolve(str(GPU / f"{name}_bug.py") + ":LAYER", base_dir=ROOT), layout, on="cuda")
    failed_checks = {(r.check, r.variant) for r in bad.results if r.status in (Status.FAILED, Status.ERROR)}
    assert failed_checks == {("gradients", "float64")}, statuses(bad)
    (gradients,) = [r for r in bad.results if r.check == "gradients" and r.variant == "float64"]
    assert [w["tensor"] for w in gradients.details["wrong"]] == wrong


def test_parameters_initialize_creates_on_the_cpu_are_moved_where_the_checks_run() -> None:
    """The bundled SReLU creates its parameters in initialize with torch.full (no device=): the
    layer is moved to --on's device before initialize (a lazy first call runs there) and again
    after it, as a user's .to() after building the layer. "meta" stands in for a GPU here."""
    target = Target(resolve(SRELU, base_dir=ROOT), [layercheck.Layout.parse("3,4,2,5:SSCB")], on="meta")
    for layer in (target.pristine(), target.build(dtype=torch.float64).module):
        assert layer is not None
        assert {p.device.type for p in layer.parameters()} == {"meta"}

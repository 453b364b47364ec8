"""The gradient checks as a user meets them: backward_runs, backward_size, gradients and
needs_input_grad on the bundled layers, on broken layers, through the command line and in
the JSON report."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from layercheck import check_layer
from layercheck.cli.commands import app
from layercheck.engine.runner import Options, run_target
from layercheck.parent.errors import CheckFailed
from layercheck.parent.layout import Layout
from layercheck.parent.registry import select
from layercheck.parent.result import RunReport
from layercheck.support import calibration
from layercheck.support.compare import Allowance, assert_close
from layercheck.target.loading import resolve
from layercheck.target.subject import Target

from conftest import ROOT, load_zoo, run_zoo, write_spec

GRADIENT_CHECKS = ("backward_runs", "backward_size", "gradients", "needs_input_grad")
runner = CliRunner()


def run(layer: type, *layouts: str, seed: int = 0, only: tuple[str, ...] = GRADIENT_CHECKS,
        tolerance: dict[str, float] | None = None) -> RunReport:
    target = Target(layer, [Layout.parse(text) for text in layouts], seed=seed)
    return run_target(target, select(only=only), options=Options(seed=seed, tolerance=tolerance or {}))


def results(report: RunReport) -> dict[str, tuple[str, str, dict]]:
    """'check[variant]' -> (status, message, details)."""
    return {f"{r.check}[{r.variant}]" if r.variant else r.check: (r.status.value, r.message, r.details)
            for r in report.results}


def bundled(name: str) -> type:
    return resolve(f"layers/{name}.py", base_dir=ROOT)


@pytest.mark.parametrize(("name", "layouts"), [
    ("prelu", ["4,5,3,2:SSCB"]),
    ("srelu", ["4,5,3,2:SSCB"]),
    ("srelu", ["2,3,4,4:BCSS"]),
    ("srelu_function", ["4,5,3,2:SSCB", "1,1,3,1:UUCU", "1,1,3,1:UUCU", "1,1,3,1:UUCU", "1,1,3,1:UUCU"]),
])
def test_bundled_layers_pass_every_gradient_check(name: str, layouts: list[str]) -> None:
    found = results(run(bundled(name), *layouts))
    for key in ("backward_runs", "backward_size", "gradients[float64]", "gradients[float32]", "needs_input_grad"):
        assert found[key][0] == "passed", (key, found[key][1])
    assert "agree with float64 finite differences" in found["gradients[float64]"][1]
    assert "returned" in found["backward_size"][1] and "before autograd" in found["backward_size"][1]


@pytest.mark.slow
def test_full_size_srelu_passes_and_a_bug_on_under_one_percent_is_caught() -> None:
    """The bundled SReLU at MATLAB's 24,24,20,128 (1.5 million elements), then the same layer
    with a backward wrong only where x > 2.5 (0.6% of the elements)."""
    full = "24,24,20,128:SSCB"
    found = results(run(bundled("srelu"), full))
    assert all(status == "passed" for status, _, _ in found.values()), found
    # the checks whose verdict does not depend on the batch size ran on five of its observations
    assert found["needs_input_grad"][1].endswith("(on 5 of the batch's 128 observations)")
    assert found["needs_input_grad"][2]["sample"] == {"observations": 5, "batch": 128}
    assert "sample" not in found["gradients[float64]"][2]
    found = results(run(load_zoo("gradients_region_bug").LAYER, full, only=("gradients",)))
    status, message, details = found["gradients[float64]"]
    assert status == "failed"
    assert message.count("wrong gradient of input 0") == 1 and "values in [" in message
    assert details["evaluations"] < 80  # the diagnosis stays O(1) in the input size


def test_failure_report_names_tensor_numbers_tolerance_and_reproduce_command(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    layer = str(ROOT / "tests/zoo/gradients_wrong_sign.py") + ":AffineLayer"
    result = runner.invoke(app, ["run", layer, "--layout", "5,4:BC",
                                 "--check", "gradients", "--seed", "3", "--format", "json", "--output", str(out)])
    assert result.exit_code == 1, result.output
    report = json.loads(out.read_text())
    entry = next(r for r in report["runs"][0]["results"] if r["check"] == "gradients" and r["variant"] == "float64")
    assert entry["status"] == "failed"
    message, details = entry["message"], entry["details"]
    assert message.startswith("in Affine.backward (tests/zoo/gradients_wrong_sign.py:18): wrong gradient of parameter "
                              "'shift': the gradient is −1 × what finite differences give, over all 4 elements")
    assert "agree: input 0, parameter 'scale'" in message
    assert "tolerance 1e-06" in message
    (wrong,) = details["wrong"]
    assert wrong["tensor"] == "parameter 'shift'"
    for element in wrong["elements"]:  # the sign is flipped: analytic = -numeric, element by element
        assert element["analytic"] == pytest.approx(-element["numeric"], rel=1e-4)
    assert details["reproduce"].endswith("--check gradients:float64 --seed 3")


def test_swapped_parameter_gradients_name_both_tensors() -> None:
    found = results(run_zoo("gradients_swapped_outputs", only=("gradients",)))
    status, _message, details = found["gradients[float64]"]
    assert status == "failed"
    assert [w["tensor"] for w in details["wrong"]] == ["input 2", "input 3"]
    assert details["agree"] == ["input 0", "input 1", "input 4"]


def test_a_dropped_output_gradient_names_the_output() -> None:
    _, message, details = results(run_zoo("gradients_dropped_output", only=("gradients",)))["gradients[float64]"]
    assert details["wrong_outputs"] and details["wrong_outputs"][0].startswith("output 1:")
    assert "through output 1" in message


def test_a_gradient_the_precision_tracer_takes_away_is_still_judged() -> None:
    """An operator with a Python kernel and no backward gives its input no gradient under a
    dispatch mode, a gradient without one: the float64 run judged is the one without it, on
    the first draw (Note [a recorder that takes a gradient away])."""
    found = results(run_zoo("gradients_op_kernel_detach", only=("gradients",)))
    status, message, details = found["gradients[float64]"]
    assert status == "failed" and message.startswith("wrong gradient of input 0: the gradient is 0.3333 × what finite "
                                                     "differences give")
    assert "second draw" not in message and "left_out" not in details
    assert found["gradients[float32]"][0] == "skipped"  # one cause, reported by float64
    status, message, details = results(run_zoo("op_autograd_registration_missing", only=("gradients",)))[
        "gradients[float64]"]
    assert status == "passed" and message.startswith("input 0 and parameter 'w':") and "left_out" not in details


def test_tolerance_override_from_the_command_line_and_the_spec(tmp_path: Path) -> None:
    layer = str(ROOT / "tests/zoo/gradients_scaled.py") + ":HalfTanh"
    strict = runner.invoke(app, ["run", layer, "--layout", "4,6,5:BCU", "--check", "gradients", "-q"])
    assert strict.exit_code == 1
    # The bug doubles the gradient: a relative error near 1, which a tolerance of 10 allows.
    loose = runner.invoke(app, ["run", layer, "--layout", "4,6,5:BCU", "--check", "gradients", "-q",
                                "--tolerance", "float64=10", "--tolerance", "float32=10"])
    assert loose.exit_code == 0, loose.output
    spec = write_spec(tmp_path, "scaled.yaml", layer, "4,6,5:BCU", tolerance={"float64": 10.0, "float32": 10.0})
    assert runner.invoke(app, ["run", str(spec), "--check", "gradients", "-q"]).exit_code == 0


def test_gradients_float64_rests_on_one_direction_where_it_agrees_tightly() -> None:
    # Note [one direction that agrees tightly] in numerics/verdict.py: one direction's two
    # evaluations, where a wrong gradient takes both directions; and no evaluation at the point,
    # whose stability those two show (Note [stable at the base step] in numerics/engine.py)
    found = results(run(bundled("srelu"), "24,24,20,16:SSCB", only=("gradients",)))
    status, message, details = found["gradients[float64]"]
    assert status == "passed" and len(details["directions"]) == 1 and details["evaluations"] == 2
    assert details["directions"][0]["relative_error"] <= 1e-8
    assert "along one random direction" in message and "a second direction would judge nothing more" in message


class _CountsItsForwards(nn.Module):
    """Records the dtype of every training call on the layout's batch (a class attribute: every copy's)."""

    forwards: ClassVar[list[torch.dtype]] = []

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] == 6:
            type(self).forwards.append(x.dtype)
        return torch.tanh(x * self.scale)


@pytest.mark.parametrize("double", [False, True])
def test_backward_runs_takes_its_backward_from_forward_runs_call(double: bool) -> None:
    # Note [the training forward handed over] in numerics/recording.py: one training call of a
    # float32 layer between the two checks; a float64 layer's float32 run is a copy of its own
    _CountsItsForwards.forwards = []
    layer = _CountsItsForwards().double() if double else _CountsItsForwards
    found = results(run_target(Target(layer, [Layout.parse("6,3:BC")], name="counts"),
                               select(only=("forward_runs", "backward_runs"))))
    assert [found[key][0] for key in ("forward_runs", "backward_runs")] == ["passed"] * 2
    float32 = _CountsItsForwards.forwards.count(torch.float32)
    assert float32 == (2 if double else 1), _CountsItsForwards.forwards
    assert found["backward_runs"][1] == "gradients reach input 0 and parameter 'scale'"


def test_same_seed_same_result_other_seed_other_directions() -> None:
    def numbers(seed: int) -> list[float]:
        found = results(run(bundled("srelu"), "4,5,3,2:SSCB", seed=seed, only=("gradients",)))
        details = found["gradients[float64]"][2]
        return [d["numeric"] for d in details["directions"]]

    assert numbers(5) == numbers(5)
    assert numbers(5) != numbers(6)


def test_backward_size_judges_a_broadcast_shaped_gradient_as_autograd_does_and_puts_the_backward_back() -> None:
    module = load_zoo("good_grad_broadcast_shape")
    report = run(module.LAYER, *module.LAYOUTS)
    found = results(report)
    status, message, _ = found["backward_size"]
    assert status == "passed", message
    note = next(n for r in report.results if r.check == "backward_size" for n in r.notes)
    assert "ChannelScale.backward returns the gradient of its input 1 at size (4, 3, 5)" in note
    assert "57 element(s) (228 bytes) more than needed" in note
    # autograd summed the gradient to the parameter's size: the gradient checks run, and it is right
    assert found["gradients[float64]"][0] == "passed" and found["needs_input_grad"][0] == "passed"
    assert "backward" not in vars(module.ChannelScale) or not hasattr(module.ChannelScale.backward, "__wrapped__")
    assert module.ChannelScale.backward.__qualname__ == "ChannelScale.backward"  # the recorder restored it


def test_a_gradient_size_autograd_rejects_fails_backward_runs_naming_the_size() -> None:
    found = results(run_zoo("backward_runs_size_rejected", only=GRADIENT_CHECKS))
    status, message, details = found["backward_runs"]
    assert status == "failed" and "invalid gradient" in message
    assert "the cause: ChannelBias.backward (" in message  # with its file and line
    assert "backward_runs_size_rejected.py:19) returned a gradient of size (3, 5)" in message
    assert details["returned"][0]["expected_size"] == [1, 3, 1]
    assert found["backward_size"][0] == "skipped"


def test_backward_runs_names_the_tensor_without_gradient() -> None:
    status, message, details = results(run_zoo("backward_detached_parameter", only=("backward_runs",)))["backward_runs"]
    assert status == "failed"
    assert details["missing"] == ["parameter 'gain'"] and ".data" in message


def test_needs_input_grad_varies_each_operation_input_and_names_the_pattern() -> None:
    _, _, details = results(run_zoo("good_grad_function", only=("needs_input_grad",)))["needs_input_grad"]
    assert "with input 1 not requiring grad" in details["patterns"]
    assert "with only input 2 requiring grad" in details["patterns"]
    found = results(run_zoo("needs_input_grad_packed", only=("needs_input_grad",)))
    status, message, details = found["needs_input_grad"]
    assert status == "failed" and re.match(r"in FusedScaleShift\.backward \(\S*needs_input_grad_packed\.py:19\): with "
                                           r"input 0 not requiring grad, the gradient of input 1 differs", message)
    assert details["relative_difference"] > details["tolerance"]


def test_float32_variant_of_a_random_layer_is_skipped_with_the_reason() -> None:
    found = results(run_zoo("good_dropout_custom", only=("gradients",)))
    assert found["gradients[float64]"][0] == "passed"
    status, message, _ = found["gradients[float32]"]
    assert status == "skipped" and "random" in message


class _ActiveUnits(nn.Module):
    """The units of relu(x) + bias above zero: how many depends on the values. The bias starts
    at zero, so the units ReLU zeroes sit on the threshold and any step of the bias moves them
    across it."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x) + self.bias
        return y[y > 0]


def test_an_output_size_that_depends_on_the_values_skips_the_finite_difference_checks() -> None:
    found = results(run(_ActiveUnits, "4,5:BC", only=("gradients", "gradgrad", "forward_ad")))
    reason = ("the number or sizes of the floating outputs change when the inputs move by a relative 1e-8: "
              "finite differences do not apply to this layer")
    assert found["backward_size"][0] == "passed"
    for key in ("gradients[float64]", "gradients[float32]", "gradgrad", "forward_ad"):
        assert found[key][:2] == ("skipped", reason), key


def test_catalogue_lists_the_gradient_checks() -> None:
    result = runner.invoke(app, ["checks"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for check_id in GRADIENT_CHECKS:
        assert check_id in result.stdout
    assert "gradientsAreNumericallyCorrect" in result.stdout


BIAS_BEFORE_NORM = ("good_bias_before_batchnorm", "good_bias_before_batchnorm1d", "good_bias_before_instancenorm")
FLOAT32_COMPARISONS = ("gradients", "needs_input_grad", "noncontiguous", "observations", "state_dict")


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", BIAS_BEFORE_NORM)
def test_a_bias_before_a_normalisation_passes_on_every_seed_batch_and_thread_count(name: str, threads: int) -> None:
    module = load_zoo(name)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for batch in (2, 4, 8):
            layout = Layout.parse(module.LAYOUTS[0]).with_size("B", batch)
            for seed in range(6):
                report = run_target(Target(module.LAYER, [layout], seed=seed), select(only=FLOAT32_COMPARISONS),
                                    options=Options(seed=seed))
                bad = [f"{r.check}[{r.variant}]: {r.message}" for r in report.results if r.status.value != "passed"
                       and r.status.value != "skipped"]
                assert not bad, (name, threads, batch, seed, bad)
                notes = [n for r in report.results for n in r.notes]
                assert any("has no effect on the output" in n for n in notes), (name, batch, seed)
    finally:
        torch.set_num_threads(before)


class BiasedBranchesBeforeNorm(nn.Module):
    """MONAI's SimpleASPP: four biased convolutions concatenated, a 1x1 convolution and
    BatchNorm2d. Every bias is zero by cancellation, in tensors of two elements."""

    def __init__(self) -> None:
        super().__init__()
        dilated = [nn.Conv2d(4, 2, 3, padding=d, dilation=d) for d in (2, 4, 6)]
        self.convs = nn.ModuleList([nn.Conv2d(4, 2, 1), *dilated])
        self.mix = nn.Conv2d(8, 8, 1, bias=False)
        self.norm = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.leaky_relu(self.norm(self.mix(torch.cat([conv(x) for conv in self.convs], dim=1))))


@pytest.mark.parametrize("init", [0, 13, 14, 19, 20])
def test_biases_zero_by_cancellation_in_tiny_tensors_pass_the_float32_comparisons(init: int) -> None:
    """With two perturbed runs and an unscaled floor these initialisations failed grad_output
    (0, 14, 19: a combination of three backward passes) or noncontiguous (13, 20: a floor
    measured small by chance on two elements) (Note [rounding floor])."""
    torch.manual_seed(init)
    report = check_layer(BiasedBranchesBeforeNorm(), "2,4,8,8:BCSS", only=["grad_output", "noncontiguous"])
    bad = [f"{r.check}: {r.message}" for r in report.results if r.status.value in ("failed", "error")]
    assert not bad, bad


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_a_float32_island_passes_on_every_seed_size_and_thread_count(threads: int) -> None:
    module = load_zoo("good_float32_island_norm")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for layout in ("2,4,8,8:BCSS", "4,4,16,16:BCSS"):
            for seed in range(6):
                report = run_target(Target(module.LAYER, [Layout.parse(layout)], seed=seed),
                                    select(only=("gradients",)), options=Options(seed=seed))
                found = {r.variant: r for r in report.results if r.check == "gradients"}
                assert all(r.status.value == "passed" for r in found.values()), (layout, seed, found)
                assert "computes in float32 inside" in found["float64"].message
    finally:
        torch.set_num_threads(before)


def test_a_float32_island_with_a_wrong_backward_is_caught_at_float32_precision() -> None:
    found = results(run_zoo("gradients_float32_island_backward", only=("gradients",)))
    status, message, details = found["gradients[float64]"]
    assert status == "failed" and "input 0" in message
    assert details["precision"] == "float32" and details["step"] > 1e-3


class _RootOfScaled(nn.Module):
    """Correct: sqrt(w·x), NaN (value and gradients) wherever w·x < 0, as torch.sqrt is."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.w * x).sqrt()


class _NanWhenFrozenFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):  # type: ignore[no-untyped-def, override]
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def, override]
        x, w = ctx.saved_tensors
        # the bug: with w frozen, the gradient of x is built from a buffer left unfilled
        scale = w.expand_as(x) if ctx.needs_input_grad[1] else torch.full_like(x, float("nan"))
        return grad * scale, (grad * x).sum().reshape(w.shape) if ctx.needs_input_grad[1] else None


class _NanWhenFrozen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([1.5]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _NanWhenFrozenFunction.apply(x, self.w)


def test_needs_input_grad_leaves_nan_gradients_to_finite_but_catches_nan_from_freezing() -> None:
    """NaN gradients the layer gives with every tensor requiring grad are finite's finding, not
    a difference (module_db's MultiheadAttention with a fully masked query got a false alarm);
    a gradient that turns NaN only when another tensor is frozen is a bug."""
    found = results(run(_RootOfScaled, "4,3:BC", only=("finite", *GRADIENT_CHECKS)))
    assert found["finite"][0] == "failed"
    assert found["needs_input_grad"][0] == "passed", found["needs_input_grad"][1]
    found = results(run(_NanWhenFrozen, "4,3:BC"))
    status, message, details = found["needs_input_grad"]
    assert status == "failed" and "the gradient of input 0 differs" in message, message
    assert details["relative_difference"] == float("inf")



class Float32StatisticMax(nn.Module):
    """Correct, and built like timm's EvoNorm2dB0: a per-channel batch statistic computed in
    float32 (``x.float().var(...)``) inside the float64 copy, and an elementwise maximum, a kink
    on every element."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.v = nn.Parameter(torch.full((channels,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        std = x.float().var(dim=(0, 2, 3), unbiased=False).add(1e-5).sqrt().to(x.dtype).view(1, -1, 1, 1)
        return x / self.maximum(std.expand_as(x), x * self.v.view(1, -1, 1, 1) + 0.5)

    maximum = staticmethod(torch.maximum)


class _MaximumWrongOnTheRight(torch.autograd.Function):
    """max(a, b) whose backward scales the gradient of b by 1.5 where b wins."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return torch.maximum(a, b)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        right = b > a
        return torch.where(right, 0.0, grad), torch.where(right, 1.5 * grad, 0.0)


class Float32StatisticMaxWrong(Float32StatisticMax):
    maximum = staticmethod(_MaximumWrongOnTheRight.apply)


class _Float32StdWrong(torch.autograd.Function):
    """The per-channel batch standard deviation, computed in float32, whose backward is twice too large."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        low = x.float()
        mean = low.mean(dim=(0, 2, 3), keepdim=True)
        std = (low - mean).square().mean(dim=(0, 2, 3), keepdim=True).add(1e-5).sqrt()
        ctx.save_for_backward(low, mean, std)
        return std.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        low, mean, std = ctx.saved_tensors
        n = low.numel() / low.shape[1]
        return (2 * grad.float() * (low - mean) / (n * std)).to(grad.dtype)  # right: without the 2


class Float32StdWrongMax(Float32StatisticMax):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        std = _Float32StdWrong.apply(x)
        return x / torch.maximum(std.expand_as(x), x * self.v.view(1, -1, 1, 1) + 0.5)


def _gradient_results(layer: type, layout: str = "3,8,5,5:BCSS", *, seed: int = 0,
                      enable: tuple[str, ...] = ()) -> dict[tuple[str, str], Any]:
    """The gradient check's results and its prerequisites' (and those of the ``enable``d checks)."""
    wanted = ("signatures", "forward_runs", "backward_runs", "backward_size", "gradients", *enable)
    plan = [p for p in select(enable=enable) if p.info.id in wanted]
    report = run_target(Target(layer, [Layout.parse(layout)], name=layer.__name__, seed=seed), plan)
    return {(r.check, r.variant): r for r in report.results}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_float32_statistic_beside_a_kink_on_every_element_passes_the_gradient_check(seed: int) -> None:
    """Differenced at float32's step (4.9e-3 of each tensor's scale) its correct gradient
    disagreed by about 1% (the step crosses the maximum's kinks); with the layer's float32 cast
    kept in float64 it is differenced at the float64 step and agrees (Note [widened islands])."""
    found = _gradient_results(Float32StatisticMax, seed=seed)
    result = found[("gradients", "float64")]
    assert result.status.value == "passed", result.message
    assert result.details["step"] == 1e-8 and "kept in float64" in result.details["widened"]
    assert any("crosses kinks" in note for note in result.notes)
    assert found[("gradients", "float32")].status.value == "passed"


@pytest.mark.parametrize("layer", [Float32StatisticMaxWrong, Float32StdWrongMax])
def test_a_wrong_backward_beside_a_float32_island_is_still_caught(layer: type) -> None:
    """Widening clears only what the step did: a wrong factor in the maximum's backward, or in
    the backward of the float32 statistic itself, is wrong in float64 too."""
    result = _gradient_results(layer)[("gradients", "float64")]
    assert result.status.value == "failed", result.message
    assert "widened" not in result.details


class _Identity(torch.autograd.Function):
    factor = 1.0

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @classmethod
    def backward(cls, ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * cls.factor


class _WrongIdentity(_Identity):
    factor = 1.5


class RunningSumInDefaultDtype(nn.Module):
    """A sum accumulated into ``torch.zeros(shape)`` (the default dtype, float32 even for a
    float64 layer) and divided into its float64 twin, as lucidrains' cosine-similarity flash
    attention keeps its row sums: exactly 1, but in float64 its float32 rounding, scaled up,
    swamps the derivative at every usable step (Note [widened islands])."""

    identity: type[_Identity] = _Identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.exp(x).sum(dim=1, keepdim=True)
        running = torch.zeros(x.shape[0], 1, device=x.device)
        running += s
        return self.identity.apply(x) + 1e4 * (s / running - 1)


class RunningSumInDefaultDtypeWrong(RunningSumInDefaultDtype):
    identity = _WrongIdentity


def test_an_island_too_noisy_to_judge_is_judged_with_its_allocations_in_float64() -> None:
    """Without widening the differences give no verdict (the check was skipped, and the wrong
    twin went unseen); with the default-dtype allocation made in float64 they give one."""
    right = _gradient_results(RunningSumInDefaultDtype, "4,6:BC")[("gradients", "float64")]
    assert right.status.value == "passed", right.message
    assert "cannot judge its gradient" in right.details["widened"]
    wrong = _gradient_results(RunningSumInDefaultDtypeWrong, "4,6:BC")[("gradients", "float64")]
    assert wrong.status.value == "failed", wrong.message
    assert "input 0" in wrong.message and "kept in float64" in wrong.message


def test_higher_derivatives_skip_a_reference_taken_with_widened_casts() -> None:
    found = _gradient_results(Float32StatisticMax, enable=("gradgrad", "forward_ad"))
    higher = [r for (check, _), r in found.items() if check in ("gradgrad", "forward_ad")]
    assert len(higher) == 2
    for result in higher:
        assert result.status.value == "skipped" and "kept in float64" in result.message, result.message


class RoundStraightThrough(nn.Module):
    """A straight-through estimator: forward rounds to quarters, backward passes the gradient."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (torch.round(x * 4) / 4 - x).detach()


class LearnedStepQuantizer(nn.Module):
    """LSQ: the rounding is straight-through; the step's gradient flows through both paths."""

    def __init__(self) -> None:
        super().__init__()
        self.step = nn.Parameter(torch.tensor(0.3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = (x / self.step).clamp(-4, 3)
        return (v + (v.round() - v).detach()) * self.step


class HardGumbel(nn.Module):
    """torch's own hard Gumbel-softmax: ``y_hard - y_soft.detach() + y_soft``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gumbel_softmax(x, tau=0.7, hard=True, dim=-1) * torch.arange(6.0)


class GradientScaled(nn.Module):
    """LSQ's gradient scaling, without a rounding: the value of the weight, a quarter of its gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scaled = self.weight * 0.25
        return torch.tanh(x * ((self.weight - scaled).detach() + scaled))


@pytest.mark.parametrize("layer", [RoundStraightThrough, LearnedStepQuantizer, HardGumbel, GradientScaled])
def test_a_straight_through_estimator_passes_judged_with_its_detached_values_held(layer: type) -> None:
    """Finite differences of a piecewise-constant forward disagree with the straight-through
    gradient by design; with the values the layer detaches held at the point they agree
    (Note [straight-through estimators])."""
    found = _gradient_results(layer, "4,6:BC", enable=("gradgrad",))
    result = found[("gradients", "float64")]
    assert result.status.value == "passed", result.message
    assert "straight-through estimator" in result.details["straight_through"]
    assert any("held at the point" in note for note in result.notes)
    higher = found[("gradgrad", "")]
    assert higher.status.value == "skipped" and "straight-through" in higher.message, higher.message


class _SignStraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


class BinaryActivation(nn.Module):
    """A straight-through sign written as a Function: nothing detached to hold constant."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SignStraightThrough.apply(x)


class _Reverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return -grad


class GradientReversal(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Reverse.apply(x)


@pytest.mark.parametrize(("layer", "phrase"), [(GradientReversal, "gradient-reversal layer")])
def test_a_backward_that_is_not_the_derivative_by_design_fails_saying_how_to_skip(layer: type, phrase: str) -> None:
    """Such a backward is not the forward's derivative, so the check fails; the message names
    the design that would explain it and how to leave the check out for that layer."""
    result = _gradient_results(layer, "4,6:BC")[("gradients", "float64")]
    assert result.status.value == "failed"
    assert phrase in result.message and "--skip gradients" in result.message, result.message


class NormalisedUnderNoGrad(nn.Module):
    """x / |x| with the norm computed under no_grad, in both modes: a stop-gradient that eval mode
    does not explain (an ODE solver's step size is one by design; this one is a mistake)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            norm = x.norm(dim=1, keepdim=True)
        return x / norm


def test_a_no_grad_value_used_in_both_modes_fails_naming_the_held_part() -> None:
    result = _gradient_results(NormalisedUnderNoGrad, "4,6:BC")[("gradients", "float64")]
    assert result.status.value == "failed", result.message
    assert "under torch.no_grad and uses it" in result.message and "--tolerance gradients.float64" in result.message
    assert result.details["stop_gradients"]


class ScaledBinary(nn.Module):
    """A binarised activation with a learned scale: sign(x) · alpha, the sign's gradient a surrogate."""

    alpha_factor = 1.0

    def __init__(self) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.linspace(0.5, 1.5, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ScaleBy.apply(_SignStraightThrough.apply(x), self.alpha, self.alpha_factor)


class _ScaleBy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, alpha: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.save_for_backward(y, alpha)
        ctx.factor = factor
        return y * alpha

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        y, alpha = ctx.saved_tensors
        return grad * alpha, ctx.factor * (grad * y).sum(0), None


class ScaledBinaryWrongScale(ScaledBinary):
    alpha_factor = 2.0


class _NumpySign(torch.autograd.Function):
    """A sign computed outside torch (NumPy): the trace cannot see that its forward is a step."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.from_numpy(np.sign(x.detach().cpu().numpy())).to(x.device)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


class NumpyScaledBinary(ScaledBinary):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ScaleBy.apply(_NumpySign.apply(x), self.alpha, self.alpha_factor)


class NumpyScaledBinaryWrongScale(NumpyScaledBinary):
    alpha_factor = 2.0


class _IgnoredInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, unused: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return grad, grad  # the first should be grad * (1 - tanh(x)²); the second zero


class IgnoresItsSecondInput(nn.Module):
    def forward(self, x: torch.Tensor, unused: torch.Tensor) -> torch.Tensor:
        return _IgnoredInput.apply(x, unused)


def test_a_surrogate_gradient_through_a_piecewise_constant_forward_is_left_out() -> None:
    """Note [surrogate gradients]: a sign written as a Function with a hard-tanh gradient has
    nothing finite differences can judge; alone it is skipped, beside a parameter the
    parameter is judged, and a wrong gradient of the parameter still fails."""
    alone = _gradient_results(BinaryActivation, "4,6:BC")[("gradients", "float64")]
    assert alone.status.value == "skipped" and "surrogate gradient by design" in alone.message, alone.message
    assert "only through _SignStraightThrough" in alone.message
    scaled = _gradient_results(ScaledBinary, "4,6:BC")[("gradients", "float64")]
    assert scaled.status.value == "passed", scaled.message
    assert "input 0 left out" in scaled.message
    assert [n for n in scaled.notes if "_SignStraightThrough computes a step" in n], scaled.notes
    assert not [n for n in scaled.notes if "no effect on the output" in n], scaled.notes
    wrong = _gradient_results(ScaledBinaryWrongScale, "4,6:BC")[("gradients", "float64")]
    assert wrong.status.value == "failed" and "parameter 'alpha'" in wrong.message, wrong.message
    assert "taken as zero" in wrong.message and "agree: input 0" not in wrong.message, wrong.message


def test_a_surrogate_the_trace_cannot_see_is_found_by_its_outputs() -> None:
    """Note [surrogate gradients]: a sign computed in NumPy is no step the trace sees; its
    outputs, which do not move at the difference step, show it, and the parameter beside it is
    still judged, rightly and wrongly."""
    scaled = _gradient_results(NumpyScaledBinary, "4,6:BC")[("gradients", "float64")]
    assert scaled.status.value == "passed", scaled.message
    assert "input 0 left out" in scaled.message and any("piecewise constant in input 0" in n for n in scaled.notes)
    wrong = _gradient_results(NumpyScaledBinaryWrongScale, "4,6:BC")[("gradients", "float64")]
    assert wrong.status.value == "failed" and "parameter 'alpha'" in wrong.message, wrong.message
    assert "Without it" in wrong.message


class _FloatSpike(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, v: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(v)
        return (v > 0).float()  # float32 whatever v is, as snntorch's spikes are

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (v,) = ctx.saved_tensors
        return (grad / (1 + (torch.pi * v) ** 2)).to(v.dtype)


class ThresholdReset(nn.Module):
    """A membrane update that subtracts its float32 spike times a learned threshold, so part of
    its float64 copy computes in float32 (a float32 island) beside a surrogate spike."""

    def __init__(self) -> None:
        super().__init__()
        self.threshold = nn.Parameter(torch.tensor(0.4))  # 0-d: spike * threshold stays float32

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        spike = _FloatSpike.apply(v - self.threshold)
        return v - (spike.detach() * self.threshold).to(v.dtype) + spike.to(v.dtype)


def test_a_float32_spike_beside_a_learned_threshold_is_widened_and_its_surrogate_cut() -> None:
    """Note [widened islands] and Note [surrogate gradients]: the spike made with .float() is
    kept in float64 when the reference is taken again, and the threshold's gradient is judged
    with the surrogate's taken as zero."""
    result = _gradient_results(ThresholdReset, "4,6:BC")[("gradients", "float64")]
    assert result.status.value == "passed", result.message
    assert any("_FloatSpike computes a step" in n for n in result.notes), result.notes
    assert any("kept in float64" in n for n in result.notes), result.notes


def test_a_gradient_for_an_input_the_forward_ignores_is_no_surrogate() -> None:
    """The outputs move with no step of an ignored input: its nonzero gradient stays a failure."""
    report = run_target(Target(IgnoresItsSecondInput, [Layout.parse("4,6:BC"), Layout.parse("4,6:BC")]),
                        [p for p in select() if p.info.id in ("signatures", "forward_runs", "backward_runs",
                                                               "backward_size", "gradients")])
    result = next(r for r in report.results if r.check == "gradients" and r.variant == "float64")
    assert result.status.value == "failed" and "input 1" in result.message, result.message
    assert "surrogates" not in result.details


def test_a_fake_quantised_layer_is_skipped_with_the_reason() -> None:
    """Quantisation-aware training's fake quantisation is piecewise constant with a straight-through
    backward by definition: the gradient check says so instead of blaming rounding noise."""
    from torch.ao.nn import qat
    from torch.ao.quantization import get_default_qat_qconfig

    torch.manual_seed(0)
    report = check_layer(qat.Linear(7, 5, qconfig=get_default_qat_qconfig("fbgemm")), "4,7:BC", checks=["gradients"])
    rows = [r for r in report.results if r.check == "gradients"]
    assert rows and all(r.status.value == "skipped" and "fake-quantises" in r.message for r in rows), rows


def test_a_float32_gradient_within_its_rounding_floor_is_named_in_the_pass_message() -> None:
    """A bias before BatchNorm has a float64 gradient of zero (by cancellation) and a float32 one of
    rounding: far beyond the relative tolerance, within the floor. The pass says which and why,
    instead of quoting a relative difference of 1e8 against a tolerance of 0.01 and nothing else."""
    report = run_zoo("good_bias_before_batchnorm", only=("gradients",))
    (result,) = [r for r in report.results if r.check == "gradients" and r.variant == "float32"]
    assert result.status.value == "passed"
    assert "parameter 'conv.bias' beyond the tolerance but within the rounding floor measured for it" in result.message


@pytest.mark.parametrize("seed", [0, 2])
def test_float32_rounding_of_a_constant_no_perturbation_moves_is_measured_by_emulating_it(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Note [emulated rounding]: a gate biased wide open is a constant whose float32 sigmoid is a
    whole spacing off, 4% of its derivative, the same in every perturbed run. The float32 gradients
    of the gate pass, within the floor float32 rounding emulated on the float64 run gives; without
    that floor (the perturbed runs' alone) they fail, as they did before it."""
    def float32_row(report: RunReport) -> Any:
        (row,) = [r for r in report.results if r.check == "gradients" and r.variant == "float32"]
        return row

    row = float32_row(run_zoo("good_saturated_gate", only=("gradients",), seed=seed))
    assert row.status.value == "passed", row.message
    assert "within the rounding floor measured for" in row.message
    monkeypatch.setattr(calibration, "emulated", lambda *args, **kwargs: None)
    row = float32_row(run_zoo("good_saturated_gate", only=("gradients",), seed=seed))
    assert row.status.value == "failed" and "'gate." in row.message, row.message


def test_emulated_float32_rounding_moves_a_value_at_most_a_spacing_and_a_half_and_equal_values_alike() -> None:
    """Note [emulated rounding]: values float32 holds exactly, non-finite values and values beyond
    float32's range stay; every other value lands on float32's grid within one and a half of its
    spacings, equal values alike (a hash of the value, not a fresh draw), other seeds otherwise."""
    third, tenth = 1 / 3, 0.1
    t = torch.tensor([1.0, 0.5, -3.0, 0.0, 1e300, math.inf, math.nan] + [third, tenth] * 3, dtype=torch.float64)
    draws = [calibration._rounded(t, seed) for seed in range(8)]
    for r in draws:
        assert torch.equal(r[:6], t[:6]) and math.isnan(float(r[6]))
        rounded = r[7:]
        assert torch.equal(rounded.float().double(), rounded)  # on float32's grid
        spacing = torch.tensor([2.0 ** -25, 2.0 ** -27] * 3, dtype=torch.float64)  # float32's at 1/3 and 0.1
        assert bool(((rounded - t[7:]).abs() <= 1.5 * spacing).all())
        assert len(set(rounded[0::2].tolist())) == 1 and len(set(rounded[1::2].tolist())) == 1
    assert len({float(r[7]) for r in draws}) > 1 and len({float(r[8]) for r in draws}) > 1


def test_floors_are_measured_in_turn_and_only_while_a_comparison_needs_them() -> None:
    """A floor that costs runs of the layer is measured only when the one before it is exceeded;
    the larger floor is kept, and a failure names the last one's source."""
    measured: list[float] = []

    def floor(value: float) -> Any:
        return lambda: (measured.append(value) or value, f"floor {value:g}")

    def compare(difference: float) -> None:
        measured.clear()
        allowance = calibration._refined(Allowance(0.0, 0.0), [floor(1.0), floor(0.5), floor(4.0)])
        assert_close([torch.zeros(2)], [torch.tensor([0.0, difference])], what="test", allowance=allowance)

    compare(0.0)
    assert measured == []
    compare(0.7)
    assert measured == [1.0]
    compare(3.0)
    assert measured == [1.0, 0.5, 4.0]
    with pytest.raises(CheckFailed, match="differ by more than 0 of their size plus 4") as failed:
        compare(5.0)
    assert failed.value.details["allowance"] == "rtol=0, atol=0, rounding floor=4 (floor 4)"  # the source: a detail


@pytest.mark.parametrize("seed", [0, 1])
def test_an_embedding_that_renormalises_the_rows_it_reads_passes_every_default_check(seed: int) -> None:
    """Note [parameter writes]: nn.Embedding(max_norm=...) renormalises the rows it looks up in
    place, in every call. Finite differences from a layer whose rows were not renormalised yet
    (a second draw of the indices) see the write too, and gradients[float64] called its weight's
    gradient wrong; judged from the state one call leaves, as training's second step sees it,
    the gradients agree, and a note says why."""
    torch.manual_seed(seed)
    report = check_layer(nn.Embedding(10, 4, max_norm=1.0), "3,5:BT dtype=int64 values=0:10", seed=seed)
    bad = [(r.check, r.variant, r.message) for r in report.results if r.status.value in ("failed", "error")]
    assert not bad, bad
    (row,) = [r for r in report.results if r.check == "gradients" and r.variant == "float64"]
    assert any("writes into parameter 'weight'" in note for note in row.notes), row.notes


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("options", [{"padding_idx": 0}, {"scale_grad_by_freq": True}])
def test_an_embedding_whose_gradient_leaves_out_or_scales_rows_passes_every_default_check(
        seed: int, options: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Note [padding rows]: PyTorch gives an embedding's padding row no gradient, and with
    scale_grad_by_freq divides a row's by how often the batch looks it up, by design. Those rows
    held at the point, the others are judged and agree; differenced with the rest (as before),
    the weight's gradient was called wrong."""
    from layercheck.numerics import reference

    def float64_row() -> Any:
        torch.manual_seed(seed)
        report = check_layer(nn.Embedding(10, 4, **options), "3,5:BT dtype=int64 values=0:10", seed=seed)
        bad = [(r.check, r.variant, r.message) for r in report.results
               if r.status.value in ("failed", "error") and r.check != "gradients"]
        assert not bad, bad
        (row,) = [r for r in report.results if r.check == "gradients" and r.variant == "float64"]
        return row

    row = float64_row()
    assert row.status.value == "passed", row.message
    assert any("rows of parameter 'weight' were held" in note for note in row.notes), row.notes
    monkeypatch.setattr(reference, "held_rows", lambda fn: {})
    row = float64_row()
    assert row.status.value == "failed" and "parameter 'weight'" in row.message, row.message


class _ProjectedEveryCall(nn.Module):
    """Puts its weight's columns back on the unit sphere in every call (as P2SGrad's loss does):
    the gradient at the projected values is the layer's intent, which differences cannot see."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.weight.data = self.weight.data.renorm(2, 1, 1e-5).mul(1e5)
        return x @ self.weight


def test_a_layer_that_projects_its_weight_in_every_call_fails_naming_the_write() -> None:
    """Note [parameter writes]: a write that moves the values in every call keeps disagreeing
    from the state the first call leaves; the failure says what the layer writes into and why
    that may be by design."""
    report = check_layer(_ProjectedEveryCall, "5,4:BC", only=["gradients"])
    (row,) = [r for r in report.results if r.check == "gradients" and r.variant == "float64"]
    assert row.status.value == "failed"
    assert "writes into parameter 'weight' (in place, on every call" in row.message, row.message


def test_a_detached_maximum_whose_eps_makes_it_matter_fails_naming_it_and_the_tolerance_that_accepts_it() -> None:
    """Performer's softmax kernel detaches the maximum it subtracts inside exp(); the eps beside
    it keeps the normalisation from cancelling it, so the gradient leaves out a derivative: 3e-4
    at most seeds, 1.2% at one (seed 5 of performer-pytorch's SelfAttention with 6 features).
    Beyond APPROXIMATE_DETACH that fails, and says what the detached value is and how to accept
    it; a detached mean (zoo gradients_detached_statistic) is still called a likely mistake."""
    layer = str(ROOT / "tests" / "zoo" / "gradients_stabiliser_large_eps.py") + ":LAYER"
    done = runner.invoke(app, ["run", layer, "--layout", "2,5,6:BTC", "--check", "gradients:float64",
                               "--format", "json"])
    assert done.exit_code == 1, done.output
    (result,) = [r for r in json.loads(done.stdout)["runs"][0]["results"] if r["check"] == "gradients"]
    assert "What it detaches is a maximum (amax) subtracted for stability" in result["message"], result["message"]
    accept = re.search(r"--tolerance (gradients\.float64=[0-9.]+)", result["message"])
    assert accept is not None, result["message"]
    done = runner.invoke(app, ["run", layer, "--layout", "2,5,6:BTC", "--check", "gradients:float64",
                               "--tolerance", accept.group(1)])
    assert done.exit_code == 0, done.output
    statistic = [r for r in run_zoo("gradients_detached_statistic", only=("gradients",)).results
                 if r.check == "gradients" and r.variant == "float64"]
    assert "a statistic (a mean, a norm) detached by mistake?" in statistic[0].message
    assert "maximum" not in statistic[0].message.split("With the smooth values")[1]
    # a statistic detached on purpose (kornia's HardNet: each patch's mean and std) is left out
    # with --skip; this one moves the derivative by far more than any tolerance should accept
    assert "If it is meant" in statistic[0].message and "--skip gradients" in statistic[0].message
    assert "--tolerance" not in statistic[0].message, statistic[0].message


class ZeroInitResidual(nn.Module):
    """A residual block whose branch scale starts at zero (as timm's zero_init_last and
    torchvision's zero_init_residual make it): the branch adds exactly nothing, so the outer
    ReLU sees the inner one's exact zeros and the point sits on its kinks."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x)
        return torch.relu(h + self.scale * self.fc(h))


def test_a_point_on_kinks_is_judged_beside_it() -> None:
    # Note [beside the kinks]: a whole timm ResNet-18 at initialisation was skipped ("too noisy",
    # then "the point sits on kinks"); its gradients are now compared with the parameters moved
    # off the point, float64 and float32 alike, and the result says so.
    report = run(ZeroInitResidual, "4,8:BC", only=("gradients",))
    found = results(report)
    for variant in ("float64", "float32"):
        status, message, details = found[f"gradients[{variant}]"]
        assert status == "passed", message
    status, message, details = found["gradients[float64]"]
    assert "at a point beside the layer's (its parameters moved by 0.001 of their size" in message
    assert details["beside"] == 1e-3
    (result,) = [r for r in report.results if r.check == "gradients" and r.variant == "float64"]
    assert any(note.startswith("the point sits on kinks") for note in result.notes)


class ZeroInitBatchNormResidual(nn.Module):
    """A residual block whose branch ends in a BatchNorm with its weight at zero (timm's
    zero_init_last): its biases before a BatchNorm get a gradient zero by cancellation."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.bn1 = nn.Linear(16, 16), nn.BatchNorm1d(16)
        self.fc2, self.bn2 = nn.Linear(16, 16), nn.BatchNorm1d(16)
        nn.init.zeros_(self.bn2.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x)
        return torch.relu(h + self.bn2(self.fc2(torch.relu(self.bn1(self.fc1(h))))))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_float32_gradients_beside_the_point_are_held_to_the_rounding_measured_there(seed: int) -> None:
    # The rounding floor of gradients[float32] was measured at the point, where the branch's
    # gradients are exactly zero: the float32 gradients of its biases (zero by cancellation
    # beside it) failed against a floor of nothing (a whole timm RegNetX-200MF at seed 0).
    found = results(run(ZeroInitBatchNormResidual, "2,16:BC", seed=seed, only=("gradients",)))
    for variant in ("float64", "float32"):
        status, message, _ = found[f"gradients[{variant}]"]
        assert status == "passed", message
    assert found["gradients[float64]"][2]["beside"] == 1e-3


class _WrongScaleGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, scale: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(scale, branch)
        return scale * branch

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale, branch = ctx.saved_tensors
        return 2 * (grad * branch).sum(0), grad * scale  # the scale's gradient doubled


def test_a_wrong_backward_on_kinks_fails_beside_the_point() -> None:
    class Wrong(ZeroInitResidual):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(x)
            return torch.relu(h + _WrongScaleGradient.apply(self.scale, self.fc(h)))

    status, message, _ = results(run(Wrong, "4,8:BC", only=("gradients",)))["gradients[float64]"]
    assert status == "failed", message
    assert "parameter 'scale'" in message.split("\n")[0] and "at a point beside the layer's" in message


class FrozenAverage(nn.Module):
    """Keeps a moving average of its inputs in a parameter that takes no gradient, updated by
    every training call (as MONAI's EMAQuantizer moves its codebook)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 8))
        self.average = nn.Parameter(torch.zeros(8), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            with torch.no_grad():
                self.average.mul_(0.9).add_(0.1 * x.mean(0))
        return self.weight * x + self.average


_READ_BY_FORWARD = torch.zeros(())  # what _BackwardWrites' forward reads and its backward writes into
_CALLS = [0]


class _BackwardWrites(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return 2 * x + _READ_BY_FORWARD

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        _READ_BY_FORWARD.add_(1e-3)
        return 2 * grad


class BackwardWrites(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BackwardWrites.apply(x)


class MovesEveryCall(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _CALLS[0] += 1
        return 2 * x + 1e-6 * _CALLS[0]


@pytest.mark.parametrize("layer", [BackwardWrites, MovesEveryCall])
def test_a_layer_that_changes_between_evaluations_is_not_judged_as_a_fixed_function(layer: type[nn.Module]) -> None:
    # Note [stable at the base step] in numerics/engine.py: the first direction's evaluations
    # see the change, and the evaluation at the point then measures it, as it always did
    found = results(run(layer, "4,8:BC", only=("gradients",)))
    for variant in ("float64", "float32"):
        status, message, _ = found[f"gradients[{variant}]"]
        assert status == "failed", message
        assert "changed between two evaluations" in message and "not a fixed function" in message


def test_a_frozen_parameter_the_training_forward_updates_is_state_to_the_gradient_check() -> None:
    # Note [frozen parameters as state]: it was failed as "not a fixed function"
    found = results(run(FrozenAverage, "4,8:BC", only=("gradients",)))
    for variant in ("float64", "float32"):
        status, message, _ = found[f"gradients[{variant}]"]
        assert status == "passed", message


def test_an_output_on_a_discontinuity_is_skipped_saying_it_jumps_never_failed() -> None:
    # Note [jumps]: the phase of an STFT whose first frame has a real spectrum flips between +pi
    # and -pi with the sign of a rounding remainder; its right gradient failed at 3 seeds in 6
    # (numeric 2.5e7 against an analytic 10), and a passing first draw failed on the second
    layer = load_zoo("good_phase_on_its_branch_cut").LAYER
    statuses = {}
    for seed in range(6):
        found = results(run(layer, "3,64:BT", seed=seed, only=("backward_runs", "backward_size", "gradients")))
        statuses[seed], message, _ = found["gradients[float64]"]
        assert statuses[seed] in ("passed", "skipped"), (seed, message)
        if statuses[seed] == "skipped":
            assert message.startswith("an output jumps at the point"), message
            assert "a derivative's change shrinks with the step" in message
    assert "skipped" in statuses.values() and "passed" in statuses.values(), statuses


class _TinyGradient(torch.autograd.Function):
    """x squared, whose backward returns a hundred-thousandth of the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2e-5 * x * grad


class TinyGradient(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _TinyGradient.apply(x)


def test_a_gradient_far_too_small_still_fails_and_is_no_jump() -> None:
    # its differences are 1e5 times the analytic value, as a jump's are, but they shrink
    # with the step: Note [jumps] leaves the failure standing
    status, message, _ = results(run(TinyGradient, "4,8:BC", only=("gradients",)))["gradients[float64]"]
    assert status == "failed", message
    assert "jumps" not in message and "input 0" in message

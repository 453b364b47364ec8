"""The contract checks (SPEC section 6: dtype, device, meta_device, state_valid, reset_state,
observations, input_unchanged, deterministic, finite, noncontiguous, registered_tensors,
state_dict) as a user sees them: what a failure says, why a check is skipped, and the cases
where a naive check would raise a false alarm. tests/test_zoo.py judges the zoo as a whole."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import ClassVar

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from layercheck.checks.devices import accelerators
from layercheck.cli.commands import app
from layercheck.engine.runner import run_target
from layercheck.parent.layout import Layout
from layercheck.parent.registry import get, select
from layercheck.parent.result import CheckResult, RunReport, Status
from layercheck.support.accelerators import full_float32
from layercheck.target.subject import Target

from conftest import ROOT, load_zoo, run_zoo


def run(layer: type | nn.Module, *layouts: str, checks: tuple[str, ...], enable: tuple[str, ...] = (),
        devices: tuple[str, ...] = ()) -> RunReport:
    """Run ``checks`` and whatever they require (of the registered checks) on a layer."""
    from layercheck.engine.runner import Options

    wanted: set[str] = set()
    stack = list(checks)
    while stack:
        cid = stack.pop()
        if cid not in wanted:
            wanted.add(cid)
            stack.extend(r for r in get(cid).requires if _registered(r))
    plan = [p for p in select(enable=enable) if p.info.id in wanted]
    return run_target(Target(layer, [Layout.parse(text) for text in layouts], name="test-layer"), plan,
                      options=Options(devices=devices))


def _registered(cid: str) -> bool:
    try:
        get(cid)
    except Exception:
        return False
    return True


def result(report: RunReport, check: str, variant: str = "") -> CheckResult:
    found = [r for r in report.results if r.check == check and r.variant == variant]
    assert found, f"no {check}[{variant}] in {[(r.check, r.variant) for r in report.results]}"
    return found[0]


# -- what failures say ------------------------------------------------------------------------

FAILURES = [
    ("dtype_state_float32", "dtype", "float64", ["forward", "state 'running_absmax'", "float32"]),
    ("dtype_constant_float32", "dtype", "float16", ["predict output 0", "float32"]),
    ("meta_device_tensor_in_forward", "meta_device", "", ["meta", "pinned to the CPU", "Tensor on device cpu"]),
    ("state_valid_nonfinite", "state_valid", "", ["state 'ema_corrected' after forward", "non-finite", "inf"]),
    ("state_valid_growing", "state_valid", "", ["state 'history'", "(1, 3) became (2, 3)", "batch (4)"]),
    ("state_valid_graph", "state_valid", "", ["state 'running_mean' after forward", "autograd graph"]),
    ("reset_state_forgets_buffer", "reset_state", "", ["state 'count' after reset_state",
                                                            "after reset_state 3, initially 0"]),
    ("observations_batch_stats", "observations", "", ["observation 0 of a batch of 4", "differs at index",
                                                      ": the observation alone ", ", the batch of 4 "]),
    ("observations_squeeze", "observations", "", ["size (3,) for a batch of one but (4, 3)", "squeeze"]),
    ("input_unchanged_inplace_predict", "input_unchanged", "", ["wrote into its input during predict (grad off)",
                                                                "input 0: at index (3, 2, 0) -3.47964 became 0"]),
    ("input_unchanged_requires_grad", "input_unchanged", "", ["switched on the gradient of its input during predict",
                                                              "requires_grad_()", "x.detach().requires_grad_()"]),
    ("deterministic_predict_noise", "deterministic", "", ["two identical copies", "output 0 differs at index",
                                                          "the copy with random stream 1 ",
                                                          ", the copy with random stream 0 "]),
    ("finite_zero_running_var", "finite", "", ["predict output 0", "non-finite", "inf"]),
    ("noncontiguous_view", "noncontiguous", "", ["strided-view", "view size is not compatible", ".reshape()"]),
    ("registered_tensors_plain_scalar", "registered_tensors", "", ["temperature", "() float32", "register_buffer"]),
    ("state_dict_nonpersistent", "state_dict", "", ["fresh instance", "state_dict", "differs at index"]),
]


@pytest.mark.parametrize(("name", "check", "variant", "phrases"), FAILURES, ids=[f[0] for f in FAILURES])
def test_failure_says_what_and_where(name: str, check: str, variant: str, phrases: list[str]) -> None:
    r = result(run_zoo(name), check, variant)
    assert r.status is Status.FAILED, r.message
    for phrase in phrases:
        assert phrase in r.message, f"{phrase!r} not in {r.message!r}"
    assert f"--check {check}" in r.details["reproduce"]


# -- skips name their reason ------------------------------------------------------------------


def test_device_is_skipped_without_an_accelerator_or_runs_on_each() -> None:
    report = run(nn.Linear(5, 2), "4,5:BC", checks=("device",))
    rows = [r for r in report.results if r.check == "device"]
    if accelerators():
        assert [r.variant for r in rows] == list(accelerators())
        assert all(r.status is Status.PASSED for r in rows), [r.message for r in rows]
    else:
        assert [(r.variant, r.status, r.message) for r in rows] == [("", Status.SKIPPED, "no CUDA or MPS device")]


def test_device_cpu_exercises_the_comparison_path() -> None:
    report = run(nn.Dropout(0.5), "4,3,5:BCU", checks=("device",), devices=("cpu",))
    r = result(report, "device", accelerators()[0] if accelerators() else "")
    if accelerators():
        assert r.status is Status.SKIPPED and "not selected by --device cpu" in r.message
    else:
        assert r.status is Status.PASSED, r.message
        # a second CPU copy draws the same dropout masks: every value is compared
        assert r.message == "on cpu: outputs, gradients and state stay there and agree with the CPU"


def test_device_that_is_not_here_is_a_skip_not_an_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    r = result(run(nn.Linear(5, 2), "4,5:BC", checks=("device",), devices=("cuda",)), "device")
    assert r.status is Status.SKIPPED and "--device cuda: not available here" in r.message


def test_tf32_is_off_inside_the_comparison_and_restored_after() -> None:
    matmul = torch.backends.cuda.matmul
    if not hasattr(matmul, "fp32_precision"):  # torch before 2.9: the allow_tf32 flags
        before = (matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        with full_float32():
            assert not matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        assert (matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
        return
    before = matmul.fp32_precision
    with full_float32():
        assert matmul.fp32_precision == "ieee" and torch.backends.cudnn.conv.fp32_precision == "ieee"
    assert matmul.fp32_precision == before


def test_the_device_comparison_runs_where_torch_forbids_setting_cudnn_flags() -> None:
    """torch's own test utilities (torch.testing._internal, imported beside layercheck in a test
    session) call torch.backends.disable_global_flags(): on torch before 2.9 the device check
    then ended in an error, setting cudnn.allow_tf32 directly. In a process of its own."""
    code = ("import torch; from torch import nn; torch.backends.disable_global_flags(); "
            "from layercheck.engine.api import check_layer; "
            "r = check_layer(nn.Dropout(0.5), '4,3,5:BCU', checks=['device'], devices=['cpu']); "
            "print(next(x.status.value for x in r.runs[0].results if x.check == 'device'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.stdout.split()[-1:] == ["skipped" if accelerators() else "passed"], done.stdout + done.stderr[-2000:]


@pytest.mark.parametrize(("layer", "layout", "phrase"), [
    (nn.BatchNorm2d(3), "4,3,5,5:BCSS",
     "the state changes in forward (running_mean, running_var, num_batches_tracked) "
     "but the layer defines no reset_state"),
    (nn.Linear(5, 2), "4,5:BC", "the layer has no state (no buffers) and no reset_state"),
])
def test_reset_state_skips_with_a_reason(layer: nn.Module, layout: str, phrase: str) -> None:
    r = result(run(layer, layout, checks=("reset_state",)), "reset_state")
    assert r.status is Status.SKIPPED and phrase in r.message


def test_observations_skipped_without_a_batch_dimension() -> None:
    r = result(run(nn.GELU(), "3,5:CU", checks=("observations",)), "observations")
    assert (r.status, r.message) == (Status.SKIPPED, "no input has a B (batch) dimension")


class ContrastiveLoss(nn.Module):
    """A batch-wide loss that needs two observations (lightly's VICRegLoss asserts it)."""

    def __init__(self, keep_batch: bool = False) -> None:
        super().__init__()
        self.keep_batch = keep_batch

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        assert a.shape[0] > 1, "needs a batch of two or more"
        per = (a - a.mean(0)) * (b - b.mean(0)) / a.std(0)
        return per.sum(1) if self.keep_batch else per.mean()


def test_observations_skips_a_loss_over_the_batch_that_a_batch_of_one_cannot_take() -> None:
    """A scalar over the batch has no observation to compare: that a batch of one raises for
    it is no failure (it was one). A per-observation output still fails when a batch of one raises."""
    r = result(run(ContrastiveLoss, "4,3:BC", "4,3:BC", checks=("observations",)), "observations")
    assert r.status is Status.SKIPPED and "no output has a dimension of the batch's size (4)" in r.message
    kept = Target(ContrastiveLoss, [Layout.parse("4,3:BC")] * 2, kwargs={"keep_batch": True})
    r = result(run_target(kept, select(only=["observations"])), "observations")
    assert r.status is Status.FAILED and "a batch of one observation" in r.message


def test_observations_skipped_when_predict_is_random_deterministic_blames_it() -> None:
    report = run_zoo("deterministic_predict_noise")
    assert result(report, "observations").status is Status.SKIPPED
    assert "deterministic reports it" in result(report, "observations").message
    assert result(report, "deterministic").status is Status.FAILED


class CountsBatchPredicts(nn.Module):
    batches: ClassVar[list[int]] = []  # the batch size of every predict, across the fresh copies

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            CountsBatchPredicts.batches.append(x.shape[0])
        return torch.tanh(x)


def test_observations_asks_whether_predict_is_random_only_when_observations_differ() -> None:
    """A second predict of the whole batch with another random stream tells a random predict
    from a broken one; a layer whose observations agree never needs it (at production sizes it
    is a full-size forward)."""
    CountsBatchPredicts.batches.clear()
    r = result(run(CountsBatchPredicts, "4,5:BC", checks=("observations",)), "observations")
    assert r.status is Status.PASSED
    # the predict predict_runs shares, which is observations' first call too, before a batch of 2
    # (Note [the layout's first batch] in support/runs.py)
    assert CountsBatchPredicts.batches.count(4) == 1
    assert CountsBatchPredicts.batches.count(2) == 1


class ReadsValues(nn.Module):
    """Data-dependent control flow: cannot run on meta, and that is not the layer's fault."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.detach().abs().max()) > 10:
            return x / 10
        return x


def test_meta_device_skips_layers_that_read_values() -> None:
    r = result(run(ReadsValues, "4,3:BC", checks=("meta_device",)), "meta_device")
    assert r.status is Status.SKIPPED
    assert "cannot run on the meta device" in r.message and ".item()" in r.message


class IndexWithCpuTensor(nn.Module):
    """Advanced indexing with a CPU index tensor works on every device: no false alarm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, torch.tensor([0, 2])]


class StateOnCpu(nn.Module):
    """Replaces its buffer with a tensor made without device=: the state leaves the device."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = torch.ones(())
        return x * 2


def test_meta_device_accepts_cpu_indices_and_catches_state_left_on_the_cpu() -> None:
    assert result(run(IndexWithCpuTensor, "4,3:BC", checks=("meta_device",)), "meta_device").status is Status.PASSED
    r = result(run(StateOnCpu, "4,3:BC", checks=("meta_device",)), "meta_device")
    assert r.status is Status.FAILED
    assert "state 'seen' after predict is on cpu, not on meta" in r.message


class Cholesky(nn.Module):
    """Uses an operation with no half-precision CPU kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.cholesky(x @ x.transpose(-1, -2) + torch.eye(x.shape[-1], dtype=x.dtype))


def test_dtype_float16_says_when_the_cpu_lacks_a_kernel() -> None:
    report = run(Cholesky, "4,3,3:BUU", checks=("dtype",), enable=("dtype:float16",))
    assert [r.variant for r in report.results if r.check == "dtype"] == ["float32", "float64", "float16"]
    assert result(report, "dtype", "float64").status is Status.PASSED
    r = result(report, "dtype", "float16")
    assert r.status is Status.SKIPPED
    assert "float16 is not supported on the CPU" in r.message and "cholesky" in r.message


def test_noncontiguous_skipped_when_no_input_can_be_strided() -> None:
    r = result(run(nn.GELU(), "1,1:BC", checks=("noncontiguous",)), "noncontiguous")
    assert r.status is Status.SKIPPED and "no input can be stored non-contiguously" in r.message


# -- what must pass ---------------------------------------------------------------------------


def test_observations_finds_moved_batch_dimensions() -> None:
    report = run_zoo("good_torch_lstm", only=())
    r = result(report, "observations")
    assert r.status is Status.PASSED
    assert r.details["batch_dims"] == [1, 1, 1]  # out (T, B, H), h and c (1, B, H)
    pooled = result(run_zoo("good_contract_pooling"), "observations")
    assert pooled.details["batch_dims"] == [1] and "along dim 1" in pooled.message  # SSCB -> CB


def test_observations_with_a_batch_of_one_builds_a_second_observation() -> None:
    r = result(run(nn.Linear(5, 2), "1,5:BC", checks=("observations",)), "observations")
    assert r.status is Status.PASSED and "of 2 agree" in r.message


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Module()
        self.inner.table = {"scale": torch.ones(3)}  # a tensor in a dict on a submodule
        # parametrized and recurrent submodules hold tensors in lists and properties: all registered
        self.proj = nn.utils.parametrizations.weight_norm(nn.Linear(3, 3))
        self.rnn = nn.GRU(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * self.inner.table["scale"] + self.rnn(x.unsqueeze(0))[0][0]


def test_registered_tensors_names_nested_attributes_only() -> None:
    r = result(run(Outer, "4,3:BC", checks=("registered_tensors",)), "registered_tensors")
    assert r.status is Status.FAILED
    assert r.details["attributes"] == ["inner.table['scale']"]
    assert "inner.table['scale'] ((3,) float32) of Module" in r.message


class EmptyPlaceholders(nn.Module):
    """MONAI's SABlock keeps ``self.att_mat = torch.Tensor()`` for an optional attention cache."""

    def __init__(self, filled: bool = False) -> None:
        super().__init__()
        self.att_mat = torch.Tensor()
        self.scale = torch.full((3,), 2.0) if filled else torch.empty(0, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if self.scale.numel() == 0 else x * self.scale  # a filled scale is read


def test_registered_tensors_leaves_empty_placeholders_out() -> None:
    empty = result(run(EmptyPlaceholders, "4,3:BC", checks=("registered_tensors",)), "registered_tensors")
    assert empty.status is Status.PASSED
    assert "2 empty placeholder(s) left out: att_mat, scale" in empty.message
    filled = Target(EmptyPlaceholders, [Layout.parse("4,3:BC")], kwargs={"filled": True})
    r = result(run_target(filled, select(only=["registered_tensors"])), "registered_tensors")
    assert r.status is Status.FAILED and r.details["attributes"] == ["scale"]


class UnreadAndShared(nn.Module):
    """Pyro's AutoRegressiveNN keeps the masks its MaskedLinear layers register as buffers in a
    plain list too, and a skip mask it never uses."""

    def __init__(self, read: bool = False) -> None:
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(3, 3)))
        self.masks = [self.mask.data]  # the buffer's memory
        self.skip = torch.ones(3, 3)  # read only when asked
        self.read = read

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.mask
        return y + x @ self.skip if self.read else y


def test_registered_tensors_leaves_out_attributes_no_call_reads_or_that_share_a_buffer() -> None:
    r = result(run(UnreadAndShared, "4,3:BC", checks=("registered_tensors",)), "registered_tensors")
    assert r.status is Status.PASSED, r.message
    assert "2 plain tensor attribute(s) left out, which no call reads or which share the memory of a registered " \
           "tensor: masks[0], skip" in r.message
    read = Target(UnreadAndShared, [Layout.parse("4,3:BC")], kwargs={"read": True})
    r = result(run_target(read, select(only=["registered_tensors"])), "registered_tensors")
    assert r.status is Status.FAILED and r.details["attributes"] == ["skip"]


class StrideCarried(nn.Module):
    """ultralytics' Detect keeps its strides as a plain tensor and overrides _apply (on its model)
    to move and cast them with the layer."""

    def __init__(self, carried: bool = True) -> None:
        super().__init__()
        self.carried = carried
        self.stride = torch.tensor([8.0, 16.0, 32.0])

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        self = super()._apply(fn, recurse)
        if self.carried:
            self.stride = fn(self.stride)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.stride


def test_registered_tensors_leaves_out_attributes_the_layer_s_own_apply_moves() -> None:
    r = result(run(StrideCarried, "4,3:BC", checks=("registered_tensors",)), "registered_tensors")
    assert r.status is Status.PASSED, r.message
    assert "1 plain tensor attribute(s) the layer's own _apply moves and casts with it" in r.message
    left = Target(StrideCarried, [Layout.parse("4,3:BC")], kwargs={"carried": False})
    r = result(run_target(left, select(only=["registered_tensors"])), "registered_tensors")
    assert r.status is Status.FAILED and r.details["attributes"] == ["stride"]


class MovedWindow(nn.Module):
    """A blur with a constant Gaussian window kept as a plain tensor, as pytorch_msssim's SSIM
    keeps it: moved to the input's device and dtype by every call (``how="moved"``), or used as
    it is by a convolution (whose meta kernel does not check devices), trained (requires grad),
    or a count a call changes in place."""

    def __init__(self, how: str = "moved") -> None:
        super().__init__()
        self.how = how
        self.window = torch.tensor([0.25, 0.5, 0.25]).view(1, 1, 3).repeat(3, 1, 1)
        self.window.requires_grad_(how == "trained")
        self.calls = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "counted":
            self.calls += 1
            return x * self.calls.to(x)
        window = self.window if self.how == "direct" else self.window.to(x.device, dtype=x.dtype)
        return nn.functional.conv1d(x, window.to(x.dtype) if self.how == "direct" else window, groups=3)


def test_registered_tensors_leaves_out_constants_the_calls_move_themselves_only() -> None:
    r = result(run(MovedWindow, "2,3,8:BCT", checks=("registered_tensors",)), "registered_tensors")
    assert r.status is Status.PASSED, r.message
    assert "1 constant plain tensor attribute(s) its calls move to their inputs' device themselves" in r.message
    assert r.message.endswith(": window")
    for how, name in (("direct", "window"), ("trained", "window"), ("counted", "calls")):
        target = Target(MovedWindow, [Layout.parse("2,3,8:BCT")], kwargs={"how": how})
        r = result(run_target(target, select(only=["registered_tensors"])), "registered_tensors")
        assert r.status is Status.FAILED and r.details["attributes"] == [name], (how, r.message)


class MovedBesideNonzero(nn.Module):
    """A constant moved to the input's device by every call, in a layer that selects elements
    with torch.nonzero (a size that depends on the data: no meta kernel by default)."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = torch.tensor([0.5, 1.0, 2.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.flatten()
        positive = flat[torch.nonzero(flat > 0).squeeze(1)]
        return positive.sum() + (x * self.weights.to(x.device, x.dtype)).sum()


def test_registered_tensors_sees_a_moved_constant_in_a_layer_that_calls_nonzero() -> None:
    """pytorch-metric-learning's ProxyNCALoss: the meta run that shows how the calls read a constant
    gives torch.nonzero its largest result, so such a layer runs there."""
    r = result(run(MovedBesideNonzero, "2,3:BC", checks=("registered_tensors",)), "registered_tensors")
    assert r.status is Status.PASSED, r.message
    assert r.message.endswith("(state_dict() does not see them): weights")


class StagedLosses(nn.Module):
    """A residual quantiser's per-stage losses: computed in training, zeros in eval."""

    eval_value = 0.0

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.tanh(x)
        if self.training:
            return y, torch.stack([(y - x).pow(2).mean(), (y * x).mean()])
        return y, torch.full((2,), self.eval_value)


class StagedLossesNonzeroInEval(StagedLosses):
    eval_value = 1.0


def test_forward_predict_agree_accepts_training_only_losses_but_not_other_differences() -> None:
    staged = result(run(StagedLosses, "4,3:BC", checks=("forward_predict_agree",)), "forward_predict_agree")
    assert staged.status is Status.PASSED and "but for output 1" in staged.message, staged.message
    other = result(run(StagedLossesNonzeroInEval, "4,3:BC", checks=("forward_predict_agree",)),
                   "forward_predict_agree")
    assert other.status is Status.FAILED, other.message


class ViewLinear(nn.Module):
    """GPT-2's Conv1D: x.view(-1, x.size(-1)) @ W over the last dimension."""

    def __init__(self, features: int = 8) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1.0, 1.0, features * 3).reshape(features, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.view(-1, x.size(-1)) @ self.weight).view(*x.shape[:-1], 3)


def test_a_sequence_is_stored_channels_first_and_an_image_channels_last() -> None:
    """A BTC sequence has its C innermost already: it is stored channels-first (T innermost), as a
    Conv1d's output transposed back to (B, T, C) is, which .view() cannot flatten; with the
    features in a BCT layout's last dimension, channels-last storage breaks .view() too. An
    elementwise layer takes either."""
    sequence = result(run(ViewLinear, "2,5,8:BTC", checks=("noncontiguous",)), "noncontiguous")
    assert sequence.status is Status.FAILED and "channels-first" in sequence.message, sequence.message
    channels_last = result(run(ViewLinear, "2,3,8:BCT", checks=("noncontiguous",)), "noncontiguous")
    assert channels_last.status is Status.FAILED and "channels-last" in channels_last.message
    fine = result(run(nn.GELU(), "2,5,8:BTC", checks=("noncontiguous",)), "noncontiguous")
    assert fine.status is Status.PASSED and fine.details["forward_layout"] == "channels-first", fine.message


@pytest.mark.parametrize("seed", [1, 4])
def test_zeros_by_cancellation_get_the_rounding_of_the_side_that_rounds_more(seed: int) -> None:
    """Note [rounding floor]: the channels-last run of an atrous pyramid before BatchNorm leaves
    far more rounding in its zero bias gradients than the contiguous run, more than perturbing
    the contiguous run measures (these seeds failed before both sides were measured)."""
    r = result(run_zoo("good_aspp_bias_before_batchnorm", only=("noncontiguous",), seed=seed), "noncontiguous")
    assert r.status is Status.PASSED, r.message


@pytest.mark.parametrize("seed", range(4))
def test_a_layer_that_draws_random_numbers_is_random_when_two_seeds_agree(seed: int) -> None:
    """Stochastic depth on four observations keeps every row under both seeds now and then (seed 1
    here): forward_predict_agree read that as a deterministic forward differing from predict."""
    r = result(run_zoo("good_stochastic_depth", only=("forward_predict_agree",), seed=seed), "forward_predict_agree")
    assert r.status is Status.PASSED and "random" in r.message, r.message


class TransposesInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            x.t_()
            return x.t() * 2
        return x * 2


def test_input_unchanged_sees_in_place_reshapes() -> None:
    r = result(run(TransposesInPlace, "4,3:BC", checks=("input_unchanged",)), "input_unchanged")
    assert r.status is Status.FAILED
    assert "input 0: size (4, 3) (strides (3, 1)) became (3, 4)" in r.message


class ClampsThroughData(nn.Module):
    """Clips its input through .data in training: autograd does not see the write."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            x.data.clamp_(-1.0, 1.0)
        return x * 2


def test_input_unchanged_catches_writes_autograd_does_not_see() -> None:
    r = result(run(ClampsThroughData, "4,3:BC", checks=("input_unchanged",)), "input_unchanged")
    assert r.status is Status.FAILED
    expected = "the layer wrote into its input during forward (grad on): input 0: at index (0, 2) -2.17879 became -1"
    assert expected in r.message


def test_state_dict_round_trip_of_a_given_instance() -> None:
    layer = nn.BatchNorm1d(3)
    r = result(run(layer, "4,3,5:BCU", checks=("state_dict",)), "state_dict")
    assert r.status is Status.PASSED and "5 state-dict entries" in r.message
    assert layer.num_batches_tracked.item() == 0  # the user's instance is untouched


class IntegrateAndFire(nn.Module):
    """A spiking neuron as spikingjelly's IFNode keeps it: the membrane potential a plain
    attribute, carried from call to call until ``reset()`` (not reset_state: outside the
    contract), and by design not in the state_dict."""

    def __init__(self) -> None:
        super().__init__()
        self.v: float | torch.Tensor = 0.0

    def reset(self) -> None:
        self.v = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.v + x
        self.v = torch.where(v >= 1.0, 0.0, v).detach()  # fired: back to rest
        return torch.tanh(v)  # a smooth stand-in for the spike, so that gradients flow


def test_state_dict_resumes_training_from_the_state_as_saved() -> None:
    # Note [training after a checkpoint]: the predict round trip moved the potential after the
    # save; the saved layer's training forward starts from the state it was saved in
    r = result(run(IntegrateAndFire, "16,7:BC", checks=("state_dict",)), "state_dict")
    assert r.status is Status.PASSED, r.message


class CausalMask(nn.Module):
    """A constant -inf attention mask as a buffer: non-finite, but not made so by a call."""

    def __init__(self, length: int = 5) -> None:
        super().__init__()
        self.register_buffer("mask", torch.full((length, length), float("-inf")).triu(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x @ x.transpose(-1, -2) + self.mask, dim=-1) @ x


def test_state_valid_accepts_constant_non_finite_buffers() -> None:
    report = run(CausalMask, "2,5,3:BTC", checks=("state_valid", "finite"))
    assert result(report, "state_valid").status is Status.PASSED
    assert result(report, "finite").status is Status.PASSED


class DropsItsState(nn.Module):
    """Empties its buffer slot after a predict: the next call has no state to read."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("h", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            self.h = None
        return x * 2


def test_state_valid_catches_a_buffer_that_disappears() -> None:
    r = result(run(DropsItsState, "4,3:BC", checks=("state_valid",)), "state_valid")
    assert r.status is Status.FAILED
    assert r.message == ("state 'h' after predict: the buffer is gone (it held (3,) float32). Fix: "
                         f"{get('state_valid').fix.rstrip('.')} (more: layercheck checks state_valid).")


def test_recurrent_state_resized_to_the_batch_is_valid() -> None:
    report = run_zoo("good_contract_recurrent")
    assert result(report, "state_valid").status is Status.PASSED
    assert result(report, "reset_state").status is Status.PASSED
    assert "h moved" in result(report, "reset_state").message


# -- the command line ---------------------------------------------------------------------------


def test_cli_float16_opt_in_and_device_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    out = CliRunner().invoke(app, ["run", "tests/zoo/dtype_constant_float32.py:Layer", "--layout", "4,3,5:BCU",
                                   "--enable", "dtype:float16", "--device", "cpu", "--format", "json"])
    assert out.exit_code == 1, out.output
    (report,) = json.loads(out.stdout)["runs"]
    rows = {(r["check"], r["variant"]): r for r in report["results"]}
    assert rows["dtype", "float16"]["status"] == "failed"
    assert "--check dtype:float16" in rows["dtype", "float16"]["details"]["reproduce"]
    assert rows["dtype", "float32"]["status"] == rows["dtype", "float64"]["status"] == "passed"
    device = rows["device", accelerators()[0] if accelerators() else ""]
    assert device["status"] == ("skipped" if accelerators() else "passed")
    assert {r["status"] for k, r in rows.items() if k[0] != "dtype"} <= {"passed", "skipped"}


def test_catalogue_lists_the_contract_checks_with_matlab_counterparts(monkeypatch: pytest.MonkeyPatch) -> None:
    out = CliRunner().invoke(app, ["checks", "dtype"])
    assert out.exit_code == 0
    assert "MATLAB: predictIsConsistentInType" in out.stdout
    assert "variants: float32, float64; opt-in: float16, bfloat16" in out.stdout
    for cid in ("state_valid", "reset_state", "observations", "device"):
        assert get(cid).matlab and get(cid).default
    for cid in ("input_unchanged", "deterministic", "finite", "noncontiguous", "meta_device",
                "registered_tensors", "state_dict"):
        assert get(cid).default and get(cid).doc


@pytest.mark.slow
def test_benchmark_prints_the_ratio() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--layout", "4,4,3,6:SSCB",
                           "--repeat", "1", "--threads", "1", "--cpu-time"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = [line for line in done.stdout.splitlines() if line.startswith("whole suite: ")]
    assert summary and "x one float64 forward+backward (median of 1; range" in summary[0]
    assert summary[0].endswith("target <= 25)")
    assert "noncontiguous" in done.stdout and "runner overhead" in done.stdout and "first (cold) run" in done.stdout
    assert "1 repetitions, CPU time" in done.stdout and "grad_output" in done.stdout


class FastWeights(nn.Module):
    """Moves its own weight in every training call (a test-time-training layer): no
    data-dependent initialisation, though its first call changes a parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.weight.data += 0.01 * x.detach().mean(0)
        return x * self.weight


def test_only_a_first_call_that_sets_parameters_once_is_taken_for_a_data_dependent_initialisation() -> None:
    """Note [data-dependent initialisation]: the zoo's ActNorm is given its first call before the
    checks (and initialize says so); a layer that moves its parameters in every call is not."""
    fast = Target(FastWeights, [Layout.parse("4,3:BC")])
    assert fast.pristine() is not None and fast.first_call_initialises is False
    assert torch.equal(fast.pristine().weight.detach(), torch.ones(3))  # left as constructed
    r = result(run(FastWeights, "4,3:BC", checks=("initialize",)), "initialize")
    assert r.status is Status.SKIPPED
    actnorm = load_zoo("good_data_dependent_init")
    target = Target(actnorm.LAYER, [Layout.parse(actnorm.LAYOUTS[0])])
    assert target.pristine() is not None and target.first_call_initialises is True
    assert bool(target.pristine().initialised)
    r = result(run_target(target, select(only=["initialize"])), "initialize")
    assert r.status is Status.PASSED and "data-dependent initialisation" in r.message


@pytest.mark.parametrize("name", ["Head", "OptionsOnly"])
def test_an_initialize_that_takes_no_layout_is_the_layers_own_method(name: str) -> None:
    """segmentation_models_pytorch's models have an initialize() of their own: not the hook."""
    layer = getattr(load_zoo("good_own_initialize"), name)
    report = run(layer, "2,4,6,6:BCSS", checks=("signatures", "initialize", "forward_runs"))
    assert result(report, "signatures").status is Status.PASSED
    assert result(report, "forward_runs").status is Status.PASSED
    r = result(report, "initialize")
    assert r.status is Status.SKIPPED and r.message.startswith(f"{name}.initialize takes no layout")


class _Cancelling(nn.Module):
    """A per-channel scale whose result goes through a cancellation, (y + 1e5) - 1e5: in float32
    it keeps about 1e-2 of each value, in float64 it is exact to 1e-11. With ``layout_bug`` a
    float32 channels-last or strided input also has its first element rounded to an integer (a
    float32-only kernel path); with ``imprecise=False`` there is no cancellation: the layer is
    accurate in float32."""

    layout_bug = True
    imprecise = True

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.w.view(1, -1, 1, 1)
        if self.imprecise:
            y = (y + 1e5) - 1e5
        if self.layout_bug and x.dtype == torch.float32 and not x.is_contiguous():
            first = torch.zeros_like(y, dtype=torch.bool)
            first[0, 0, 0, 0] = True
            y = torch.where(first, y.round(), y)
        return y


class _AccurateWithLayoutBug(_Cancelling):
    imprecise = False


def test_float64_settles_a_layout_difference_of_a_layer_that_is_imprecise_in_float32() -> None:
    """Note [float64 settles a layout]: the layouts agree in float64 and the layer is imprecise in
    float32 anyway: passed, with a note. The same float32-only difference in a layer that computes
    accurately in float32 still fails."""
    r = result(run(_Cancelling, "2,3,4,5:BCSS", checks=("noncontiguous",)), "noncontiguous")
    assert r.status is Status.PASSED, r.message
    assert any("in float64 the two layouts agree" in note for note in r.notes)
    r = result(run(_AccurateWithLayoutBug, "2,3,4,5:BCSS", checks=("noncontiguous",)), "noncontiguous")
    assert r.status is Status.FAILED and "inputs vs contiguous ones" in r.message and not r.notes


class _CrossesOnOneDraw(nn.Module):
    """Accurate in float32, and its float32 run on a non-contiguous input differs from the
    contiguous one by a whole unit at one element, on the values of one draw only
    (``crossed_at``): as a value within float32's rounding of a ReLU's zero lands on either side
    of it in the two layouts."""

    crossed_at: ClassVar[torch.Tensor | None] = None

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.w.view(1, -1, 1, 1)
        crossed = self.crossed_at is not None and x.shape == self.crossed_at.shape and torch.equal(
            x.detach().to(torch.float64), self.crossed_at)
        if crossed and x.dtype == torch.float32 and not x.is_contiguous():
            first = torch.zeros_like(y, dtype=torch.bool)
            first[0, 0, 0, 0] = True
            y = torch.where(first, y + 1.0, y)
        return y


def test_a_kink_crossed_in_one_layout_on_one_draw_passes_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """Note [a kink crossed in one layout]: float64 agrees, the contiguous float32 run is accurate,
    and on the second draw the float32 layouts agree: the first draw's difference is its values'.
    The rounding floor is left out here: where one of its two roundings crosses the kink too it
    covers the difference itself, and MONAI's crossing was one neither of them made."""
    from layercheck.checks import hygiene

    plain = hygiene.path_allowance
    monkeypatch.setattr(hygiene, "path_allowance", lambda ctx, run=None, **kw: plain(ctx))  # no measured floor
    layout = "2,3,4,5:BCSS"
    first = Target(_CrossesOnOneDraw, [Layout.parse(layout)], seed=0).inputs(torch.float32)[0].to(torch.float64)
    monkeypatch.setattr(_CrossesOnOneDraw, "crossed_at", first)
    r = result(run(_CrossesOnOneDraw, layout, checks=("noncontiguous",)), "noncontiguous")
    assert r.status is Status.PASSED, r.message
    assert any("on another draw of the inputs they agree in float32 too" in note for note in r.notes), r.notes
    # the same difference on every draw is the layout's: it fails
    monkeypatch.setattr(_CrossesOnOneDraw, "crossed_at", None)
    monkeypatch.setattr(_CrossesOnOneDraw, "forward", _CrossesOnEveryDraw.forward)
    r = result(run(_CrossesOnOneDraw, layout, checks=("noncontiguous",)), "noncontiguous")
    assert r.status is Status.FAILED and "inputs vs contiguous ones" in r.message and not r.notes, r.message


class _CrossesOnEveryDraw(_CrossesOnOneDraw):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.w.view(1, -1, 1, 1)
        if x.dtype == torch.float32 and not x.is_contiguous():  # a float32-only layout bug
            first = torch.zeros_like(y, dtype=torch.bool)
            first[0, 0, 0, 0] = True
            y = torch.where(first, y + 1.0, y)
        return y

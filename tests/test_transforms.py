"""The opt-in transform checks as a user meets them: autocast (mixed precision) and vmap
(torch.func), what a failure names — the Function and what it lacks, the parameter, the
output — and when a check is skipped. tests/test_zoo.py judges the zoo as a whole."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from layercheck.engine.runner import Options, run_target
from layercheck.parent.layout import Layout
from layercheck.parent.registry import get, select
from layercheck.parent.result import CheckResult, Status
from layercheck.support.accelerators import accelerators
from layercheck.target.loading import resolve
from layercheck.target.subject import Target

from conftest import ROOT, run_zoo


def outcome(layer: type | nn.Module, check: str, *layouts: str, tolerance: dict[str, float] | None = None,
            **kwargs: object) -> CheckResult:
    target = Target(layer, [Layout.parse(text) for text in layouts], kwargs=kwargs, name="test-layer")
    report = run_target(target, select(only=(check,)), options=Options(tolerance=tolerance or {}))
    found = [r for r in report.results if r.check == check]
    assert found, [(r.check, r.status.value, r.message) for r in report.results]
    return found[0]


def zoo_outcome(name: str, check: str, variant: str | None = None) -> CheckResult:
    """The zoo layer's result of ``check`` (autocast: its CPU variant; a machine with CUDA runs
    autocast:cuda too)."""
    variant = "cpu" if variant is None and check == "autocast" else variant
    (found,) = [r for r in run_zoo(name, only=(check,)).results
                if r.check == check and (variant is None or r.variant == variant)]
    return found


def test_both_are_opt_in_and_autocast_has_a_variant_per_device_type() -> None:
    assert not get("autocast").default and not get("vmap").default
    assert not {"autocast", "vmap"} & {p.info.id for p in select()}
    expected = ("cpu", *dict.fromkeys(name.split(":")[0] for name in accelerators()))
    assert get("autocast").variants == expected
    assert {t.dtype for t in get("autocast").tolerances} == {"bfloat16", "float16"}


# -- autocast -----------------------------------------------------------------------------------


def test_a_function_without_the_amp_decorators_is_named_with_the_fix() -> None:
    found = zoo_outcome("autocast_function_without_custom_fwd", "autocast")
    assert found.status is Status.FAILED
    assert found.message.startswith("LinearFunction (torch.autograd.Function) has no @torch.amp.custom_fwd/"
                                    "@torch.amp.custom_bwd: after a forward under torch.autocast('cpu', "
                                    "dtype=torch.bfloat16), backward raised RuntimeError")
    assert "@torch.amp.custom_fwd(device_type='cpu')" in found.message
    assert "@torch.amp.custom_bwd(device_type='cpu')" in found.message
    assert found.details["reproduce"].endswith("--check autocast:cpu --seed 0")


def test_a_function_decorated_for_another_device_type_is_named_with_it() -> None:
    """custom_fwd/custom_bwd for "cuda" do nothing under CPU autocast (and those for "cpu" nothing
    under CUDA autocast, as a GPU machine showed on a layer decorated for the CPU only)."""
    found = zoo_outcome("autocast_custom_fwd_other_device", "autocast")
    assert found.status is Status.FAILED
    assert found.message.startswith("CudaOnlyLinearFunction (torch.autograd.Function) has @torch.amp.custom_fwd/"
                                    "@torch.amp.custom_bwd for device_type='cuda', not 'cpu': after a forward under "
                                    "torch.autocast('cpu', dtype=torch.bfloat16), backward raised RuntimeError")
    assert "@torch.amp.custom_fwd(device_type='cpu')" in found.message
    assert "one Function per device type" in found.message


class _CastsItsWeight(nn.Module):
    """Keeps "a low-precision copy" by casting its own weight under autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled("cpu"):
            self.weight.data = self.weight.data.to(torch.get_autocast_dtype("cpu"))
        return x * self.weight.float()


def test_a_layer_that_casts_its_own_parameter_fails_naming_it() -> None:
    found = outcome(_CastsItsWeight, "autocast", "4,3:BC")
    assert found.status is Status.FAILED
    assert "predict changed parameter 'weight' from float32 to bfloat16" in found.message


class _HalfOutput(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x).to(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else x.dtype)


def test_outputs_are_compared_with_float32_within_the_autocast_tolerance() -> None:
    passed = outcome(nn.Linear, "autocast", "4,6:BC", in_features=6, out_features=3)
    assert passed.status is Status.PASSED
    assert "predict and forward give bfloat16 outputs within 0.05 of float32" in passed.message
    strict = outcome(nn.Linear, "autocast", "4,6:BC", tolerance={"autocast.bfloat16": 1e-7},
                     in_features=6, out_features=3)
    assert strict.status is Status.FAILED
    assert strict.message.startswith("predict under torch.autocast('cpu', dtype=torch.bfloat16) vs in float32: "
                                     "output 0 differs at index")
    assert "elements differ by more than 1e-07 of their size" in strict.message


def test_a_recurrent_state_assigned_under_autocast_is_caught_with_the_fix() -> None:
    """good_grad_recurrent passes every default check; under autocast its hidden state becomes
    bfloat16, and the next call outside autocast raises (a bfloat16 by float32 matmul)."""
    found = zoo_outcome("good_grad_recurrent", "autocast")
    assert found.status is Status.FAILED
    assert "predict changed state 'h' from float32 to bfloat16" in found.message
    assert "self.h = h.to(self.h.dtype)" in found.message


def test_the_bundled_layers_pass_autocast_without_decorators() -> None:
    """Elementwise Functions: autocast casts none of their operations."""
    found = outcome(resolve("layers/srelu.py:SReLU", base_dir=ROOT), "autocast", "4,5,3,2:SSCB")
    assert found.status is Status.PASSED, found.message
    assert "give float32 outputs" in found.message


# -- vmap ---------------------------------------------------------------------------------------


def test_a_layer_that_keeps_its_weights_in_a_list_ignores_functional_call() -> None:
    found = zoo_outcome("vmap_parameter_list", "vmap")
    assert found.status is Status.FAILED
    assert found.message.startswith("torch.func.functional_call with other parameter values vs the layer with those "
                                    "values loaded: output 0 differs")
    assert "reads a parameter through a reference kept elsewhere (a list or dict of its weights" in found.message


def test_an_old_style_function_is_named_with_what_it_lacks() -> None:
    found = zoo_outcome("vmap_function_without_setup_context", "vmap")
    assert found.status is Status.FAILED
    assert found.message.startswith("OldStyleSwishFunction (torch.autograd.Function) lacks setup_context and a vmap "
                                    "rule: torch.vmap over the batch")
    assert "generate_vmap_rule = True" in found.message


def test_a_torch_operation_without_a_batching_rule_is_torchs_limit() -> None:
    found = outcome(nn.LSTM, "vmap", "6,3,5:TBC", input_size=5, hidden_size=4)
    assert found.status is Status.FAILED
    assert "Batching rule not implemented for aten::lstm" in found.message
    assert "a limit of torch, not a mistake in the layer's code" in found.message


def test_an_eval_forward_that_draws_random_numbers_is_compared_in_size_only() -> None:
    """good_contract_predict adds noise in forward, training or not (its predict is separate):
    vmap gives each observation its own draws, as a batch does."""
    found = zoo_outcome("good_contract_predict", "vmap")
    assert found.status is Status.PASSED, found.message
    assert found.message.endswith("(in size only: the layer's eval forward draws random numbers)")


def test_each_observation_alone_starts_from_the_layers_state() -> None:
    """good_contract_recurrent carries its hidden state from call to call: observations run
    alone must not inherit the previous one's."""
    found = zoo_outcome("good_contract_recurrent", "vmap")
    assert found.status is Status.PASSED, found.message


@pytest.mark.parametrize(("layouts", "reason"), [
    (["4,3"], "no input has a B (batch) dimension"),
    (["1,3:BC"], "the batch has one observation"),
])
def test_vmap_is_skipped_without_a_batch_to_map_over(layouts: list[str], reason: str) -> None:
    layouts = [text if ":" in text else f"{text}:UC" for text in layouts]
    found = outcome(nn.Linear, "vmap", *layouts, in_features=3, out_features=2)
    assert found.status is Status.SKIPPED
    assert reason in found.message


def test_an_operation_maps_its_batched_input_and_passes_the_others_whole() -> None:
    """SReLUFunction: x has B, the four thresholds and slopes do not; per-sample gradients of
    all five inputs come out of vmap(grad(...))."""
    function = resolve("layers/srelu_function.py:SReLUFunction", base_dir=ROOT)
    found = outcome(function, "vmap", "4,5,3,2:SSCB", *["1,1,3,1:UUCU"] * 4)
    assert found.status is Status.PASSED, found.message
    assert found.message == ("torch.vmap over 2 observations reproduces the batched call, and per-sample gradients "
                             "from vmap(grad(...)) agree with 2 observation(s) run alone (10 gradient(s))")


@pytest.mark.parametrize(("reference", "layouts"), [
    ("layers/prelu.py:PReLU", ["4,5,3,2:SSCB"]),
    ("layers/srelu.py:SReLU", ["4,5,3,2:SSCB"]),
    ("layers/srelu_function.py:SReLUFunction", ["4,5,3,2:SSCB", *["1,1,3,1:UUCU"] * 4]),
])
def test_the_bundled_layers_pass_the_opt_in_derivative_and_transform_checks(reference: str,
                                                                            layouts: list[str]) -> None:
    """At a small size (the specs' is full size); export and compile: tests/test_compiled.py."""
    enable = ("gradgrad", "forward_ad", "autocast", "vmap", "train_step")
    target = Target(resolve(reference, base_dir=ROOT), [Layout.parse(text) for text in layouts], name=reference)
    report = run_target(target, select(enable=enable))
    bad = [(r.check, r.variant, r.message) for r in report.results if r.status.value in ("failed", "error")]
    assert not bad
    passed = {r.check for r in report.results if r.status is Status.PASSED}
    assert set(enable) - ({"train_step"} if reference.endswith("Function") else set()) <= passed

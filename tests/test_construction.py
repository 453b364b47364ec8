"""factory_kwargs and copy as a user meets them: what a failure names and what fixes it, what is
not tried and why, and the torch.nn layers that must pass. tests/test_zoo.py judges the zoo as a
whole."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import layercheck
from layercheck.cli.commands import app
from layercheck.engine.runner import run_target
from layercheck.parent.layout import Layout
from layercheck.parent.registry import get, select
from layercheck.parent.result import CheckResult, Status
from layercheck.target.loading import resolve
from layercheck.target.subject import Target

from conftest import ROOT, run_zoo


def outcome(layer: type | nn.Module, check: str, *layouts: str, **kwargs: object) -> CheckResult:
    target = Target(layer, [Layout.parse(text) for text in layouts], kwargs=kwargs, name="test-layer")
    report = run_target(target, select(only=(check,)))
    (found,) = [r for r in report.results if r.check == check]
    return found


def zoo_outcome(name: str, check: str) -> CheckResult:
    (found,) = [r for r in run_zoo(name, only=(check,)).results if r.check == check]
    return found


def test_both_are_default_checks_beyond_matlab_with_their_pytorch_counterpart_in_the_docs() -> None:
    for check_id, counterpart in (("factory_kwargs", "test_factory_kwargs"), ("copy", "test_pickle")):
        info = get(check_id)
        assert info.default and not info.matlab
        assert counterpart in info.doc and "Fix:" in info.doc
    assert {"factory_kwargs", "copy"} <= {p.info.id for p in select()}


# -- factory_kwargs -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "phrases"), [
    ("factory_kwargs_buffer_ignores_device", ["constructed with device='meta'", "buffer 'scale' is cpu",
                                              "after the constructor", "factory_kwargs = {'device': device"]),
    ("factory_kwargs_initialize_ignores_device", ["parameter 'gain' is cpu after initialize"]),
    ("factory_kwargs_reset_forgets_buffer", ["rebuilt from meta by to_empty + reset_parameters",
                                             "non-finite", "reset_parameters leaves buffer 'frequencies'",
                                             "constants included"]),
])
def test_factory_kwargs_names_the_tensor_and_the_fix(name: str, phrases: list[str]) -> None:
    found = zoo_outcome(name, "factory_kwargs")
    assert found.status is Status.FAILED, found.message
    for phrase in phrases:
        assert phrase in found.message, f"{phrase!r} not in {found.message!r}"
    assert found.details["reproduce"].endswith("--check factory_kwargs --seed 0")


class _Float64Blind(nn.Module):
    """Takes dtype= and creates its weight in the default dtype anyway."""

    def __init__(self, device: torch.device | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


def test_factory_kwargs_checks_the_dtype_as_well() -> None:
    found = outcome(_Float64Blind, "factory_kwargs", "4,3:BC")
    assert found.status is Status.FAILED
    assert "constructed with dtype=torch.float64, parameter 'weight' is float32 after the constructor" in found.message


class _WeightedLoss(nn.Module):
    """Keeps the class weights the caller passes, where the caller made them (as
    nn.LinearCrossEntropyLoss(weight=...) does), and creates its own tensors as asked, unless
    ``forget`` (then its own buffer ignores device=)."""

    def __init__(self, weight: torch.Tensor, forget: bool = False, device: torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.register_buffer("offset", torch.zeros(3, dtype=dtype, device=None if forget else device))
        self.scale = nn.Parameter(torch.ones(3, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.scale + self.offset) * self.weight


def test_factory_kwargs_leaves_the_tensors_the_caller_passed_where_the_caller_made_them() -> None:
    """module_db's LinearCrossEntropyLoss(weight=cpu tensor) got a false alarm: a tensor given to
    the constructor is the caller's to place."""
    weights = torch.tensor([1.0, 2.0, 0.5])
    found = outcome(_WeightedLoss, "factory_kwargs", "4,3:BC", weight=weights)
    assert found.status is Status.PASSED, found.message
    found = outcome(_WeightedLoss, "factory_kwargs", "4,3:BC", weight=weights, forget=True)
    assert found.status is Status.FAILED and "buffer 'offset' is cpu after the constructor" in found.message


def test_factory_kwargs_passes_a_lazy_layer() -> None:
    """Lazy parameters have no storage to compare with the caller's tensors (module_db's
    LazyConv1d got an error from that comparison)."""
    found = outcome(nn.LazyLinear, "factory_kwargs", "4,6:BC", out_features=3)
    assert found.status is Status.PASSED, found.message


def test_factory_kwargs_passes_torch_layers_and_says_what_it_rebuilt() -> None:
    found = outcome(nn.Linear, "factory_kwargs", "4,6:BC", in_features=6, out_features=3)
    assert found.status is Status.PASSED, found.message
    assert found.message == ("constructed with device='meta' and dtype=torch.float64: every parameter and buffer is "
                             "there; to_empty + reset_parameters of 1 module(s) rebuild the meta-constructed layer, "
                             "whose predict runs and is finite")


def test_factory_kwargs_reaches_a_constructor_that_takes_them_through_kwargs() -> None:
    lstm = outcome(nn.LSTM, "factory_kwargs", "6,3,5:TBC", input_size=5, hidden_size=4)  # LSTM(*args, **kwargs)
    assert lstm.status is Status.PASSED and "device='meta' and dtype=torch.float64" in lstm.message


class _KwargsRefused(nn.Module):
    def __init__(self, **options: object) -> None:
        super().__init__(**options)  # nn.Module takes no device=
        self.weight = nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


@pytest.mark.parametrize(("layer", "layouts", "reason"), [
    (nn.GELU, ["4,3:BC"], "the constructor of GELU accepts neither device= nor dtype="),
    (_KwargsRefused, ["4,3:BC"], "the constructor of _KwargsRefused names neither device= nor dtype= (it takes "
                                 "**kwargs, which need not be factory keywords"),
    (nn.Linear(3, 3), ["4,3:BC"], "does not apply to an instance"),
])
def test_factory_kwargs_is_skipped_with_the_reason(layer: type | nn.Module, layouts: list[str], reason: str) -> None:
    found = outcome(layer, "factory_kwargs", *layouts)
    assert found.status is Status.SKIPPED
    assert reason in found.message


class _InheritsFactoryKeywords(nn.Linear):
    """Declares device= and dtype= through the base class its **kwargs go to."""

    def __init__(self, features: int = 3, **kwargs: object) -> None:
        super().__init__(features, features, **kwargs)  # type: ignore[arg-type]


def test_factory_kwargs_follows_kwargs_to_the_base_class_that_declares_them() -> None:
    found = outcome(_InheritsFactoryKeywords, "factory_kwargs", "4,3:BC")
    assert found.status is Status.PASSED and "device='meta' and dtype=torch.float64" in found.message


def test_factory_kwargs_tries_undeclared_kwargs_only_where_the_constructor_arguments_name_them() -> None:
    """A **kwargs constructor that keeps unknown keywords and builds on the CPU is not tried
    (zoo good_factory_kwargs_swallowed); given device= among its constructor arguments (a spec's
    kwargs, --kwarg) the user says it takes the keyword, and a CPU tensor is then a failure.
    Through the command line, as a user sets it."""
    zoo = ROOT / "tests" / "zoo" / "good_factory_kwargs_swallowed.py"
    runner = CliRunner()
    plain = runner.invoke(app, ["run", f"{zoo}:RadialFeatures", "--layout", "5,4:BC", "--check", "factory_kwargs",
                                "--no-isolate", "--format", "json"])
    assert plain.exit_code == 0, plain.output
    (result,) = [r for r in json.loads(plain.stdout)["runs"][0]["results"] if r["check"] == "factory_kwargs"]
    assert result["status"] == "skipped" and "names neither device= nor dtype= (it takes **kwargs" in result["message"]
    said = runner.invoke(app, ["run", f"{zoo}:RadialFeatures", "--layout", "5,4:BC", "--check", "factory_kwargs",
                               "--kwarg", "device=cpu", "--no-isolate", "--format", "json"])
    assert said.exit_code == 1, said.output
    (result,) = [r for r in json.loads(said.stdout)["runs"][0]["results"] if r["check"] == "factory_kwargs"]
    assert result["status"] == "failed"
    assert "constructed with device='meta', parameter 'lengthscale' is cpu after the constructor" in result["message"]


def test_factory_kwargs_and_copy_skip_operations() -> None:
    function = resolve("layers/srelu_function.py:SReLUFunction", base_dir=ROOT)
    layouts = ["4,5,3,2:SSCB", *["1,1,3,1:UUCU"] * 4]
    assert "operations (autograd.Function) have no constructor" in outcome(function, "factory_kwargs", *layouts).message
    assert "operations (autograd.Function) hold nothing to copy" in outcome(function, "copy", *layouts).message


def test_factory_kwargs_does_not_rebuild_a_layer_that_defines_no_reset_parameters() -> None:
    found = outcome(nn.MultiheadAttention, "factory_kwargs", "5,3,8:TBC", "6,3,8:TBC", "6,3,8:TBC",
                    embed_dim=8, num_heads=2)
    assert found.status is Status.PASSED
    assert ("to_empty + reset_parameters not tried: the layer (MultiheadAttention) owns parameters or buffers but "
            "defines no reset_parameters") in found.message


# -- copy ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "phrases"), [
    ("copy_staticmethod_attribute", ["copy.deepcopy(layer) raised TypeError: cannot pickle 'staticmethod' object",
                                     "attribute 'activation' of Configurable (staticmethod)", "AveragedModel"]),
    ("copy_lambda_attribute", ["torch.save of the whole layer raised", "attribute 'activation' of Activated",
                               "instead of a lambda"]),
    ("copy_hook_closure", ["predict of a deep copy vs the original when it was copied", "output 0 differs",
                           "still refers to the original through forward hook Gated.__init__.<locals>.<lambda>",
                           "hook(module, args, output)"]),
])
def test_copy_names_what_cannot_be_copied_or_is_shared(name: str, phrases: list[str]) -> None:
    found = zoo_outcome(name, "copy")
    assert found.status is Status.FAILED, found.message
    for phrase in phrases:
        assert phrase in found.message, f"{phrase!r} not in {found.message!r}"


def test_copy_of_a_class_defined_in_a_function_judges_the_deep_copy_alone() -> None:
    class Local(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x)

    found = outcome(Local, "copy", "4,3:BC")
    assert found.status is Status.PASSED
    assert "torch.save not tried: class test_copy_of_a_class_defined_in_a_function_judges_the_deep_copy_alone" \
           ".<locals>.Local cannot be found by name" in found.message


def test_copy_leaves_a_module_that_refuses_pickling_by_design_to_state_dict() -> None:
    found = zoo_outcome("good_spectral_norm", "copy")
    assert found.status is Status.PASSED
    assert ("torch.save not tried: ParametrizedLinear refuses to be pickled by design (Serialization of parametrized "
            "modules is only supported through state_dict()); save it through its state_dict") in found.message


def test_copy_carries_the_state_a_layer_gathered_before_it_was_copied() -> None:
    """BatchNorm after a training forward: the copies predict with the moved running statistics
    (a fresh layer would not), and training the original afterwards does not reach them."""
    found = outcome(nn.BatchNorm1d, "copy", "8,3:BC", num_features=3)
    assert found.status is Status.PASSED
    assert "a deep copy and a torch.save/torch.load round trip reproduce 1 predict output(s)" in found.message


def test_copy_of_an_instance_given_to_the_api() -> None:
    report = layercheck.check_layer(nn.Linear(3, 2), "4,3:BC", only=["copy"])
    (found,) = [r for r in report.results if r.check == "copy"]
    assert found.status is Status.PASSED, found.message

"""Running the layer the way training runs it: gradients read from .grad, layers built by their
constructor, state rewound whole, hand-written backward passes aligned by argument, a second
call checked, and mismatches that only appear in training mode explained."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import layercheck

from conftest import load_zoo, run_zoo


def _results(report: layercheck.RunReport) -> dict[str, layercheck.CheckResult]:
    return {f"{r.check}[{r.variant}]" if r.variant else r.check: r for r in report.results}


def test_a_hand_written_backward_is_aligned_with_its_arguments_by_position() -> None:
    found = _results(run_zoo("backward_runs_function_float_argument", only=("backward_runs",)))
    message = found["backward_runs"].message
    assert "_Scaled.backward (" in message  # with its file and line
    assert ("backward_runs_function_float_argument.py:21) returned a gradient of size (8, 4) float32 for its input 2, "
            "which is (8,)") in message


def test_gradients_written_to_grad_by_the_layers_own_backward_are_found() -> None:
    found = _results(run_zoo("good_reversible_backward", only=("backward_runs", "gradients", "needs_input_grad")))
    assert found["backward_runs"].status.value == "passed", found["backward_runs"].message
    assert "block.0.weight" in found["backward_runs"].message or "parameter" in found["backward_runs"].message
    assert found["gradients[float64]"].status.value == "passed"


def test_reentrant_checkpointing_trains_and_the_first_layer_pitfall_is_a_note() -> None:
    found = _results(run_zoo("good_reentrant_checkpoint", only=("needs_input_grad",)))
    result = found["needs_input_grad"]
    assert result.status.value == "passed", result.message
    assert any("use_reentrant=False" in note for note in result.notes)


def test_a_wrong_backward_on_the_second_call_is_caught_and_says_so() -> None:
    result = _results(run_zoo("gradients_cache_filled_backward", only=("gradients",)))["gradients[float64]"]
    assert result.status.value == "failed"
    assert result.message.startswith("wrong gradient of input 0")
    assert "from the state the layer's first training call leaves" in result.message
    assert "second_call" in result.details


def test_state_the_next_call_ignores_costs_no_second_reference() -> None:
    from layercheck.numerics.second_looks import second_call_reference
    from layercheck.parent.invocation import Invocation
    from layercheck.parent.layout import Layout
    from layercheck.parent.registry import get
    from layercheck.support.context import Context
    from layercheck.target.subject import Target

    target = Target(nn.BatchNorm1d, [Layout.parse("4,3:BC")], args=(3,))
    ctx = Context(target, get("gradients"), "float64", invocation=Invocation(None), tolerances={}, devices=(),
                  shared={}, facts={})
    assert second_call_reference(ctx) is None  # running statistics do not change a training call


def test_a_power_iteration_under_no_grad_passes_with_a_note_and_a_training_only_bug_fails_naming_it() -> None:
    good = _results(run_zoo("good_spectral_norm", only=("gradients",)))
    assert good["gradients[float64]"].status.value == "passed"
    assert good["gradients[float32]"].status.value == "passed"
    assert "in eval mode they agree" in good["gradients[float64]"].notes[0]
    bad = _results(run_zoo("gradients_training_only_backward", only=("gradients",)))["gradients[float64]"]
    assert bad.status.value == "failed"
    assert "In eval mode the gradients agree: the mismatch is in training mode only" in bad.message
    assert bad.details["eval_mode_agrees"] is True


class _Unpicklable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.activation = staticmethod(torch.tanh)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))


def test_a_class_is_built_by_its_constructor_and_an_instance_that_cannot_be_copied_says_whose_step_failed() -> None:
    by_class = layercheck.check_layer(_Unpicklable, "4,3:BC")
    failed = [(r.check, r.message) for r in by_class.results if r.status.value in ("failed", "error")]
    assert [check for check, _ in failed] == ["copy"], failed  # only the check that copies the layer
    assert "attribute 'activation' of _Unpicklable (staticmethod)" in failed[0][1]
    by_instance = layercheck.check_layer(_Unpicklable(), "4,3:BC")
    assert by_instance.runs[0].error is not None
    assert by_instance.runs[0].error.startswith("layercheck could not deep-copy the _Unpicklable instance")
    assert "pass the class and its constructor arguments instead" in by_instance.runs[0].error


@pytest.mark.parametrize("name", ["good_cache_length_attribute", "good_fx_graph_module", "copy_staticmethod_attribute",
                                  "good_function_float_argument"])
def test_layers_that_a_deep_copy_or_a_buffer_restore_would_break_pass_on_other_seeds(name: str) -> None:
    expected = set(load_zoo(name).EXPECT_FAIL)  # a layer that cannot be copied fails copy alone
    for seed in (1, 2):
        report = run_zoo(name, seed=seed)
        bad = [(r.check, r.message) for r in report.results
               if r.status.value in ("failed", "error") and r.check not in expected]
        assert not bad, (seed, bad)

"""grad_output as a user meets it: which way a backward is not linear in its incoming gradient,
which output mishandles an undefined gradient, and when the check has nothing to compare.
tests/test_zoo.py judges the zoo as a whole."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from layercheck.engine.runner import run_target
from layercheck.parent.layout import Layout
from layercheck.parent.registry import get, select
from layercheck.parent.result import CheckResult, Status
from layercheck.target.subject import Target

from conftest import run_zoo


def outcome(layer: type | nn.Module, *layouts: str, **kwargs: object) -> CheckResult:
    target = Target(layer, [Layout.parse(text) for text in layouts], kwargs=kwargs, name="test-layer")
    (found,) = [r for r in run_target(target, select(only=("grad_output",))).results if r.check == "grad_output"]
    return found


def test_grad_output_is_a_default_check_that_reads_the_shared_forward_run() -> None:
    info = get("grad_output")
    assert info.default and "check_undefined_grad" in info.doc
    assert {"forward_runs", "backward_runs"} <= set(info.requires)


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x


class _IgnoresGradOutput(_Square):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x  # the chain rule forgotten


class _AddsAConstant(_Square):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad + 0.01


@pytest.mark.parametrize(("function", "phrase"), [
    (_IgnoresGradOutput, "it is the same for two different grad_outputs, so backward ignores grad_output"),
    (_AddsAConstant, "for a zero grad_output backward returns a nonzero gradient (largest 0.01), so it adds a term"),
])
def test_a_backward_that_is_not_linear_says_how(function: type, phrase: str) -> None:
    found = outcome(function, "4,5:BC")
    assert found.status is Status.FAILED
    where = rf"in {function.__qualname__}\.backward \(tests/test_grad_output\.py:\d+\): "  # its file and line first
    assert re.match(where + re.escape(f"the gradient of input 0 is not linear in grad_output: {phrase}"),
                    found.message), found.message
    assert ("backward of two grad_outputs w1 and w2 combined vs their gradients combined: gradient of input 0 "
            "differs at index") in found.message
    assert "Fix: multiply every term by the incoming gradient" in found.message
    assert found.details["tensor"] == "gradient of input 0"


@pytest.mark.parametrize(("name", "phrases"), [
    ("grad_output_clipped", ["gradient of input 0 differs", "backward transforms grad_output before using it",
                             "(rounds, clips, abs, sign, a power?)"]),
    ("grad_output_unused_output_ones", ["with each of the 2 outputs used alone", "with only output 0 used, the "
                                        "gradient of input 0 differs from the one with zero gradients for output(s) 1",
                                        "Fix: treat None (the gradient of an unused output) as zeros"]),
    ("grad_output_undefined_crash", ["with the output's gradient undefined, backward raised TypeError",
                                     "ctx.set_materialize_grads(False) receives None"]),
])
def test_zoo_failures_name_the_tensor_and_the_fix(name: str, phrases: list[str]) -> None:
    (found,) = [r for r in run_zoo(name, only=("grad_output",)).results if r.check == "grad_output"]
    assert found.status is Status.FAILED, found.message
    for phrase in phrases:
        assert phrase in found.message, f"{phrase!r} not in {found.message!r}"


def test_a_backward_that_cannot_run_twice_is_left_to_backward_pure() -> None:
    (found,) = [r for r in run_zoo("backward_pure_saved_output_in_place", only=("grad_output",)).results
                if r.check == "grad_output"]
    assert found.status is Status.SKIPPED
    assert found.message.startswith("a second backward over the same graph raises (backward raised RuntimeError")
    assert "backward_pure reports it" in found.message


def test_a_backward_that_writes_into_grad_output_is_judged_on_copies_and_said_to() -> None:
    """A memory-saving backward that computes its result in grad_output's memory is linear: every
    backward here gets a copy, so the grad_outputs combined are the ones drawn, and the message
    names the write instead of blaming how grad_output is used."""
    report = run_zoo("backward_pure_overwrites_grad_output", only=("grad_output", "backward_pure"))
    (found,) = [r for r in report.results if r.check == "grad_output"]
    assert found.status is Status.PASSED, found.message
    assert found.message.endswith("backward writes into the grad_output 0 it is handed (backward_pure reports it): "
                                  "each backward here was handed a copy of its own")


def test_a_backward_that_does_not_repeat_over_one_graph_is_left_to_backward_pure() -> None:
    """A backward that reuses its saved table as workspace gives another gradient the second time:
    no combination of grad_outputs over that graph can be judged, and it is not grad_output's fault."""
    (found,) = [r for r in run_zoo("backward_pure_own_table_reused", only=("grad_output", "backward_pure")).results
                if r.check == "grad_output"]
    assert found.status is Status.SKIPPED
    assert found.message.startswith("backward does not repeat over one graph: the same grad_output back-propagated "
                                    "again gives another gradient of input 0")
    assert "(backward_pure reports it)" in found.message and "transforms" not in found.message


def test_outputs_used_alone_add_up_for_torch_layers() -> None:
    found = outcome(nn.LSTM, "6,3,5:TBC", input_size=5, hidden_size=4)
    assert found.status is Status.PASSED, found.message
    assert found.message == ("backward is linear in grad_output (5 gradient(s) compared); each of 3 outputs used "
                             "alone gives its share of the gradient")


class _Doubled(_Square):
    """Turns materialisation off and handles None: what the undefined-gradient test wants."""

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        if grad is None:
            return None
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def test_an_undefined_gradient_reaches_only_functions_that_turn_materialisation_off() -> None:
    handled = outcome(_Doubled, "4,5:BC")
    assert handled.status is Status.PASSED
    assert handled.message.endswith("an undefined gradient reaching _Doubled gives none")
    plain = outcome(nn.Tanh, "4,5:BC")
    assert plain.message.endswith("one output, and no hand-written backward that turns materialisation off to "
                                  "receive None")

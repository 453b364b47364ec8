"""train_step as a user meets it: a parameter the optimizer cannot move, a frozen one that moves,
and what is frozen for the step. tests/test_zoo.py judges the zoo as a whole."""

from __future__ import annotations

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
    (found,) = [r for r in run_target(target, select(only=("train_step",))).results if r.check == "train_step"]
    return found


def zoo_outcome(name: str) -> CheckResult:
    (found,) = [r for r in run_zoo(name, only=("train_step",)).results if r.check == "train_step"]
    return found


def test_train_step_is_opt_in() -> None:
    assert not get("train_step").default
    assert "train_step" not in {p.info.id for p in select()}


def test_a_parameter_created_anew_in_forward_does_not_move() -> None:
    found = zoo_outcome("train_step_parameter_recreated")
    assert found.status is Status.FAILED
    assert found.message.startswith("after one SGD step (lr=0.1), parameter 'gate' moved by 0 at index (0,)")
    assert "it did not move at all: the optimizer stepped another tensor than the one the layer now holds" \
        in found.message
    assert found.details["tensor"] == "parameter 'gate'"


def test_a_frozen_parameter_that_forward_updates_is_named() -> None:
    found = zoo_outcome("train_step_state_in_frozen_parameter")
    assert found.status is Status.FAILED
    assert found.message.startswith("parameter 'running_mean' (requires_grad=False) changed in the training step")
    assert "Fix: keep what forward updates in a buffer" in found.message


class _WeightDecayInForward(nn.Module):
    """Shrinks its weight in every training forward: "built-in weight decay"."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 3))
        self.bias = nn.Parameter(torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            with torch.no_grad():
                self.weight.mul_(0.9)
                self.bias.mul_(0.9)
        return x * self.weight + self.bias


def test_a_parameter_moved_by_forward_as_well_as_by_the_step_is_caught() -> None:
    found = outcome(_WeightDecayInForward, "4,3:BC")
    assert found.status is Status.FAILED
    assert found.message.startswith("after one SGD step (lr=0.1), parameter 'weight' moved by")
    assert "something else moved it too (a forward that writes into the parameter?)" in found.message


def test_when_nothing_is_frozen_the_last_parameter_is_frozen_for_the_step() -> None:
    found = outcome(nn.Linear, "4,6:BC", in_features=6, out_features=3)
    assert found.status is Status.PASSED
    assert found.message == ("one SGD step moved 1 trainable parameter(s) by -lr·grad, 1 frozen one(s) unchanged "
                             "('bias' frozen for the step); state stays finite")


@pytest.mark.parametrize(("layer", "reason"), [
    (nn.GELU, "the layer has no trainable parameter"),
])
def test_train_step_is_skipped_with_the_reason(layer: type, reason: str) -> None:
    found = outcome(layer, "4,3:BC")
    assert found.status is Status.SKIPPED and reason in found.message

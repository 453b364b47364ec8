"""backward_pure as a user meets it: whose tensor a backward writes into decides the verdict (Note
[whose tensor] in checks/backward.py). tests/test_zoo.py judges the zoo as a whole."""

from __future__ import annotations

import json
import re

import torch
from torch import nn
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.engine.runner import run_target
from layercheck.parent.layout import Layout
from layercheck.parent.registry import select
from layercheck.parent.result import CheckResult, Status
from layercheck.target.subject import Target

from conftest import ZOO, run_zoo


def outcome(layer: type, *layouts: str) -> CheckResult:
    target = Target(layer, [Layout.parse(text) for text in layouts], name="test-layer")
    (found,) = [r for r in run_target(target, select(only=("backward_pure",))).results if r.check == "backward_pure"]
    return found


def test_a_backward_that_rewrites_its_own_table_the_same_way_passes_through_the_command_line() -> None:
    """Soft-DTW's pattern: the table is made by forward for backward alone, and backward sets its
    border again each time. Read back from the JSON report."""
    invoked = CliRunner().invoke(app, ["run", str(ZOO / "good_backward_own_table.py"), "--layout", "3,6:BT",
                                       "--check", "backward_pure", "--no-isolate", "--format", "json"])
    assert invoked.exit_code == 0, invoked.output
    (result,) = [r for r in json.loads(invoked.stdout)["runs"][0]["results"] if r["check"] == "backward_pure"]
    assert result["status"] == "passed"
    assert ("it writes into 1 saved tensor(s) of its own, which only a backward reads, and gives the same gradients "
            "again") in result["message"]


def test_a_backward_that_reuses_its_own_table_fails_on_the_second_backward_and_says_why() -> None:
    (found,) = [r for r in run_zoo("backward_pure_own_table_reused", only=("backward_pure",)).results
                if r.check == "backward_pure"]
    assert found.status is Status.FAILED
    where, _, message = found.message.partition(": ")
    assert where.startswith("in _SoftPathCost.backward (") and where.endswith("/backward_pure_own_table_reused.py:28)")
    assert message.startswith("backward writes into tensor 1 that _SoftPathCost saved for backward (made by the "
                              "forward for the backward alone, not the caller's), and not idempotently")
    assert ("; a second backward over the same graph (retain_graph=True) vs the first: gradient of input 0 differs"
            in found.message)
    assert "Fix: write the backward's own results into a new tensor" in found.message
    assert found.details["written"] == ["tensor 1 that _SoftPathCost saved for backward"]


class _ClampsSavedInput(torch.autograd.Function):
    """Writes into the caller's input it saved, the same way each time: a second backward repeats
    the first, but the caller's tensor has changed."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0) ** 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * grad * x.data.clamp_(min=0)  # the bug: x.clamp(min=0)


class _ClampsInput(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ClampsSavedInput.apply(x)


class _ClampsOwnCopy(torch.autograd.Function):
    """The same write into a copy forward made for backward: nobody else reads it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.clone())
        return x.clamp(min=0) ** 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * grad * x.data.clamp_(min=0)


class _ClampsCopy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ClampsOwnCopy.apply(x)


def test_an_idempotent_write_fails_into_the_callers_tensor_and_passes_into_the_backwards_own() -> None:
    caller = outcome(_ClampsInput, "4,6:BC")
    assert caller.status is Status.FAILED
    assert re.match(r"in _ClampsSavedInput\.backward \(\S+test_backward_pure\.py:\d+\): backward modified input 0 "
                    "in place", caller.message), caller.message
    own = outcome(_ClampsCopy, "4,6:BC")
    assert own.status is Status.PASSED, own.message
    assert "it writes into 1 saved tensor(s) of its own" in own.message


class _ScaleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return x * scale.abs()

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        magnitude = scale.data.abs_()  # the bug: scale.abs(); the same values every time, in the parameter
        return grad * magnitude, (grad * x * torch.sign(scale)).sum(0)


class _AbsScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(-1.0, 1.0, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ScaleFunction.apply(x, self.scale)


def test_a_parameter_the_backward_saved_is_the_callers_however_idempotent_the_write() -> None:
    found = outcome(_AbsScale, "4,6:BC")
    assert found.status is Status.FAILED
    assert re.match(r"in _ScaleFunction\.backward \(\S+test_backward_pure\.py:\d+\): backward modified tensor 1 that "
                    "_ScaleFunction saved for backward in place", found.message), found.message
    assert "that saved tensor is the caller's (an input, an output, a parameter or buffer" in found.message

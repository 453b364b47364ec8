"""observations at a second batch size, as a user meets it: a layer initialised for the layout's
batch and then called on another (training's last, smaller batch; inference on a few
observations). The first observations must give what they give in the layout's batch. Zoo
layers in tests/zoo/observations_*.py; tests/test_zoo.py judges the zoo as a whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.engine.runner import run_target
from layercheck.parent.layout import Layout
from layercheck.parent.registry import select
from layercheck.parent.result import CheckResult, Status
from layercheck.target.subject import Target

from conftest import ZOO, load_zoo, run_zoo, write_spec


def outcome(layer: type | nn.Module, *layouts: str) -> CheckResult:
    target = Target(layer, [Layout.parse(text) for text in layouts], name="test-layer")
    (found,) = [r for r in run_target(target, select(only=("observations",))).results if r.check == "observations"]
    return found


def invoke(*words: str) -> tuple[int, dict[str, dict[str, object]], str]:
    """layercheck run ... --format json through the command line: exit status, results by check."""
    invoked = CliRunner().invoke(app, ["run", *words, "--no-isolate", "--format", "json"])
    report = json.loads(invoked.stdout) if invoked.stdout.startswith("{") else {"runs": [{"results": []}]}
    return invoked.exit_code, {r["check"]: r for r in report["runs"][0]["results"]}, invoked.output


@pytest.mark.parametrize("name", ["observations_buffer_sized_by_batch", "observations_mask_cached_at_first_batch",
                                  "observations_reshape_fixed_batch"])
def test_what_keeps_the_first_batch_size_fails_at_a_second_one(name: str) -> None:
    """Each passed or skipped before: an observation alone broadcasts against what is sized by the
    batch (or builds its own cache); a batch of two after the layout's four raises."""
    layouts = [arg for layout in load_zoo(name).LAYOUTS for arg in ("--layout", layout)]
    status, results, output = invoke(str(ZOO / f"{name}.py"), *layouts, "--check", "observations")
    assert status == 1, output
    found = results["observations"]
    assert found["status"] == "failed"
    message = str(found["message"])
    assert message.startswith("a batch of 2 observations after one of 4 (the layout's), predict raised RuntimeError")
    assert "keeps the size of the batch it was initialised or first called with" in message
    assert "--skip observations" in message


def test_a_layer_that_takes_one_batch_size_says_so_in_its_spec(tmp_path: Path) -> None:
    name = "observations_reshape_fixed_batch"
    spec = write_spec(tmp_path, "fixed.yaml", str(ZOO / f"{name}.py"), *load_zoo(name).LAYOUTS,
                      checks={"skip": ["observations"]})
    status, results, output = invoke(str(spec))
    assert status == 0, output
    assert "observations" not in results and results["gradients"]["status"] == "passed"


def test_a_zoo_layer_made_for_one_batch_size_skips_observations_and_would_fail_it() -> None:
    """good_grad_recurrent's hidden state is built for a batch of three: it says so (SKIP, as a
    spec's checks: skip:), and asked for observations alone (--check), the check catches it."""
    assert {"observations"} == load_zoo("good_grad_recurrent").SKIP
    assert "observations" not in {r.check for r in run_zoo("good_grad_recurrent").results}
    (found,) = [r for r in run_zoo("good_grad_recurrent", only=("observations",)).results
                if r.check == "observations"]
    assert found.status is Status.FAILED
    assert found.message.startswith("a batch of 2 observations after one of 3 (the layout's), predict raised")


class _PreallocatedOutput(nn.Module):
    """Broken: reuses an output tensor allocated at the first call's batch and fills its first rows."""

    def __init__(self) -> None:
        super().__init__()
        self._out: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._out is None or self._out.shape[1:] != x.shape[1:]:
            self._out = torch.zeros_like(x)  # the bug: also when the batch changes
        out = self._out.clone()
        out[: x.shape[0]] = torch.tanh(x)
        return out


def test_an_output_sized_by_the_first_batch_names_both_sizes() -> None:
    found = outcome(_PreallocatedOutput, "4,5:BC")
    assert found.status is Status.FAILED
    assert found.message.startswith("output 0 has size (4, 5) for a batch of 2 but (4, 5) for a batch of 4; with its "
                                    "batch along dim 0 it should be (2, 5): something in the layer keeps the size")


class _CarriedState(nn.Module):
    """Correct: a leaky integrator whose state starts as one row and takes the batch's size on the
    first call, then carries over to the next call (as good_contract_recurrent's does)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("level", torch.zeros(1, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        level = 0.5 * self.level + x
        self.level = level.detach()
        return torch.tanh(level)


def test_the_state_is_put_back_before_the_second_batch_and_caches_are_kept() -> None:
    """A state of the layout's batch size carried into a batch of two would not broadcast: the
    check puts the state back first, as a user resets a recurrent layer between sequences."""
    found = outcome(_CarriedState, "4,5:BC")
    assert found.status is Status.PASSED, found.message
    assert found.message.endswith("a batch of 2 after one of 4 agrees with it")
    assert found.details["other_batch"] == 2


@pytest.mark.parametrize(("layout", "phrase"), [
    ("1,5:BC", "observations [0, 1] of 2 agree with the batch (output 0 along dim 0); batches of one work; a batch "
               "of 2 after one of 1 agrees with it"),
    ("2,5:BC", "observations [0, 1, 2, 3] of 4 agree with the batch (output 0 along dim 0); batches of one work; a "
               "batch of 4 after one of 2 agrees with it"),
    ("3,5:BC", "observations [0, 1, 2] of 3 agree with the batch (output 0 along dim 0); batches of one work; a batch "
               "of 2 after one of 3 agrees with it"),
])
def test_the_second_batch_size_differs_from_the_layouts(layout: str, phrase: str) -> None:
    found = outcome(nn.Linear(5, 2), layout)
    assert found.status is Status.PASSED, found.message
    assert found.message == phrase


class _CountsItsPredicts(nn.Module):
    """Records the batch size of every predict-mode call (a class attribute: every copy's)."""

    predicts: ClassVar[list[int]] = []

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            type(self).predicts.append(x.shape[0])
        return x * self.scale


def test_observations_goes_on_with_the_layer_predict_runs_called_on_the_layouts_batch() -> None:
    # Note [the layout's first batch] in support/runs.py: the layout's batch is predicted once
    # between the two checks, and observations still compares it with the other batch and
    # single observations
    _CountsItsPredicts.predicts = []
    target = Target(_CountsItsPredicts, [Layout.parse("6,3:BC")], name="counts")
    report = run_target(target, select(only=("predict_runs", "observations")))
    statuses = {r.check: r.status for r in report.results}
    assert statuses["predict_runs"] is Status.PASSED and statuses["observations"] is Status.PASSED
    assert _CountsItsPredicts.predicts.count(6) == 1
    assert 2 in _CountsItsPredicts.predicts and 1 in _CountsItsPredicts.predicts
    # run alone, observations makes the call itself
    _CountsItsPredicts.predicts = []
    assert outcome(_CountsItsPredicts, "6,3:BC").status is Status.PASSED
    assert _CountsItsPredicts.predicts.count(6) == 1


def test_a_layer_that_keeps_its_first_batch_fails_observations_after_predict_runs_as_alone() -> None:
    module = load_zoo("observations_mask_cached_at_first_batch")
    target = Target(module.LAYER, [Layout.parse(text) for text in module.LAYOUTS], name="zoo")
    after = [r for r in run_target(target, select(only=("predict_runs", "observations"))).results
             if r.check == "observations"]
    alone = outcome(module.LAYER, *module.LAYOUTS)
    assert [r.status for r in after] == [Status.FAILED] and alone.status is Status.FAILED
    assert after[0].message == alone.message

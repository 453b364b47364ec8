"""At large sizes the checks whose verdict does not depend on the batch size (any_batch) run on
a few of its observations; the others, and every layer that does not take a smaller batch as
it takes the whole one, run on all of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.engine.api import check_layer
from layercheck.parent.inputs import InputSpec
from layercheck.parent.layout import Layout
from layercheck.parent.registry import get, load_checks
from layercheck.target import subject
from layercheck.target.loading import resolve
from layercheck.target.subject import Target

from conftest import load_zoo

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sample at the tests' small sizes: two observations whatever the batch."""
    monkeypatch.setattr(subject, "SAMPLE_ELEMENTS", 1)


def test_the_sample_keeps_enough_observations_for_its_elements_and_leaves_other_inputs_whole() -> None:
    srelu = resolve("layers/srelu.py", base_dir=ROOT)
    sample = Target(srelu, [Layout.parse("24,24,20,128:SSCB")]).sampled()
    assert sample is not None and sample.layouts == (Layout.parse("24,24,20,5:SSCB"),)  # 5 x 11520 <= 65536
    function = resolve("layers/srelu_function.py", base_dir=ROOT)
    inputs = [Layout.parse("24,24,20,128:SSCB"), *[Layout.parse("1,1,20,1:UUCU")] * 4]
    sample = Target(function, inputs).sampled()
    assert sample is not None and sample.layouts == (Layout.parse("24,24,20,5:SSCB"), *inputs[1:])
    assert Target(srelu, [Layout.parse("8,8,20,4:SSCB")]).sampled() is None  # small already
    assert Target(nn.Bilinear(3, 3, 2), [Layout.parse("3,900:CB"), Layout.parse("3,800:CB")],
                  ).sampled() is None  # no common batch


def test_checks_that_do_not_depend_on_the_batch_run_on_two_observations_and_say_so(small_sample: None) -> None:
    load_checks()
    report = check_layer(resolve("layers/srelu.py", base_dir=ROOT), "4,4,3,6:SSCB")
    assert not report.failures()
    (run,) = report.runs
    ran = [r for r in run.results if r.status.value != "skipped"]
    sampled = {r.check for r in ran if r.details.get("sample") == {"observations": 2, "batch": 6}}
    assert {"needs_input_grad", "backward_pure", "grad_output", "dtype", "copy", "deterministic"} <= sampled
    assert not sampled & {"predict_runs", "backward_runs", "gradients", "finite", "observations"}
    assert sampled == {r.check for r in ran if get(r.check).any_batch}
    needs = next(r for r in ran if r.check == "needs_input_grad")
    assert needs.message.endswith("(on 2 of the batch's 6 observations)")


def test_a_bug_is_caught_on_the_sample_with_the_checks_message(small_sample: None) -> None:
    layer = load_zoo("needs_input_grad_packed").LAYER
    report = check_layer(layer, *load_zoo("needs_input_grad_packed").LAYOUTS, checks=["needs_input_grad"])
    (failure,) = [r for _, r in report.failures()]
    assert failure.check == "needs_input_grad" and failure.details["sample"]["observations"] == 2
    assert "receives no gradient" in failure.message or "differs from its gradient" in failure.message


class FixedBatch(nn.Module):
    """Correct, but written for one batch size: it cannot take fewer observations."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(6, 4) * self.weight


class BatchSizedParameter(nn.Module):
    """Correct, with a parameter per observation, sized in initialize from the B dimension."""

    def initialize(self, layout: Layout) -> None:
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, layout.size[layout.batch_dim]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale[:, None]


@pytest.mark.parametrize("layer", [FixedBatch, BatchSizedParameter])
def test_a_layer_that_does_not_take_a_smaller_batch_is_checked_on_all_of_it(small_sample: None, layer: type) -> None:
    target = Target(layer, [InputSpec(Layout.parse("6,4:BC"))])
    report = check_layer(layer, "6,4:BC", skip=["observations"])
    assert not report.failures(), report.failures()
    assert all("sample" not in r.details for r in report.runs[0].results)
    if layer is BatchSizedParameter:
        assert target.sampled() is None  # its parameters follow the batch


class CountsSmallBatches(nn.Module):
    """Correct; a plain attribute counts the calls on two observations or fewer: hidden state
    that only a call on the sample of the batch changes."""

    def __init__(self) -> None:
        super().__init__()
        self.small_calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] <= 2:
            self.small_calls += 1
        return 2 * x


def test_the_hidden_state_note_is_taken_on_the_sample(small_sample: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """state_valid judges buffers on the whole batch (its size rule names the batch), but which
    plain attributes a call changes does not depend on the batch size: its note is taken on the
    sample, where there is one; run alone too (the runner makes the sample before a check that
    requires backward_runs)."""
    for checks in ((), ["state_valid"]):
        (run,) = check_layer(CountsSmallBatches, "6,4:BC", checks=checks).runs
        state = next(r for r in run.results if r.check == "state_valid")
        assert state.status.value == "skipped" and "sample" not in state.details
        assert any("changes 'small_calls', kept in plain attributes" in note for note in state.notes), state.notes
    monkeypatch.setattr(Target, "sampled", lambda self: None)  # a layer that takes no smaller batch
    (whole,) = check_layer(CountsSmallBatches, "6,4:BC", checks=["state_valid"]).runs
    assert not next(r for r in whole.results if r.check == "state_valid").notes


def test_the_json_report_says_which_checks_ran_on_a_sample(tmp_path: Path) -> None:
    """At MATLAB's 24,24,20,128 through the command line: the report read back names the
    observations a check ran on, and the checks on the whole batch name none."""
    out = tmp_path / "report.json"
    invoked = CliRunner().invoke(app, ["run", str(ROOT / "layers/srelu.py"), "--layout", "24,24,20,128:SSCB",
                                       "--check", "needs_input_grad", "--check", "finite", "--no-isolate",
                                       "--format", "json", "--output", str(out)])
    assert invoked.exit_code == 0, invoked.output
    results = {r["check"]: r for r in json.loads(out.read_text())["runs"][0]["results"]}
    sampled = results["needs_input_grad"]
    assert sampled["details"]["sample"] == {"observations": 5, "batch": 128}
    assert sampled["message"].endswith("(on 5 of the batch's 128 observations)")
    assert results["finite"]["status"] == "passed" and "sample" not in results["finite"]["details"]


def test_the_catalogue_says_which_checks_run_on_a_sample() -> None:
    sampled = CliRunner().invoke(app, ["checks", "needs_input_grad"], env={"COLUMNS": "200"})
    whole = CliRunner().invoke(app, ["checks", "gradients"], env={"COLUMNS": "200"})
    assert sampled.exit_code == whole.exit_code == 0
    assert "inputs of more than 65,536 elements: runs on a few of the batch's observations" in sampled.stdout
    assert "observations" not in whole.stdout.split("\n\n")[0]

"""The Python API: check_layer and assert_layer_valid on instances, classes and operations."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from torch import nn

import layercheck
from layercheck import (
    Layout,
    Report,
    Status,
    UsageError,
    assert_layer_valid,
    check_layer,
)
from layercheck.engine.api import failure_message
from layercheck.target.loading import resolve

from conftest import ROOT

pytest_plugins = ["pytester"]

SReLUFunction = resolve(f"{ROOT / 'layers' / 'srelu_function.py'}:SReLUFunction")
PReLU = resolve(f"{ROOT / 'layers' / 'prelu.py'}:PReLU")


class PredictTypo(nn.Module):
    """Broken: the eval path reduces over a dimension that does not exist."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if self.training else x.mean(dim=7)


class NeedsGPU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        raise RuntimeError("no GPU here")


def test_both_are_exported_from_the_package() -> None:
    assert {"check_layer", "assert_layer_valid"} <= set(layercheck.__all__)
    assert layercheck.check_layer is check_layer and layercheck.assert_layer_valid is assert_layer_valid


def test_an_instance_is_checked_on_copies_and_left_untouched() -> None:
    layer = nn.BatchNorm1d(3)  # its training forward updates running statistics
    layer.train(False)
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    report = check_layer(layer, "4,3:BC")
    assert isinstance(report, Report) and report.passed, report.render("table")
    (run,) = report.runs
    assert run.kind == "module" and run.inputs == [{"size": [4, 3], "format": "BC"}]
    assert {r.check for r in run.results} >= {"predict_runs", "forward_runs", "forward_predict_agree"}
    assert layer.training is False and layer.weight.grad is None
    for key, value in layer.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_a_class_is_built_with_args_and_kwargs_and_layouts_may_be_strings_or_layouts() -> None:
    report = check_layer(PReLU, Layout.parse("2,3,4:BCS"), kwargs={"num_channels": 3, "channel_dim": 1},
                         checks=["forward_predict_agree"])
    (run,) = report.runs
    assert report.passed and run.custom_backward is True
    assert [r.check for r in run.results] == ["signatures", "predict_runs", "forward_runs", "forward_predict_agree"]
    assert run.target.endswith(":PReLU")


def test_an_autograd_function_takes_one_layout_per_input() -> None:
    report = check_layer(SReLUFunction, "4,3,5:BCU", *["1,3,1:UCU"] * 4, only=["forward_runs"])
    (run,) = report.runs
    assert run.kind == "function" and report.passed
    assert run.results[-1].details["custom_backward"] == ["SReLUFunction"]


def test_options_select_skip_and_seed() -> None:
    report = check_layer(nn.GELU(), "4,3:BC", skip=["forward_predict_agree"], seed=7)
    (run,) = report.runs
    assert run.seed == 7 and "forward_predict_agree" not in {r.check for r in run.results}
    assert "--seed 7" in check_layer(PredictTypo, "4,3:BC", seed=7).failures()[0][1].details["reproduce"]


def test_assert_layer_valid_lists_the_failed_checks_with_their_messages() -> None:
    with pytest.raises(AssertionError) as info:
        assert_layer_valid(PredictTypo(), "4,3:BC")
    text = str(info.value)
    assert text.startswith("predict_runs failed (test_api:PredictTypo is invalid)\n")
    assert "predict_runs failed: predict raised IndexError" in text
    assert "reproduce: layercheck.check_layer(layer, '4,3:BC', only=['predict_runs'], seed=0)" in text
    assert "forward_runs" not in text  # it passed: not listed


def test_assert_layer_valid_returns_the_report_of_a_valid_layer() -> None:
    report = assert_layer_valid(nn.Linear(5, 3), Layout(size=(4, 5), format="BC"))
    assert report.passed and report.runs[0].summary["failed"] == 0


def test_a_constructor_that_raises_is_reported_not_raised() -> None:
    report = check_layer(NeedsGPU, "4,3:BC")
    assert report.runs[0].status is Status.ERROR and "no GPU here" in report.runs[0].error
    with pytest.raises(AssertionError, match=r"could not be checked: constructing NeedsGPU\(\) raised RuntimeError"):
        assert_layer_valid(NeedsGPU, "4,3:BC")


def test_the_report_renders_to_every_format() -> None:
    report = check_layer(nn.Tanh(), "4,3:BC", checks=["predict_runs"])
    assert json.loads(report.render("json"))["runs"][0]["results"][-1]["check"] == "predict_runs"
    # a passing layer is one row of the Markdown summary: its counts, not its checks
    assert "<testcase" in report.render("junit") and "| 2 passed | `4,3:BC` |" in report.render("markdown")


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: check_layer(nn.Tanh(), "4,3:BX"), UsageError, 'unknown label "X"'),
        (lambda: check_layer(nn.Tanh(), "4,3:BC", checks=["predict_run"]), UsageError, "did you mean 'predict_runs'"),
        (lambda: check_layer(nn.Tanh(), "4,3:BC", checks="predict_runs"), TypeError, "sequence of check ids"),
        (lambda: check_layer(nn.Tanh(), "4,3:BC", tolerance={"float31": 1e-3}), UsageError, "unknown dtype"),
        (lambda: check_layer(nn.Tanh()), TypeError, "one layout per input"),
        (lambda: check_layer(nn.Linear(3, 3), "4,3:BC", args=[3, 3]), TypeError, "already built"),
        (lambda: check_layer(torch.sigmoid, "4,3:BC"), TypeError, "nn.Module instance"),
        (lambda: check_layer(int, "4,3:BC"), TypeError, "nn.Module instance"),
    ],
)
def test_invalid_arguments_raise_before_anything_runs(call, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call()


MINE = """
from torch import nn

from layercheck import assert_layer_valid


class PredictTypo(nn.Module):
    def forward(self, x):
        return x * 2 if self.training else x.mean(dim=7)


def test_layer():
    assert_layer_valid(PredictTypo(), "4,3:BC", checks=["predict_runs"], skip=["forward_runs"])
"""


def test_in_pytest_the_short_summary_names_the_checks_and_no_layercheck_frame_shows(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine=MINE)
    result = pytester.runpytest("-rf", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["FAILED test_mine.py::test_layer - AssertionError: predict_runs failed*"])
    text = result.stdout.str()
    assert "E       AssertionError: predict_runs failed (test_mine:PredictTypo is invalid)" in text
    assert "layercheck" + "/engine/api.py" not in text and "raise AssertionError(failure_message" not in text
    assert '>       assert_layer_valid(PredictTypo(), "4,3:BC"' in text  # the user's line is the one shown


def test_the_first_line_lists_failures_and_errors() -> None:
    report = check_layer(PredictTypo, "4,3:BC", checks=["predict_runs"], timeout=30)
    run = report.runs[0]
    crashed = layercheck.CheckResult("state_dict", "", Status.ERROR, 0.1, "boom")
    both = Report(runs=[replace(run, results=[*run.results, crashed])], environment={}, version="", seconds=0.1)
    assert failure_message(both).splitlines()[0] == (
        "predict_runs failed; state_dict ended in an error (test_api:PredictTypo is invalid)")

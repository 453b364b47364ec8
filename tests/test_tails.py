"""The gradient check's draw into the tails (Note [tails]): a backward wrong only at large
magnitudes is caught, on small layers and on large ones (on the first observations of the
batch); a layer that overflows there is named in a note, not failed; and float32 that is not
finite there where float64 is fails (Note [tails in float32])."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from layercheck import check_layer
from layercheck.checks import gradients as gradient_checks
from layercheck.numerics import second_looks
from layercheck.parent.result import Status

from conftest import load_zoo, run_zoo


def _gradients(report) -> dict[str, object]:
    return {r.variant: r for r in report.results if r.check == "gradients"}


def test_a_backward_wrong_only_beyond_the_standard_draws_range_fails_on_the_scaled_draw() -> None:
    result = _gradients(run_zoo("gradients_wrong_in_the_tails", only=("gradients",)))["float64"]
    assert result.status is Status.FAILED
    assert "wrong gradient of input 0" in result.message
    assert f"on the inputs scaled by {second_looks.TAILS_SCALE:g}" in result.message
    assert "tails" in result.details


def test_without_the_scaled_draw_the_same_backward_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the draw adds: standard-normal inputs at this size never reach |x| > 4.6."""
    monkeypatch.setattr(gradient_checks, "tails_draw", lambda ctx, beside=False: None)
    result = _gradients(run_zoo("gradients_wrong_in_the_tails", only=("gradients",)))["float64"]
    assert result.status is Status.PASSED, result.message


class NarrowKernel(nn.Module):
    """exp(x² / 2σ²) with a narrow σ: finite in float64 on standard-normal inputs of this
    size (|x| < 5.6), infinite once |x| passes 5.6."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x.square() / (2 * 0.15**2))


def test_a_layer_that_overflows_on_the_scaled_draw_gets_a_note_naming_the_magnitude() -> None:
    report = check_layer(NarrowKernel, "4,3:BC", seed=0, checks=["gradients"]).runs[0]
    result = _gradients(report)["float64"]
    assert result.status is Status.PASSED, result.message
    (note,) = [n for n in result.notes if "scaled by" in n]
    assert "output 0 has" in note and "non-finite" in note and "magnitudes up to" in note
    assert "first at the inputs scaled by" in note  # from what magnitude, not only that it does


# -- large layers ------------------------------------------------------------------------------


def test_a_large_layer_wrong_only_beyond_six_fails_on_the_scaled_first_observations() -> None:
    """8,16,32,32: standard-normal inputs stay within ±4.6 and a large layer gets no second
    draw; the runner's sample of the batch (4 observations, made by forward_predict_agree)
    scaled by 4 reaches beyond 6."""
    report = run_zoo("gradients_wrong_in_the_tails_large", only=("forward_predict_agree", "gradients"))
    result = _gradients(report)["float64"]
    assert result.status is Status.FAILED, result.message
    assert "wrong gradient of input 0" in result.message
    assert "on the inputs scaled by 4" in result.message
    assert "on the first 4 observations of the batch" in result.message


def test_run_alone_the_gradient_check_scales_the_sample_of_the_batch_too() -> None:
    """--check gradients: no check that runs on the sample comes first, and the runner makes
    the sample before the gradient check (it requires backward_runs, which passed), so the draw
    into the tails is the one the default suite makes, not one of the whole batch."""
    report = run_zoo("gradients_wrong_in_the_tails_large", only=("gradients",))
    result = _gradients(report)["float64"]
    assert result.status is Status.FAILED, result.message
    assert "on the inputs scaled by 4" in result.message
    assert "on the first 4 observations of the batch" in result.message


def test_without_the_scaled_draw_the_large_layer_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gradient_checks, "tails_draw", lambda ctx, beside=False: None)
    report = run_zoo("gradients_wrong_in_the_tails_large", only=("forward_predict_agree", "gradients"))
    assert _gradients(report)["float64"].status is Status.PASSED


def test_a_layer_above_the_second_draws_limit_without_a_sample_is_scaled_whole() -> None:
    """4,8,24,24: above SECOND_DRAW_LIMIT, below the size where the runner samples the batch."""
    layer = load_zoo("gradients_wrong_in_the_tails_large").LAYER
    result = _gradients(check_layer(layer, "4,8,24,24:BCSS", seed=0, checks=["gradients"]).runs[0])["float64"]
    assert result.status is Status.FAILED, result.message
    assert "on the inputs scaled by 4 (magnitudes up to" in result.message
    assert "observations" not in result.message


# -- float32 in the tails ----------------------------------------------------------------------


def test_a_softmax_that_overflows_in_float32_fails_saying_where_and_from_what_magnitude() -> None:
    results = _gradients(run_zoo("gradients_softmax_overflows_in_float32", only=("gradients",)))
    assert results["float64"].status is Status.PASSED, results["float64"].message
    message = results["float32"].message
    assert results["float32"].status is Status.FAILED, message
    assert "on the inputs scaled by 4" in message and "the float32 output 0 has" in message
    assert "where the float64 run's are finite" in message and "first at the inputs scaled by" in message
    assert "torch.softmax" in message


def test_without_the_float32_tails_the_overflowing_softmax_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gradient_checks, "tails_in_float32", lambda ctx, beside=False: None)
    results = _gradients(run_zoo("gradients_softmax_overflows_in_float32", only=("gradients",)))
    assert results["float32"].status is Status.PASSED, results["float32"].message


def test_the_stable_softmax_agrees_in_float32_in_the_tails() -> None:
    result = _gradients(run_zoo("good_sharp_softmax", only=("gradients",)))["float32"]
    assert result.status is Status.PASSED, result.message
    assert "on the inputs scaled by 4 (magnitudes up to" in result.message
    assert "the float32 run is finite wherever the float64 run is" in result.message


class _ExpSavedInBFloat16(torch.autograd.Function):
    """exp(x), whose float32 backward recomputes exp from its input saved as bfloat16 to save
    memory: bfloat16's rounding of x moves exp(x) by x·2^-9, 0.6% at 3, 2.5% at 13."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.to(torch.bfloat16) if x.dtype == torch.float32 else x)
        return torch.exp(x)

    @staticmethod
    def backward(ctx, grad):
        (saved,) = ctx.saved_tensors
        return grad * torch.exp(saved.to(grad.dtype))


class ExpSavedInBFloat16(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ExpSavedInBFloat16.apply(x)


def test_float32_gradients_far_from_float64_in_the_tails_are_recorded_not_judged() -> None:
    """At large magnitudes float32 parts from float64 where nothing is wrong (an underflow to
    zero, a routing decision near a tie), so the distance is recorded in the details only
    (Note [tails in float32]); this one is 2.5% there."""
    result = _gradients(check_layer(ExpSavedInBFloat16, "4,3,5:BCU", seed=3, checks=["gradients"]).runs[0])["float32"]
    assert result.status is Status.PASSED, result.message
    assert result.details["tails_relative_differences"]["input 0"] > 0.01
    assert "the float32 run is finite wherever the float64 run is" in result.message

"""The gradient check's draw into the tails (Note [tails]): a backward wrong only at large
magnitudes is caught; a layer that overflows there is named in a note, not failed."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from layercheck import check_layer
from layercheck.checks import gradients as gradient_checks
from layercheck.numerics import second_looks
from layercheck.result import Status

from conftest import run_zoo


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

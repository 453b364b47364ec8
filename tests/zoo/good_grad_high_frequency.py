"""Correct: high-frequency sinusoidal features, sin(k·x) with k = 1e5 (a SIREN or Fourier-feature
layer taken to the extreme). The layer is steep at every point: at the 1e-8 step a central
difference strays by its h² truncation error (about 1e-5 of the spread), which Richardson
extrapolation from h and 2h removes (Note [steep at the base step] in numerics/engine.py)."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL: set[str] = set()


class HighFrequency(nn.Module):
    def __init__(self, k: float = 1e5) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.k * x)


LAYER = HighFrequency

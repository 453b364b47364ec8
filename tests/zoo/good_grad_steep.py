"""Correct: a layer so steep that the central difference at the base step (1e-8) strays by the
h² term, and even its extrapolation from h and 2h does: sin(3e6·x) in one feature (the
per-element step is about a tenth of a period there), the others passed through. A whole
GhostNet in training at 32×32 is like this (its central difference is 4% off at 1e-8, right to
seven digits at 1e-10): the engine extrapolates again from smaller steps while their rounding
stays within the tolerance (Note [steep at the base step]); the analytic gradient is right and
must pass."""

import torch
from torch import nn

LAYOUTS = ["4,16:BC"]
EXPECT_FAIL: set[str] = set()


class Steep(nn.Module):
    def forward(self, x):
        return torch.cat([torch.sin(3e6 * x[:, :1]), x[:, 1:]], dim=1)


LAYER = Steep

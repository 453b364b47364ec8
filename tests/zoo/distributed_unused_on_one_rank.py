"""Broken under data parallelism (the opt-in ``distributed`` check): a learned correction for
outliers runs only when the batch holds one. On the generated batch one rank's half holds an
outlier and the other's does not, so ``outlier.weight`` gets no gradient on that rank and DDP
raises "Expected to have finished reduction in the prior iteration" (or waits for it). Each
observation's output is the same either way (the correction of a non-outlier is zero), so the
default suite passes it."""

import torch
from torch import nn

LAYOUTS = ["8,4:BC"]
EXPECT_FAIL: set[str] = set()
THRESHOLD = 1.5


class OutlierCorrection(nn.Module):
    def __init__(self, features: int = 4) -> None:
        super().__init__()
        self.base = nn.Linear(features, features)
        self.outlier = nn.Linear(features, features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        if bool((x > THRESHOLD).any()):  # the bug: whether a parameter is used depends on this rank's data
            y = y + self.outlier((x - THRESHOLD).clamp(min=0))
        return y


LAYER = OutlierCorrection

"""Broken: predict raises (a typo in the eval path). Only predict_runs is blamed; the checks
that need predict are skipped naming it."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"predict_runs"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x.mean(dim=7)
        return x * 2


LAYER = Layer

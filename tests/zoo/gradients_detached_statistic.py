"""Broken: a layer normalisation whose mean is detached (``x.mean(...).detach()``), so no
gradient flows through the statistic and the input's gradient is wrong. A detach of a smooth
value is no straight-through estimator: the gradient check must not take it for one."""

import torch
from torch import nn

LAYOUTS = ["3,6:BC"]
EXPECT_FAIL = {"gradients"}


class DetachedMeanNorm(nn.Module):
    def __init__(self, channels: int = 6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, channels))

    def forward(self, x):
        mean = x.mean(dim=1, keepdim=True).detach()
        centred = x - mean
        return centred / (centred.pow(2).mean(dim=1, keepdim=True) + 1e-5).sqrt() * self.weight


LAYER = DetachedMeanNorm

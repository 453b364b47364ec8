"""Broken: a gated residual that detaches its input by mistake (``x.detach()`` meant to stop a
statistic only): the output changes with the input, yet no gradient reaches it, so the
network before the layer is never trained. Taken for a shape-only input, it would pass."""

import torch
from torch import nn

LAYOUTS = ["3,5,4:BTC"]
EXPECT_FAIL = {"backward_runs"}


class DetachedGate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return x.detach() * torch.sigmoid(self.weight)


LAYER = DetachedGate

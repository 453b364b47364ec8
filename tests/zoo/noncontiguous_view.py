"""Broken: forward flattens with .view(), which needs a contiguous input; a channels-last or
sliced input raises "view size is not compatible with input tensor's size and stride"."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"noncontiguous"}


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1.0, 1.0, 15))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.view(x.shape[0], -1)  # bug: .reshape() is needed
        return (flat * self.weight).view(x.shape)


LAYER = Layer

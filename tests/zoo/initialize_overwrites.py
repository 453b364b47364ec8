"""Broken: initialize re-creates the weight on every call, so a layer loaded from a
checkpoint and then initialised loses its weights."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"initialize"}


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight: nn.Parameter | None = None

    def initialize(self, layout) -> None:
        channels = layout.size[layout.finddim("C")[0]]
        self.weight = nn.Parameter(torch.randn(channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


LAYER = Layer

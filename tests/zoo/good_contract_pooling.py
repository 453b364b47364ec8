"""Correct: format-changing pooling SSCB -> CB (global average over both spatial dimensions,
then a learnable per-channel scale). The batch dimension moves from 3 to 1: observations
must find it there."""

import torch
from torch import nn

LAYOUTS = ["5,4,3,6:SSCB"]
EXPECT_FAIL: set[str] = set()


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale: nn.Parameter | None = None

    def initialize(self, layout) -> None:
        if self.scale is None:
            channels = layout.size[layout.finddim("C")[0]]
            self.scale = nn.Parameter(torch.linspace(0.5, 2.0, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(0, 1)) * self.scale.unsqueeze(1)


LAYER = Layer

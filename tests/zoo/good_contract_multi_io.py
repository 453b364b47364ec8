"""Correct: two inputs of different layouts and nested outputs, one of them integer (an
argmax, ignored by numerical checks but compared exactly by observations and determinism)."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU", "4,3:BC"]
EXPECT_FAIL: set[str] = set()


class Layer(nn.Module):
    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, channels))

    def forward(self, x: torch.Tensor, gate: torch.Tensor):
        y = x * torch.sigmoid(gate).unsqueeze(-1) * self.weight.view(1, -1, 1)
        summary = y.sum(dim=-1)
        return y, (summary, summary.argmax(dim=1))


LAYER = Layer

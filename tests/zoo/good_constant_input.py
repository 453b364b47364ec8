"""Correct: a layer with a second, constant float input (a fixed per-position scale, declared
``grad=no``): it is passed as is, never differenced, and its gradient stays None."""

import torch
from torch import nn

LAYOUTS = ["3,4,6:BTC", "4,6:TC grad=no"]
EXPECT_FAIL: set[str] = set()


class ScaledTanh(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1.0, 1.0, 6))

    def forward(self, x, scale):
        return torch.tanh(x * scale.detach() + self.weight)


LAYER = ScaledTanh

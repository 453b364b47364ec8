"""Broken: forward multiplies by ``self.gain.data``, so the parameter is used but autograd
never sees it: it receives no gradient and is never trained."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"backward_runs"}


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.full((3, 1), 1.5))
        self.bias = nn.Parameter(torch.zeros(3, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * self.gain.data + self.bias)  # the bug: .data


LAYER = Layer

"""Broken: a running mean updated without torch.no_grad(): the buffer holds a tensor attached
to the autograd graph, which keeps every call's graph alive (memory grows each step)."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"state_valid"}


class Layer(nn.Module):
    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.register_buffer("running_mean", torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.weight.view(1, -1, 1)
        if self.training:
            self.running_mean = 0.9 * self.running_mean + 0.1 * y.mean(dim=(0, 2))  # bug: not detached
        return y


LAYER = Layer

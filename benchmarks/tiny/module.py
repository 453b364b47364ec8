"""A tiny Module whose backward is autograd's: start-up figures (benchmarks/goals.py)."""

import torch
from torch import nn


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * self.weight

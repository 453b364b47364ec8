"""Correct: a small MLP of torch operations, Linear -> GELU -> Linear -> tanh: smooth and
curved, with second derivatives that mix the input and every parameter. Passes every default
check and both higher-derivative checks."""

import torch
from torch import nn

LAYOUTS = ["6,5:BC"]
EXPECT_FAIL: set[str] = set()
ENABLE = ("gradgrad", "forward_ad")


class TinyMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(5, 8)
        self.outer = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.outer(nn.functional.gelu(self.inner(x))))


LAYER = TinyMLP

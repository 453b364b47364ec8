"""Correct: a hand-written dropout; forward and predict differ legitimately (reads self.training)."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()


class Layer(nn.Module):
    def __init__(self, p: float = 0.3) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        keep = (torch.rand_like(x) > self.p).to(x.dtype)
        return x * keep / (1 - self.p)


LAYER = Layer

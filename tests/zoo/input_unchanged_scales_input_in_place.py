"""Broken: predict scales its input in place by a learnable weight "to save memory at inference"
(as two reported layers did), so the caller's tensor is changed, and a second call on it
compounds the scale. Only input_unchanged must fail: the copy check, which predicts the original
and its copies, feeds each call a fresh input, and so does every other check."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"input_unchanged"}


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return x * self.weight
        with torch.no_grad():
            return x.mul_(self.weight)  # bug: writes into the caller's tensor


LAYER = Layer

"""Correct: kinks of torch operations everywhere — PReLU, abs, ReLU and 2x2 max-pooling. Second
derivatives are zero almost everywhere except across the kinks, where the first gradient
jumps: a difference step that crosses one must not be reported by gradgrad, and forward mode
(torch's own rules) must agree with the differences."""

import torch
from torch import nn

LAYOUTS = ["2,3,6,6:BCSS"]
EXPECT_FAIL: set[str] = set()
ENABLE = ("gradgrad", "forward_ad")


class KinkyPooling(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.prelu = nn.PReLU(3, init=0.2)
        self.mix = nn.Parameter(torch.tensor([0.8, -0.4]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = nn.functional.max_pool2d(self.prelu(x), 2)
        return self.mix[0] * pooled.abs() + self.mix[1] * torch.relu(pooled - 0.3) * pooled


LAYER = KinkyPooling

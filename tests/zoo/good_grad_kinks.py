"""Correct: kinks everywhere — ReLU, abs, and a clamp between learnable per-channel bounds
(torch.maximum/minimum with tensors, so the bounds get gradients too). On standard-normal
inputs many elements sit near a kink; a difference step that crosses one must not be
reported as a wrong gradient."""

import torch
from torch import nn

LAYOUTS = ["6,4,16:BCU"]
EXPECT_FAIL: set[str] = set()


class KinkyLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.low = nn.Parameter(torch.linspace(-1.2, -0.3, 4).view(1, 4, 1))
        self.high = nn.Parameter(torch.linspace(0.4, 1.5, 4).view(1, 4, 1))
        self.mix = nn.Parameter(torch.tensor([0.7, -0.3, 0.2]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        clamped = torch.minimum(torch.maximum(x, self.low), self.high)
        return self.mix[0] * clamped + self.mix[1] * torch.relu(x - 0.5) + self.mix[2] * x.abs()


LAYER = KinkyLayer

"""Broken: Gaussian noise meant as a training regulariser is added in eval mode too, so the
same input predicts differently on every call."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"deterministic"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) + 0.05 * torch.randn_like(x)  # bug: not only when self.training


LAYER = Layer

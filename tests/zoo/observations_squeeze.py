"""Broken: forward squeezes every size-one dimension, so a batch of one observation loses its
batch dimension (4x3x1 works, 1x3x1 comes back as 3)."""

import torch
from torch import nn

LAYOUTS = ["4,3,1:BCU"]
EXPECT_FAIL = {"observations"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x).squeeze()  # bug: squeeze() with no dim


LAYER = Layer

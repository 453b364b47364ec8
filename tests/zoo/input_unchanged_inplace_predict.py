"""Broken: "to save memory at inference" predict applies the activation in place, overwriting
the caller's tensor (a skip connection reading it afterwards gets the activated values)."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"input_unchanged"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return torch.relu(x)
        return torch.relu_(x)  # bug: writes into the input


LAYER = Layer

"""Broken: an activation observer (as used for quantisation) tracks the running absolute
maximum of its input, and stores it with .float() "for safety": after a float64 step the
buffer is float32. Outputs and gradients keep their type; only the state does not."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"dtype"}
EXPECT_NOTES = {"gradients": "computes in float32 inside"}  # true of this layer: it says so


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(0.8))
        self.register_buffer("running_absmax", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            with torch.no_grad():
                self.running_absmax = torch.maximum(self.running_absmax, x.abs().amax()).float()
        return x * self.weight


LAYER = Layer

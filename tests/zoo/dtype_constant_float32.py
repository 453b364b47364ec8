"""Broken: forward multiplies by a per-channel constant made with torch.ones (float32, on the
input's device) instead of x.new_ones: a float16 input comes out float32. float32 and float64
hide it (promotion keeps the wider type); the opt-in float16 variant must catch it."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
ENABLE = ["dtype:float16"]
EXPECT_FAIL = {"dtype"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        window = torch.ones(x.shape[-1], device=x.device)  # bug: no dtype=x.dtype
        return torch.tanh(x) * window


LAYER = Layer

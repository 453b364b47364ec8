"""Correct: a filter-response-style normalisation that computes its statistic in float32 whatever
the input's dtype (``x.float()``), casts it back and keeps the main path in the input's dtype:
the float64 copy's gradient is right (it equals a pure-float64 copy's to 5e-8), but its output
moves by float32 roundings of the statistic, which a 1e-8 finite-difference step cannot see
through. The gradient check must notice the float32 island from what runs, difference with a
step and tolerance for float32, and say so."""

import torch
from torch import nn

LAYOUTS = ["2,4,8,8:BCSS"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "computes in float32 inside"}


class FloatIslandNorm(nn.Module):
    def __init__(self, channels: int = 4, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, channels).view(1, channels, 1, 1))
        self.eps = eps

    def forward(self, x):
        s = x.float().pow(2).mean(dim=(2, 3), keepdim=True)
        return x * torch.rsqrt(s + self.eps).to(x.dtype) * self.weight


LAYER = FloatIslandNorm

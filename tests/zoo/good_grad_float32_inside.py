"""Correct: a normalisation that computes in float32 internally whatever the input type
(the LLaMA RMSNorm idiom ``x.float() ... .type_as(x)``). Its float64 copy is only float32
precise, so finite differences with a float64-sized step are noise: the gradient check must
notice, use a larger step, and still pass."""

import torch
from torch import nn

LAYOUTS = ["4,16:BC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "computes in float32 inside"}


class Float32RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return h.type_as(x) * self.weight


LAYER = Float32RMSNorm

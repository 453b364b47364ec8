"""Correct: the fused bias-add of gradients_half_bias_grad_accumulated_in_half.py with its
backward summing the bias gradient in float32 (float64 for a float64 one) and casting the total back (as PyTorch's own
reductions accumulate): in float16 and bfloat16 it is as close to the float64 gradient as
autograd's derivative of the same forward in that dtype, and gradients[float16|bfloat16] pass it
against that yardstick."""

import torch
from torch import nn

LAYOUTS = ["2048,8:BC"]
ENABLE = ["gradients:float16", "gradients:bfloat16"]
EXPECT_FAIL: set[str] = set()


class _BiasAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, g):
        wide = torch.promote_types(g.dtype, torch.float32)  # float32, or float64 for a float64 gradient
        total = torch.zeros_like(g[0], dtype=wide)
        for start in range(0, g.shape[0], 8):
            total = total + g[start:start + 8].to(wide).sum(0)
        return g, total.to(g.dtype)


class FusedBiasAdd(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, dim))

    def forward(self, x):
        return _BiasAdd.apply(x, self.bias)


LAYER = FusedBiasAdd

"""Broken: a fused bias-add whose hand-written backward sums the bias gradient over the batch in
the gradient's own dtype, 8 rows at a time (a running total kept in a register of the input's
type). In float64 and float32 that is exact enough for every other check, and in float16 and
bfloat16 the bias gradient stays within the gradient check's fixed tolerances (0.1 and 0.2
relative to the float64 gradient): it passed every check. autograd's derivative of the same
forward (x + b) in the same dtype accumulates in float32 and is many times closer:
gradients[float16] and gradients[bfloat16] hold the hand-written backward to k times autograd's
error, and fail it."""

import torch
from torch import nn

LAYOUTS = ["2048,8:BC"]
ENABLE = ["gradients:float16", "gradients:bfloat16"]
EXPECT_FAIL = {"gradients"}


class _BiasAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, g):
        total = torch.zeros_like(g[0])  # the running total in g's dtype: the bug
        for start in range(0, g.shape[0], 8):
            total = total + g[start:start + 8].sum(0)
        return g, total


class FusedBiasAdd(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, dim))

    def forward(self, x):
        return _BiasAdd.apply(x, self.bias)


LAYER = FusedBiasAdd

"""Broken: a fused bias-add kernel whose backward sums the bias gradient over the batch in the
gradient's own dtype, 8 rows at a time, the way a kernel keeps a running total in a register of
the input's type. In float64 and float32 that is exact enough for every other check; in bfloat16
each of the 256 partial sums is rounded to 8 bits, and the bias gradient ends up many times worse
than PyTorch's own bfloat16 bias gradient (which accumulates in float32). The precision is lost
only in the gradient: the forward is exact. `reference` catches it against plain x + b."""

import torch
from torch import nn

LAYOUTS = ["2048,8:BC"]
EXPECT_FAIL = {"reference"}


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


class BiasAddRef(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, dim))

    def forward(self, x):
        return x + self.bias


class FusedBiasAdd(BiasAddRef):
    def forward(self, x):
        return _BiasAdd.apply(x, self.bias)


LAYER = FusedBiasAdd
REFERENCE = BiasAddRef

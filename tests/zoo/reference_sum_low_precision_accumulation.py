"""Broken: a row-sum kernel (the reduction inside a norm or a pooling) that keeps its running
total in the input's dtype, 8 columns at a time, where it should accumulate in float32. Its
backward (the gradient spread back over the row) is right, and so is every float32 and float64
result: finite differences and every other check pass. In bfloat16 and float16 the rounded
running total is many times further from the float64 sum than PyTorch's own x.sum(-1) in that
dtype (which accumulates in float32): the most common low-precision kernel bug, and `reference`
catches it."""

import torch
from torch import nn

LAYOUTS = ["4,1024:BC"]
EXPECT_FAIL = {"reference"}


class _RowSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.n = x.shape[-1]
        total = torch.zeros_like(x[..., 0])  # accumulates in x's dtype: the bug
        for start in range(0, x.shape[-1], 8):
            total = total + x[..., start:start + 8].sum(-1)
        return total

    @staticmethod
    def backward(ctx, g):
        return g.unsqueeze(-1).expand(*g.shape, ctx.n).clone()


class RowSumRef(nn.Module):
    def forward(self, x):
        return x.sum(-1)


class RowSum(nn.Module):
    def forward(self, x):
        return _RowSum.apply(x)


LAYER = RowSum
REFERENCE = RowSumRef

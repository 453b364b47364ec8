"""Correct: the row-sum kernel of reference_sum_low_precision_accumulation.py with its running
total in float32 (float64 for float64 inputs), rounded to the input's dtype once at the end: as
accurate as PyTorch's own x.sum(-1) in every dtype, and it passes `reference`."""

import torch
from torch import nn

LAYOUTS = ["4,1024:BC"]
EXPECT_FAIL: set[str] = set()


class _RowSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.n = x.shape[-1]
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        total = torch.zeros_like(x[..., 0], dtype=wide)
        for start in range(0, x.shape[-1], 8):
            total = total + x[..., start:start + 8].to(wide).sum(-1)
        return total.to(x.dtype)

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

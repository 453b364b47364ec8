"""Correct: the blocked masked-mean kernel of reference_masked_tail_dropped.py with its last,
partial block loaded under the mask: it computes the reference's function and passes `reference`
in every dtype."""

import torch
from torch import nn

LAYOUTS = ["3,30:BC", "3,30:BC dtype=bool values=0.7"]
EXPECT_FAIL: set[str] = set()
BLOCK = 8


class _MaskedMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mask):
        m = mask.to(x.dtype)
        total = torch.zeros_like(x[..., 0])
        for start in range(0, x.shape[-1], BLOCK):  # the partial block too, masked
            total = total + (x[..., start:start + BLOCK] * m[..., start:start + BLOCK]).sum(-1)
        count = m.sum(-1).clamp(min=1)
        ctx.save_for_backward(m, count)
        return total / count

    @staticmethod
    def backward(ctx, g):
        m, count = ctx.saved_tensors
        return m * (g / count).unsqueeze(-1), None


class MaskedMeanRef(nn.Module):
    def forward(self, x, mask):
        m = mask.to(x.dtype)
        return (x * m).sum(-1) / m.sum(-1).clamp(min=1)


class MaskedMean(nn.Module):
    def forward(self, x, mask):
        return _MaskedMean.apply(x, mask)


LAYER = MaskedMean
REFERENCE = MaskedMeanRef

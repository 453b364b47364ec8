"""Broken: a blocked masked-mean kernel (a mean over the valid positions of each row, the valid
ones given by a mask) that walks the row in blocks of 8 and drops the last, partial block: its
mask case, which the reference handles, is never loaded. Forward and backward agree with each
other (the dropped elements get no gradient, consistently), so finite differences, and every
other check, pass: the kernel computes another function. `reference` compares it with the plain
masked mean and fails on the output and the input's gradient."""

import torch
from torch import nn

LAYOUTS = ["3,30:BC", "3,30:BC dtype=bool values=0.7"]
EXPECT_FAIL = {"reference"}
BLOCK = 8


class _MaskedMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mask):
        full = (x.shape[-1] // BLOCK) * BLOCK  # the partial block at the end is never loaded: the bug
        m = mask[..., :full].to(x.dtype)
        count = m.sum(-1).clamp(min=1)
        ctx.save_for_backward(m, count)
        ctx.n = x.shape[-1]
        return (x[..., :full] * m).sum(-1) / count

    @staticmethod
    def backward(ctx, g):
        m, count = ctx.saved_tensors
        grad = torch.zeros(*g.shape, ctx.n, dtype=g.dtype, device=g.device)
        grad[..., :m.shape[-1]] = m * (g / count).unsqueeze(-1)
        return grad, None


class MaskedMeanRef(nn.Module):
    def forward(self, x, mask):
        m = mask.to(x.dtype)
        return (x * m).sum(-1) / m.sum(-1).clamp(min=1)


class MaskedMean(nn.Module):
    def forward(self, x, mask):
        return _MaskedMean.apply(x, mask)


LAYER = MaskedMean
REFERENCE = MaskedMeanRef

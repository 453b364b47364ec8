"""Correct: an ``autograd.Function`` whose forward takes a float before its tensors,
``forward(ctx, k, x, w)``, and whose backward returns ``(None, grad_x, grad_w)``: one entry per
argument, while the autograd graph has one edge per tensor. The gradient sizes must be matched
to the arguments by position."""

import torch
from torch import nn

LAYOUTS = ["4,8:BC"]
EXPECT_FAIL: set[str] = set()


class _Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, k, x, w):
        ctx.save_for_backward(x, w)
        ctx.k = k
        return k * x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return None, ctx.k * grad * w, (ctx.k * grad * x).sum(0)


class ScaledProduct(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1.0, 1.0, 8))

    def forward(self, x):
        return _Scaled.apply(0.5, x, self.weight)


LAYER = ScaledProduct

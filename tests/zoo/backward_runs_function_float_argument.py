"""Broken: like good_function_float_argument.py, but backward returns the weight's gradient
unreduced over the batch, (4, 8) for a weight of size (8,)... after a float argument: autograd
rejects it, and the message must name the argument the gradient was returned for (the weight,
argument 2), not the one the graph's edges would suggest."""

import torch
from torch import nn

LAYOUTS = ["4,8:BC"]
EXPECT_FAIL = {"backward_runs"}


class _Scaled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, k, x, w):
        ctx.save_for_backward(x, w)
        ctx.k = k
        return k * x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return None, ctx.k * grad * w, (ctx.k * grad * x).t()  # the bug: (8, 4), neither summed nor the right shape


class ScaledProduct(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1.0, 1.0, 8))

    def forward(self, x):
        return _Scaled.apply(0.5, x, self.weight)


LAYER = ScaledProduct

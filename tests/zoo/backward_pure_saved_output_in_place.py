"""Broken: a square root whose backward computes 1 / (2·sqrt(x)) by updating the saved output in
place (``y.sqrt_()`` where ``y.sqrt()`` was meant — here ``y.mul_(2)``): the gradient of this
call is right, but the caller's output is changed after the fact and a second backward over the
same graph (gradient penalties, retain_graph) gets another answer."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"backward_pure"}


class _Sqrt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.sqrt()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad / y.mul_(2)  # the bug: y * 2, out of place


class SoftSqrt(nn.Module):
    def forward(self, x):
        return _Sqrt.apply(x.abs() + 1)


LAYER = SoftSqrt

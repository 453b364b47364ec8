"""Broken: a ReLU-like Function whose backward zeroes the incoming gradient in place where the
input was negative (a missing ``.clone()``). It returns the right gradient, so every gradient
comparison on one use passes; but autograd hands the same grad_output to every use of an
output, so in ``f(x1) + f(x2)`` the first backward's masking corrupts the second's."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"backward_pure"}


class _Rectify(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        grad[x < 0] = 0  # the bug: grad = grad.clone() first
        return grad


class Rectifier(nn.Module):
    def forward(self, x):
        return _Rectify.apply(x)


LAYER = Rectifier

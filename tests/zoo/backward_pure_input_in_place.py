"""Broken: a Function whose backward subtracts a constant from the saved input in place
(``x.sub_(shift)`` instead of ``x - shift``) to compute its derivative. The gradient it returns is
right, but the caller's input tensor is changed by the backward: anything else that reads it
afterwards (a residual connection, the next step's input) sees other values."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"backward_pure"}


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x - 0.5) ** 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * grad * x.sub_(0.5)  # the bug: x - 0.5


class Shifted(nn.Module):
    def forward(self, x):
        return _Square.apply(x)


LAYER = Shifted

"""Correct twin of explore_exact_zeros: the derivative of x * |x| written as 2|x|, finite at zero."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL: set[str] = set()


class SignedSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.abs()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x.abs()


class SignedSquareLayer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SignedSquare.apply(x)


LAYER = SignedSquareLayer

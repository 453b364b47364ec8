"""Broken only at exact zeros: y = x * |x| with a hand-written backward that writes the derivative
2|x| as 2 * x * x / |x|, which is 0 / 0 = NaN where x is exactly zero. A standard-normal draw
never holds an exact zero; ``--explore`` draws some (a ReLU's output, a padded input has them)."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL: set[str] = set()
EXPECT_FAIL_EXPLORED = {"finite"}


class SignedSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.abs()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x * x / x.abs()


class SignedSquareLayer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SignedSquare.apply(x)


LAYER = SignedSquareLayer

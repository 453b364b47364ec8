"""Broken under mixed precision: a linear layer with a hand-written backward (a custom
``autograd.Function``) that has no ``@torch.amp.custom_fwd``/``@torch.amp.custom_bwd``. Under
``torch.autocast`` its forward's matmul is cast to bfloat16, while its backward runs outside
autocast and multiplies the bfloat16 incoming gradient with the float32 weight it saved: backward
raises. Every default check passes (they run in one dtype); the opt-in autocast check must fail
and say that the Function needs the decorators."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"autocast"}
ENABLE = ("autocast",)


class LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight.T

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.T @ x


class HandWrittenLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 6) * 0.3)

    def forward(self, x):
        return LinearFunction.apply(x, self.weight)


LAYER = HandWrittenLinear

"""Broken for second derivatives: a scaled tanh, y = a·tanh(x), whose backward detaches the
incoming gradient (``grad.detach()``) before using it. First gradients are right (every default
check passes) and so is their derivative with respect to x and a, but not with respect to the
incoming gradient, which a gradient penalty on an earlier layer differentiates through:
gradgrad must name grad_output 0."""

import torch
from torch import nn

LAYOUTS = ["6,4:BC"]
EXPECT_FAIL = {"gradgrad"}
ENABLE = ("gradgrad",)


class ScaledTanhFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, a):
        t = torch.tanh(x)
        ctx.save_for_backward(x, a)
        return a * t

    @staticmethod
    def backward(ctx, grad):
        x, a = ctx.saved_tensors
        grad = grad.detach()  # the bug: "the incoming gradient is a constant"
        t = torch.tanh(x)
        return grad * a * (1 - t * t), (grad * t).sum(0)


class ScaledTanh(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor([0.5, 1.0, -1.5, 2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ScaledTanhFunction.apply(x, self.a)


LAYER = ScaledTanh

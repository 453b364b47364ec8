"""Broken: a PReLU with a hand-written backward that averages the slope's gradient over the
batch instead of summing it (a habit from loss functions): the slope learns batch-size
times too slowly."""

import torch
from torch import nn

LAYOUTS = ["8,3,5:BCU"]
EXPECT_FAIL = {"gradients"}


class MeanPReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, slope):
        ctx.save_for_backward(x, slope)
        return torch.where(x > 0, x, slope * x)

    @staticmethod
    def backward(ctx, grad):
        x, slope = ctx.saved_tensors
        negative = x <= 0
        grad_x = torch.where(negative, grad * slope, grad)
        grad_slope = (grad * x * negative).sum(dim=(0, 2), keepdim=True) / x.shape[0]  # the bug: / batch
        return grad_x, grad_slope


class MeanPReLU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.slope = nn.Parameter(torch.full((3,), 0.25))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return MeanPReLUFunction.apply(x, self.slope.view(1, -1, 1))


LAYER = MeanPReLU

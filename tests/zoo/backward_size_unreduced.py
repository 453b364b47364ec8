"""Broken: a per-channel scale whose hand-written backward returns the scale's gradient at
the input's size, not summed over the batch and positions. Autograd sums it to the
parameter's size silently, so the values come out right; with a layout autograd cannot
broadcast back (or in another framework) it breaks."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"backward_size"}


class ChannelScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        return grad * scale, grad * x  # the bug: grad * x is (4, 3, 5); the scale is (1, 3, 1)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 3).view(1, 3, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ChannelScale.apply(x, self.scale)


LAYER = Layer

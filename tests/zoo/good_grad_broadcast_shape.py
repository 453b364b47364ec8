"""Correct, but wasteful: a per-channel scale whose hand-written backward returns the scale's
gradient at the input's size, not summed over the batch and positions. PyTorch's engine sums
it to the parameter's size (the parameter broadcasts to it), so the values are right — as in
NumpyMul of PyTorch's own autograd_function_db. It must pass (a failure here would switch off
the gradient checks that judge its values), with a note on the memory the big gradient costs."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"backward_size": "consider grad.sum_to_size((1, 3, 1))"}


class ChannelScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        return grad * scale, grad * x  # (4, 3, 5) for a scale of (1, 3, 1): autograd sums it


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 3).view(1, 3, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ChannelScale.apply(x, self.scale)


LAYER = Layer

"""Correct under mixed precision: the same hand-written linear Function as
``autocast_function_without_custom_fwd``, with ``@torch.amp.custom_fwd``/``@torch.amp.custom_bwd``,
so that its backward runs under the autocast state its forward saw. It must pass every default
check and the opt-in autocast check."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL: set[str] = set()
ENABLE = ("autocast",)


class LinearFunction(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight.T

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
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

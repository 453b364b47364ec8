"""Broken: the same high-frequency features through a hand-written backward whose derivative
is 0.1% too large (a constant rounded in the backward only). Extrapolating the steep layer's
differences must not hide it: a wrong gradient is as wrong at every step."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"gradients"}
K = 1e5


class Sine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(K * x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 1.001e5 * torch.cos(K * x)  # the bug: 1.001e5 for K


class HighFrequency(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Sine.apply(x)


LAYER = HighFrequency

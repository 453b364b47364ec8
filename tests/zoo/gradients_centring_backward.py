"""Broken: a per-channel bias followed by a hand-written centring (subtract the mean over the
last dimension, per observation and channel) whose backward forgets to subtract the mean of
the incoming gradient. The bias then receives a gradient it should not have: finite
differences say zero, the analytic gradient does not."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCS"]
EXPECT_FAIL = {"gradients"}


class Centre(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x - x.mean(dim=-1, keepdim=True)

    @staticmethod
    def backward(ctx, grad):
        return grad  # the bug: the right gradient is grad - grad.mean(dim=-1, keepdim=True)


class BiasThenCentre(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-0.5, 0.5, 3).view(3, 1))  # one per channel

    def forward(self, x):
        return torch.tanh(Centre.apply(x + self.bias))


LAYER = BiasThenCentre

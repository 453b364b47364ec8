"""Swish with a learnable slope per channel, and a hand-written backward: the tutorial's layer."""

import torch
from torch import nn


class SwishFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        s = torch.sigmoid(beta * x)
        ctx.save_for_backward(x, beta, s)
        return x * s

    @staticmethod
    def backward(ctx, grad_out):
        x, beta, s = ctx.saved_tensors
        ds = s * (1 - s)  # the derivative of the sigmoid at beta * x
        grad_x = grad_out * (s + x * beta * ds)
        grad_beta = (grad_out * x * x * ds).sum(0)  # beta is shared by the batch: sum over it
        return grad_x, grad_beta


class Swish(nn.Module):
    """y = x · sigmoid(beta · x), one beta per channel; inputs are (batch, channels)."""

    def __init__(self, channels: int = 16):
        super().__init__()
        self.beta = nn.Parameter(torch.ones(channels))

    def forward(self, x):
        return SwishFunction.apply(x, self.beta)

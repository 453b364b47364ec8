"""A tiny Module with a hand-written ``autograd.Function`` (Swish): start-up figures
(benchmarks/goals.py)."""

import torch
from torch import nn


class _Swish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s + x * s * (1 - s))


class Swish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Swish.apply(x)

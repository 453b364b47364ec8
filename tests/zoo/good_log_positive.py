"""Correct: a learnable log layer, y = log(x) · w, defined for x > 0 only: its input is declared
``values=positive``, so inputs are |normal| (some close to 0, where the derivative 1/x is large)
and finite differences never step out of (0, ∞)."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC values=positive"]
EXPECT_FAIL: set[str] = set()


class _Log(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.log()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x


class ScaledLog(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 6))

    def forward(self, x):
        return _Log.apply(x) * self.weight


LAYER = ScaledLog

"""Broken near the bound: the log layer of good_log_positive.py, whose hand-written backward
clamps x at 0.1 before dividing (a "safety" clamp): right for x ≥ 0.1, wrong for the inputs
close to 0 — exactly the elements a step out of the domain would lose. The gradient check
differences them from inside (one-sided) and catches it."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC values=positive"]
EXPECT_FAIL = {"gradients"}


class _Log(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.log()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x.clamp(min=0.1)  # the bug: the derivative 1/x is not clamped


class ScaledLog(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 6))

    def forward(self, x):
        return _Log.apply(x) * self.weight


LAYER = ScaledLog

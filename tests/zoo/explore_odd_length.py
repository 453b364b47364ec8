"""Broken only at odd lengths: a mean over time whose hand-written backward divides by the number
of steps its paired reduction covers, (T // 2) * 2, instead of T. At the declared even length it
is right; at an odd one every gradient is scaled by T / (T - 1), and at length 1 it is infinite.
The default draws miss it; ``--explore`` finds it."""

import torch
from torch import nn

LAYOUTS = ["3,4,8:BCT"]
EXPECT_FAIL: set[str] = set()
EXPECT_FAIL_EXPLORED = {"finite"}


class PairedTimeMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.length = x.shape[-1]
        pairs = x[..., : ctx.length // 2 * 2].reshape(*x.shape[:-1], -1, 2).sum(-1).sum(-1)
        rest = x[..., ctx.length // 2 * 2 :].sum(-1)
        return (pairs + rest) / ctx.length

    @staticmethod
    def backward(ctx, grad):
        steps = ctx.length // 2 * 2  # the steps the paired reduction walks
        return grad.unsqueeze(-1).expand(*grad.shape, ctx.length) / steps


class TimeMean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return PairedTimeMean.apply(x)


LAYER = TimeMean

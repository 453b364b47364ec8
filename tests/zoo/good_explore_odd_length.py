"""Correct twin of explore_odd_length: the paired mean's backward divides by every step."""

import torch
from torch import nn

LAYOUTS = ["3,4,8:BCT"]
EXPECT_FAIL: set[str] = set()


class PairedTimeMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.length = x.shape[-1]
        pairs = x[..., : ctx.length // 2 * 2].reshape(*x.shape[:-1], -1, 2).sum(-1).sum(-1)
        rest = x[..., ctx.length // 2 * 2 :].sum(-1)
        return (pairs + rest) / ctx.length

    @staticmethod
    def backward(ctx, grad):
        return grad.unsqueeze(-1).expand(*grad.shape, ctx.length) / ctx.length


class TimeMean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return PairedTimeMean.apply(x)


LAYER = TimeMean

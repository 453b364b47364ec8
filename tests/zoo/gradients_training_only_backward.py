"""Broken: a batch normalisation with a hand-written backward that treats the batch mean and
variance as constants in training mode (the classic mistake: the gradient is grad·γ/σ, missing
the two terms through the statistics). In eval mode it normalises with running statistics, where
that backward is right, so the gradients agree there: the failure must still be reported, and
say that it appears in training mode only."""

import torch
from torch import nn

LAYOUTS = ["6,3:BC"]
EXPECT_FAIL = {"gradients"}


class _Normalise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mean, var):
        scale = torch.rsqrt(var + 1e-5)
        ctx.save_for_backward(scale)
        return (x - mean) * scale

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return grad * scale, None, None  # the bug in training: mean and var depend on x too


class BatchNorm(nn.Module):
    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x):
        if self.training:
            mean, var = x.mean(0), x.var(0, unbiased=False)
            with torch.no_grad():
                self.running_mean.mul_(0.9).add_(0.1 * mean)
                self.running_var.mul_(0.9).add_(0.1 * var)
        else:
            mean, var = self.running_mean, self.running_var
        return _Normalise.apply(x, mean, var) * self.weight


LAYER = BatchNorm

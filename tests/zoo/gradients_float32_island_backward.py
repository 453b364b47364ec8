"""Broken: the float32-island normalisation of good_float32_island_norm.py with a hand-written
backward that treats the statistic as a constant (it drops the derivative of rsqrt(mean(x²))
with respect to x). The float64 copy still computes its statistic in float32, so the gradient
check differences at float32's step and noise — and must still see the missing term."""

import torch
from torch import nn

LAYOUTS = ["2,4,8,8:BCSS"]
EXPECT_FAIL = {"gradients"}


class _Normalise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps):
        s = x.float().pow(2).mean(dim=(2, 3), keepdim=True)
        scale = torch.rsqrt(s + eps).to(x.dtype)
        ctx.save_for_backward(scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return grad * scale, None  # the bug: the statistic's own derivative is missing


class FloatIslandNorm(nn.Module):
    def __init__(self, channels: int = 4, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, channels).view(1, channels, 1, 1))
        self.eps = eps

    def forward(self, x):
        return _Normalise.apply(x, self.eps) * self.weight


LAYER = FloatIslandNorm

"""Broken: a soft cap that compresses activations above a threshold logarithmically (as
logit soft-capping keeps attention scores in range), with a hand-written backward whose
capped branch differentiates log1p(x) instead of log1p(x - threshold). The forward is right;
the gradient is wrong only where x > 2, and the layout's draw (seed 0) has one such element,
at (0, 1, 3) in the middle of the input: the shrinker must cut every dimension to it rather
than lose it (tests/test_explore.py)."""

import torch
from torch import nn

LAYOUTS = ["2,3,8:BCT"]
EXPECT_FAIL = {"gradients"}


class SoftCapFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, threshold):
        ctx.save_for_backward(x)
        ctx.threshold = threshold
        over = (x - threshold).clamp(min=0)
        return torch.where(x > threshold, threshold + torch.log1p(over), x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        capped = grad / (1 + x)  # the bug: d/dx log1p(x - threshold) is 1 / (1 + x - threshold)
        return torch.where(x > ctx.threshold, capped, grad), None


class SoftCap(nn.Module):
    def __init__(self, threshold: float = 2.0) -> None:
        super().__init__()
        self.threshold = threshold

    def forward(self, x):
        return SoftCapFunction.apply(x, self.threshold)


LAYER = SoftCap

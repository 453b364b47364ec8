"""Broken for forward mode: a leaky ReLU operation with a learnable slope input whose
backward is right (every default check passes) but whose ``jvp`` forgets the slope on the
negative side: where x < 0 it returns the input tangent unchanged. forward_ad must fail and
name input 0."""

import torch

LAYOUTS = ["6,4:BC", "1,4:UC"]
EXPECT_FAIL = {"forward_ad"}
ENABLE = ("forward_ad",)


class WrongJvpLeakyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, slope):
        ctx.save_for_backward(x, slope)
        ctx.save_for_forward(x, slope)
        return torch.where(x > 0, x, slope * x)

    @staticmethod
    def backward(ctx, grad):
        x, slope = ctx.saved_tensors
        return torch.where(x > 0, grad, grad * slope), torch.where(x > 0, 0.0, grad * x).sum_to_size(slope.shape)

    @staticmethod
    def jvp(ctx, dx, dslope):
        x, _slope = ctx.saved_tensors
        return torch.where(x > 0, dx, dx + dslope * x)  # the bug: slope * dx on the negative side


LAYER = WrongJvpLeakyReLU

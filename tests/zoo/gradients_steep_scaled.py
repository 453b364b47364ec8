"""Broken: the steep layer of good_grad_steep.py written as a Function whose backward is 2%
too large. Extrapolating from smaller steps lets the right gradient through; a wrong one is as
wrong at every step and must still fail."""

import torch

LAYOUTS = ["4,16:BC"]
EXPECT_FAIL = {"gradients"}


class SteepSine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.cat([torch.sin(3e6 * x[:, :1]), x[:, 1:]], dim=1)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        steep = grad[:, :1] * 3e6 * torch.cos(3e6 * x[:, :1]) * 1.02  # the bug: 2% too large
        return torch.cat([steep, grad[:, 1:]], dim=1)


LAYER = SteepSine

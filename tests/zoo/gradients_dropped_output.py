"""Broken: an operation with two outputs (sin x, cos x) whose backward uses only the first
output's gradient: whatever the network does with the second output never reaches x."""

import torch

LAYOUTS = ["3,4,5:BCU"]
EXPECT_FAIL = {"gradients"}


class SinCos(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        (x,) = ctx.saved_tensors
        return grad_sin * torch.cos(x)  # the bug: - grad_cos * sin(x) is missing


LAYER = SinCos

"""Broken: an operation out = x * sigmoid(g) whose backward computes sigmoid(g) only inside
``if ctx.needs_input_grad[1]`` but uses it for x's gradient too: it crashes as soon as the
gate does not need a gradient (MATLAB's computeGradients with the gate excluded)."""

import torch

LAYOUTS = ["4,3,5:BCU", "4,3,5:BCU"]
EXPECT_FAIL = {"needs_input_grad"}


class GatedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g):
        ctx.save_for_backward(x, g)
        return x * torch.sigmoid(g)

    @staticmethod
    def backward(ctx, grad):
        x, g = ctx.saved_tensors
        grad_x = grad_g = None
        if ctx.needs_input_grad[1]:
            s = torch.sigmoid(g)
            grad_g = grad * x * s * (1 - s)
        if ctx.needs_input_grad[0]:
            grad_x = grad * s  # the bug: s exists only when the gate needs a gradient
        return grad_x, grad_g


LAYER = GatedLinear

"""Correct: a custom operation (autograd.Function subject) with two inputs, a Swish with a
per-channel beta input, y = x·sigmoid(beta·x), whose backward is written with differentiable
torch operations on the saved tensors (so autograd differentiates it twice) and which defines
a correct ``jvp``. Passes every default check and both higher-derivative checks."""

import torch

LAYOUTS = ["5,3,4:BCU", "1,3,1:UCU"]
EXPECT_FAIL: set[str] = set()
ENABLE = ("gradgrad", "forward_ad")


class SwishOperation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x, beta)
        ctx.save_for_forward(x, beta)
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def backward(ctx, grad):
        x, beta = ctx.saved_tensors
        s = torch.sigmoid(beta * x)
        ds = s * (1 - s)
        grad_x = grad * (s + x * beta * ds) if ctx.needs_input_grad[0] else None
        grad_beta = (grad * x * x * ds).sum_to_size(beta.shape) if ctx.needs_input_grad[1] else None
        return grad_x, grad_beta

    @staticmethod
    def jvp(ctx, dx, dbeta):
        x, beta = ctx.saved_tensors
        s = torch.sigmoid(beta * x)
        ds = s * (1 - s)
        return dx * (s + x * beta * ds) + dbeta * x * x * ds


LAYER = SwishOperation

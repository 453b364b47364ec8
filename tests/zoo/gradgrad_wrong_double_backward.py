"""Broken for second derivatives: a cube, y = x³, whose backward is a second
``autograd.Function`` (as fused kernels do) with a hand-written backward of its own that
gets the derivative with respect to x wrong (3·x instead of 6·x). First gradients are right
(every default check passes); the double backward is wrong: gradgrad must name input 0."""

import torch

LAYOUTS = ["5,4:BC"]
EXPECT_FAIL = {"gradgrad"}
ENABLE = ("gradgrad",)


class CubeBackward(torch.autograd.Function):
    """grad_x = 3·x²·grad, as a function of (grad, x)."""

    @staticmethod
    def forward(ctx, grad, x):
        ctx.save_for_backward(grad, x)
        return 3 * x * x * grad

    @staticmethod
    def backward(ctx, gg):
        grad, x = ctx.saved_tensors
        return 3 * x * x * gg, 3 * x * grad * gg  # the bug: d/dx of 3·x²·grad is 6·x·grad


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return CubeBackward.apply(grad, x)


LAYER = Cube

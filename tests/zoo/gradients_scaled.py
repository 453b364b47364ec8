"""Broken: y = tanh(x / 2) with a hand-written backward that forgets the inner derivative
1/2: every input gradient is twice too large (training still "works", with the wrong step)."""

import torch

LAYOUTS = ["4,6,5:BCU"]
EXPECT_FAIL = {"gradients"}


class HalfTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x / 2)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)  # the bug: missing factor 0.5


LAYER = HalfTanh

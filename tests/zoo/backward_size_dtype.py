"""Broken: a hand-written backward that computes the input gradient in float64 "for
accuracy" and returns it as float64 for a float32 input; autograd casts it back silently,
so the cost and the lost precision go unnoticed."""

import torch

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"backward_size"}


class Softsign(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / (1 + x.abs())

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad.double() / (1 + x.double().abs()) ** 2  # the bug: float64 for any input


LAYER = Softsign

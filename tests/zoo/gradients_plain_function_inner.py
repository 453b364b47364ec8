"""Broken: a plain function that calls a hand-written autograd.Function whose backward drops the
derivative of the inner tanh."""

import torch

LAYOUTS = ["3,8:BC"]
EXPECT_FAIL = {"gradients"}


class _Tanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad  # the bug: grad * (1 - y * y)


def soft_gate(x):
    return x * _Tanh.apply(x)


LAYER = soft_gate

"""Broken: a fused operation out = x * weight + bias (autograd.Function with three inputs)
whose backward returns only the gradients that are needed, packed to the front. With every
input requiring grad it is right; with x not requiring grad, the weight's gradient lands in
x's slot (and is dropped) and the bias's in the weight's."""

import torch

LAYOUTS = ["4,3:BC", "3:C", "3:C"]
EXPECT_FAIL = {"needs_input_grad"}


class FusedScaleShift(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return torch.addcmul(bias, x, weight)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grads = {0: lambda: grad * weight, 1: lambda: (grad * x).sum(0), 2: lambda: grad.sum(0)}
        needed = [grads[i]() for i, need in enumerate(ctx.needs_input_grad) if need]
        return (*needed, *[None] * (3 - len(needed)))  # the bug: packed to the front


LAYER = FusedScaleShift

"""Broken: a two-input operation whose backward returns None for its second input although
that input needs a gradient (the author thought of it as a constant)."""

import torch

LAYOUTS = ["4,3,5:BCU", "4,3,5:BCU"]
EXPECT_FAIL = {"backward_runs"}


class Gate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gate):
        s = torch.sigmoid(gate)
        ctx.save_for_backward(s)
        return x * s

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        return grad * s, None  # the bug: the gate's gradient is x * s * (1 - s) * grad


LAYER = Gate

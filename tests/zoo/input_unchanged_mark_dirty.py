"""Modifies its input by design: an exponential that computes in place and marks its input
dirty (``ctx.mark_dirty``), like PyTorch's NumpyExpMarkDirty in autograd_function_db. Inside a
network that is allowed and autograd follows it; the caller's tensor is changed all the same.
input_unchanged names it, and it is the only verdict: the other checks feed it inputs the way a
network does (computed from a tensor that requires grad) and find it otherwise correct."""

import torch

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"input_unchanged"}


class ExpInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.exp_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


LAYER = ExpInPlace

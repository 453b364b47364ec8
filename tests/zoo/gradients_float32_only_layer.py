"""Broken, and unable to run in float64: a soft clamp that allocates its bound in the default
dtype (``torch.full(..., torch.finfo(x.dtype).max)``: float32's zeros filled with float64's
largest value overflow), and whose hand-written backward drops the factor 0.5 of its slope.
dtype[float64] reports the allocation; the gradient check must still judge the backward — in
float32, against float32 finite differences — and catch it."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"dtype", "gradients"}


class _HalfTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x / 2)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)  # the bug: the factor 0.5 is missing


class SoftClamp(nn.Module):
    def forward(self, x):
        bound = torch.full(x.shape[-1:], torch.finfo(x.dtype).max, device=x.device)  # default dtype: float64 overflows
        return torch.minimum(_HalfTanh.apply(x), bound.to(x.dtype))


LAYER = SoftClamp

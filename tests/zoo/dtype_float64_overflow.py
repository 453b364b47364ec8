"""Broken for float64 only: a soft clamp that allocates its bound in the default dtype
(``torch.full(..., torch.finfo(x.dtype).max)``: float32's zeros filled with float64's largest
value overflow). dtype[float64] reports it. Its hand-written backward is right, and the gradient
check says so — judged in float32, with a note that float64 was impossible and why."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"dtype"}
EXPECT_NOTES = {"gradients": "the layer cannot run in float64"}


class _HalfTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x / 2)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return 0.5 * grad * (1 - y * y)


class SoftClamp(nn.Module):
    def forward(self, x):
        bound = torch.full(x.shape[-1:], torch.finfo(x.dtype).max, device=x.device)  # default dtype: float64 overflows
        return torch.minimum(_HalfTanh.apply(x), bound.to(x.dtype))


LAYER = SoftClamp

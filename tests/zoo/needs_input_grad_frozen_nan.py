"""Broken: a scaled activation whose hand-written backward computes the scale's gradient from
the input's gradient buffer, which it only fills when the input requires grad; frozen input
(a first layer) leaves it empty, and the scale's gradient comes out NaN. With every tensor
requiring grad all is finite and right, so finite passes: needs_input_grad, which alone runs
the frozen pattern, must fail it (Note [no silent pass])."""

import torch
from torch import nn

LAYOUTS = ["4,5:BC"]
EXPECT_FAIL = {"needs_input_grad"}


class _ScaledTanhFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        t = torch.tanh(x)
        ctx.save_for_backward(t, scale)
        return scale * t

    @staticmethod
    def backward(ctx, grad):
        t, scale = ctx.saved_tensors
        buffer = torch.full_like(t, float("nan"))
        dx = None
        if ctx.needs_input_grad[0]:
            buffer = grad * t  # the bug: the scale's gradient is read from this buffer either way
            dx = grad * scale * (1 - t * t)
        dscale = buffer.sum(0) if ctx.needs_input_grad[1] else None
        return dx, dscale


class ScaledTanh(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ScaledTanhFn.apply(x, self.scale)


LAYER = ScaledTanh

"""Broken: the float32-inside backward of gradients_float64_backward_in_float32.py, behind a forward
that works on detached tensors (``x.detach()``, as kernel-style Functions write it): autograd cannot
follow that forward, so there is no autograd derivative to hold the backward to. Its float64
gradients are right to 1e-7, which the gradient check's finite differences (resolving some 1e-8 at
their step) take for agreement; extrapolated differences at larger steps resolve this smooth layer
to far better than 1e-7, and every value of the gradient is a float32 number: gradients[float64]
fails (Note [float64 backward precision])."""

import torch
from torch import nn

LAYOUTS = ["4,8:BC"]
EXPECT_FAIL = {"gradients"}


class _SoftCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x, w = x.detach(), w.detach()
        ctx.save_for_backward(x, w)
        return w * x ** 3 + torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        xf, gf = x.float(), g.float()  # the bug: float32 inside a float64 backward
        dx = gf * (3 * w.float() * xf ** 2 + torch.cos(xf))
        dw = (gf * xf ** 3).sum(0)
        return dx.to(x.dtype), dw.to(w.dtype)


class SoftCube(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        return _SoftCube.apply(x, self.w)


LAYER = SoftCube

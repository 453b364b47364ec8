"""Broken: a hand-written backward that casts to float32 inside and back (a .float() left from a
mixed-precision kernel): its float64 gradients are right to 1e-7, not 1e-15, so finite differences
(which resolve some 1e-8 in float64) cannot tell, and every float64 comparison a user makes
downstream is silently float32-accurate. The forward is plain float64 PyTorch, so autograd's
derivative of it is a float64 yardstick: gradients[float64] fails against it (Note [float64
backward precision])."""

import torch
from torch import nn

LAYOUTS = ["4,8:BC"]
EXPECT_FAIL = {"gradients"}


class _SoftCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
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

"""Broken: the hand-written backward of gradients_float64_backward_in_float32.py casting to float32
for one step only — the cosine term is computed in float32 and added back to float64 terms —, so
that its float64 gradients are not float32 numbers (the last step is float64) and yet are right to
1e-7 only, not 1e-15. Finite differences in float64 cannot tell. autograd's derivative of the same
forward is float64-precise, and an operation of the backward returned float32: gradients[float64]
fails it (Note [float64 backward precision])."""

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
        cosine = torch.cos(x.float()).to(x.dtype)  # the bug: one step in float32, then back to float64
        dx = g * (3 * w * x ** 2 + cosine)
        return dx, (g * x ** 3).sum(0)


class SoftCube(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        return _SoftCube.apply(x, self.w)


LAYER = SoftCube

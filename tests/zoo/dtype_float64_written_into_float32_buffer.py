"""Broken: a kernel-style layer that allocates its output buffer in the default dtype
(``torch.empty(x.shape)``: float32) and copies its float64 result into it, then casts back to the
input's dtype. The float64 output is float64 in type and float32 in precision: PyTorch rounds the
copy silently, the dtype of every output is right, and the gradient check takes the rounding for
a float32 island by design (a note). dtype[float64] sees the float64 values written into a
float32 tensor (Note [silent downcasts] in reference/precision.py)."""

import torch
from torch import nn

LAYOUTS = ["4,8:BC"]
EXPECT_FAIL = {"dtype"}
EXPECT_NOTES = {"gradients": "computes in a lower precision inside even in float64"}


class ScaledSoftsign(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        out = torch.empty(x.shape, device=x.device)  # the bug: the default dtype, float32
        out.copy_(x / (1 + x.abs()) * self.weight)
        return out.to(x.dtype)


LAYER = ScaledSoftsign

"""Correct: the output buffer of dtype_float64_written_into_float32_buffer.py made in the input's
dtype (``torch.empty(x.shape, dtype=x.dtype, device=x.device)``): float64 stays float64 inside,
and dtype[float64] sees no value written into a lower dtype (Note [silent downcasts] in
reference/precision.py)."""

import torch
from torch import nn

LAYOUTS = ["4,8:BC"]
EXPECT_FAIL: set[str] = set()


class ScaledSoftsign(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        out.copy_(x / (1 + x.abs()) * self.weight)
        return out


LAYER = ScaledSoftsign

"""Plain PyTorch references of the Triton layers here, for the reference check: each holds the
same parameters under the same names, and computes what its kernel should, statistics of a
low-precision input in float32 as PyTorch's own layers do."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class LeakyRef(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.slope = nn.Parameter(torch.tensor([0.2]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, self.slope.to(x.dtype) * x)


class RMSNormRef(nn.Module):
    def __init__(self, channels: int = 32, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * self.weight.to(wide.dtype)).to(x.dtype)


class GatedMLPRef(nn.Module):
    def __init__(self, channels: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.randn(channels, hidden) / math.sqrt(channels))
        self.up = nn.Parameter(torch.randn(channels, hidden) / math.sqrt(channels))
        self.down = nn.Parameter(torch.randn(hidden, channels) / math.sqrt(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (F.silu(x @ self.gate) * (x @ self.up)) @ self.down


class RowSumRef(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(-1)

"""Correct: the fused bias-add kernel of reference_bias_grad_low_precision.py with its bias
gradient summed in float32 (PyTorch's pairwise sum) and rounded once, as PyTorch does: in every dtype it is within
twice PyTorch's own error of the float64 reference, and it passes `reference`."""

import torch
from torch import nn

LAYOUTS = ["2048,8:BC"]
EXPECT_FAIL: set[str] = set()


class _BiasAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, g):
        wide = torch.float64 if g.dtype == torch.float64 else torch.float32
        return g, g.to(wide).sum(0).to(g.dtype)  # summed in float32, rounded once


class BiasAddRef(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, dim))

    def forward(self, x):
        return x + self.bias


class FusedBiasAdd(BiasAddRef):
    def forward(self, x):
        return _BiasAdd.apply(x, self.bias)


LAYER = FusedBiasAdd
REFERENCE = BiasAddRef

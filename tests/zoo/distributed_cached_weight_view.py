"""Broken under sharding (the opt-in ``distributed`` check), and whenever the parameter is
replaced: the transposed weight is taken once in ``__init__`` (``self.w_t = self.weight.t()``)
to save a transpose per call. FSDP2's ``fully_shard`` replaces ``weight`` with its shard, so
forward keeps using the stale unsharded tensor and ``weight`` gets no gradient; ``.to(float64)``
swaps the parameter's data the same way, so the float64 runs of the default suite see a float32
``w_t``, and ``w_t`` is a tensor attribute no ``state_dict`` holds."""

import math

import torch
from torch import nn

LAYOUTS = ["6,4:BC"]
EXPECT_FAIL = {"copy", "dtype", "meta_device"}
EXPECT_NOTES = {"gradients": "the layer cannot run in float64"}


class CachedTransposeLinear(nn.Module):
    def __init__(self, in_features: int = 4, out_features: int = 3) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.reset_parameters()
        self.w_t = self.weight.t()  # the bug: a view of the parameter, taken once

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w_t + self.bias


LAYER = CachedTransposeLinear

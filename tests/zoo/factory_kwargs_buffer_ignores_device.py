"""Broken for device= and dtype=: a scaled linear layer that takes PyTorch's factory keywords
and passes them to its weight, but creates its scale buffer with ``torch.ones(n)``. Built on
``meta`` (to shard a model before allocating it) or directly in float64, the buffer stays a CPU
float32 tensor. ``.to()`` moves it, so dtype, meta_device and device pass; factory_kwargs must
fail and name the buffer."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"factory_kwargs"}


class ScaledLinear(nn.Module):
    def __init__(self, features: int = 6, device=None, dtype=None) -> None:
        super().__init__()
        factory_kwargs = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(features, features, **factory_kwargs))
        self.register_buffer("scale", torch.ones(features))  # the bug: no **factory_kwargs
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.3)
        nn.init.ones_(self.scale)

    def forward(self, x):
        return (x @ self.weight.T) * self.scale


LAYER = ScaledLinear

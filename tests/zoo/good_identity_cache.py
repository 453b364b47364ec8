"""Correct: a layer that caches its last output for the very tensor it was called with, as
Pyro's transforms do (cache_size=1: called again with the same x, it returns the same y).
state_dict must compare the saved layer and the loaded one on new tensors of the same values:
after its weights are nudged, the saved layer would return its stale cached output for the
tensor its earlier call saw. It must pass every default check."""

import torch
from torch import nn

LAYOUTS = ["5,4:BC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"state_valid": "predict changes '_cached'"}  # true: the cache is a plain attribute


class CachedTransform(nn.Module):
    def __init__(self, features: int = 4) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, features))
        self.register_buffer("shift", torch.full((features,), 0.1))  # state: state_dict runs a forward first
        self._cached = None

    def forward(self, x):
        if self._cached is not None and self._cached[0] is x:
            return self._cached[1]
        y = torch.tanh(x * self.weight + self.shift)
        self._cached = (x, y)
        return y


LAYER = CachedTransform

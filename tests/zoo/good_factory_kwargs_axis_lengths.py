"""Correct: an einops-style regrouping whose constructor reads every keyword as the length of a
named axis (``Regroup(heads=2, width=3)``) and refuses one that is not a positive integer. Its
``**axis_lengths`` are not PyTorch's factory keywords: ``device="meta"`` is an axis length it
cannot have, and factory_kwargs must not try it (the constructor names neither device= nor dtype=)."""

import math

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
KWARGS = {"heads": 2, "width": 3}
EXPECT_FAIL: set[str] = set()


class Regroup(nn.Module):
    def __init__(self, **axis_lengths: int) -> None:
        super().__init__()
        for name, length in axis_lengths.items():
            if not isinstance(length, int) or isinstance(length, bool) or length < 1:
                raise ValueError(f"axis {name!r} needs a positive integer length, not {length!r}")
        self.axis_lengths = dict(axis_lengths)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, math.prod(axis_lengths.values())))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.scale).reshape(x.shape[0], *self.axis_lengths.values())


LAYER = Regroup

"""Broken: a padding mask reduced over the batch (``mask.any(0)``: "keep a time step if any
sequence has it") where each sequence's own mask belongs: one observation's padding changes the
others' outputs, and an observation alone gives another result than in its batch."""

import torch
from torch import nn

LAYOUTS = ["6,10,4:BTC", "6,10:BT dtype=bool values=0.7"]
EXPECT_FAIL = {"observations"}


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask.any(0)  # bug: over the batch; mask.unsqueeze(-1) keeps each sequence's own
        return self.proj(x) * keep.unsqueeze(0).unsqueeze(-1)


LAYER = Layer

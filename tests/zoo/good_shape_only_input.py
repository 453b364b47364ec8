"""Correct: a learned positional embedding that takes the sequence for its length only
(``pos[:, :T].expand(B, ...)``), as AxialPositionalEmbedding and many rotary tables do; the
network adds it to the sequence itself. The input gets no gradient and needs none: its values
do not change the output, so ``backward_runs`` must not call it cut off."""

import torch
from torch import nn

LAYOUTS = ["3,5,4:BTC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"backward_runs": "size, dtype or device only"}


class PositionalTable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, 8, 4))

    def forward(self, x):
        batch, length, _ = x.shape
        return self.table[:, :length].expand(batch, -1, -1).to(x)


LAYER = PositionalTable

"""Broken: a masked attention pooling whose mask is applied after reducing over the batch: it
normalises the scores with a softmax over every observation's unmasked positions together
(a ``view(-1)`` too many), so one observation's mask and values leak into another's result.
The mask is a boolean keyword input that follows its observation when the batch is split."""

import torch
from torch import nn

LAYOUTS = ["3,5,4:BTC"]
CALL_KWARGS = {"mask": "3,5:BT dtype=bool values=0.7"}
EXPECT_FAIL = {"observations"}


class MaskedPool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Parameter(torch.linspace(-1.0, 1.0, 4))

    def forward(self, x, mask):
        scores = (x @ self.query).masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores.view(-1), dim=0).view_as(scores)  # the bug: softmax per row
        weights = torch.nan_to_num(weights)
        return (weights.unsqueeze(-1) * x).sum(1)


LAYER = MaskedPool

"""Broken: an attention pooling that applies its padding mask in training only; in predict
(eval) it forgets it, so padded positions count at inference — predict and forward disagree."""

import torch
from torch import nn

LAYOUTS = ["3,5,4:BTC"]
CALL_KWARGS = {"mask": "3,5:BT dtype=bool values=0.7"}
EXPECT_FAIL = {"forward_predict_agree"}


class MaskedPool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Parameter(torch.linspace(-1.0, 1.0, 4))

    def forward(self, x, mask):
        scores = x @ self.query
        if self.training:  # the bug: the mask applies in both modes
            scores = scores.masked_fill(~mask, -1e9)
        weights = torch.softmax(scores, dim=1)
        return (weights.unsqueeze(-1) * x).sum(1)


LAYER = MaskedPool

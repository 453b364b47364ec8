"""Broken: causal self-attention that caches its mask and builds it again only when the sequence
length changes, but builds it expanded to the batch of the call that made it (batch x T x T). A
layer called on the layout's batch and then on training's last, smaller batch masks with the
first batch's mask and raises. (An observation alone, on a fresh layer, builds a mask of its
own and works.) observations must fail at a second batch size after the first."""

import torch
from torch import nn

LAYOUTS = ["4,5,6:BTC"]
EXPECT_FAIL = {"observations"}
EXPECT_NOTES = {"state_valid": "predict changes '_mask', kept in plain attributes"}  # true: the cache


class CausalSelfAttention(nn.Module):
    def __init__(self, channels: int = 6) -> None:
        super().__init__()
        self.query = nn.Linear(channels, channels)
        self._mask: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, steps, channels = x.shape
        if self._mask is None or self._mask.shape[-1] != steps:  # the bug: the batch is not looked at
            causal = torch.ones(steps, steps, dtype=torch.bool, device=x.device).tril()
            self._mask = causal.expand(batch, steps, steps)  # the bug: causal alone broadcasts
        scores = self.query(x) @ x.transpose(1, 2) / channels ** 0.5
        scores = scores.masked_fill(~self._mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ x


LAYER = CausalSelfAttention

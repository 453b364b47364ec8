"""Correct: a rotary-style position cache kept in a non-persistent buffer, with the filled
length in a plain int attribute. The first call fills the cache; later calls read it. A
checker that puts the buffer back but not the int (or zeroes the buffer) hands the next call
an empty cache it believes is full."""

import torch
from torch import nn

LAYOUTS = ["2,5,8:BTC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"state_valid": "changes 'cached', kept in plain attributes"}


class PositionCache(nn.Module):
    def __init__(self, channels: int = 8, max_len: int = 16) -> None:
        super().__init__()
        self.register_buffer("cos_cache", torch.zeros(max_len, channels), persistent=False)
        self.register_buffer("frequencies", torch.linspace(0.1, 1.0, channels), persistent=False)
        self.cached = 0

    def forward(self, x):
        length = x.shape[1]
        if length > self.cached:
            positions = torch.arange(self.cos_cache.shape[0], dtype=self.cos_cache.dtype, device=x.device)
            self.cos_cache.copy_(torch.cos(positions[:, None] * self.frequencies))
            self.cached = self.cos_cache.shape[0]
        return x * self.cos_cache[:length]


LAYER = PositionCache

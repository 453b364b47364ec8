"""Broken: the position cache of good_cache_length_attribute.py, whose path for a filled cache
(every call after the first) multiplies through a hand-written Function with a wrong backward
(the gradient is not multiplied by the cache). A gradient check that always starts from the
fresh layer only ever sees the first call's path; training runs the second path from step two."""

import torch
from torch import nn

LAYOUTS = ["2,5,8:BTC"]
EXPECT_FAIL = {"gradients"}
EXPECT_NOTES = {"state_valid": "changes 'cached', kept in plain attributes"}


class _Times(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, table):
        return x * table

    @staticmethod
    def backward(ctx, grad):
        return grad, None  # the bug: should be grad * table


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
        return _Times.apply(x, self.cos_cache[:length])


LAYER = PositionCache

"""Correct: a per-channel running maximum that, like a quantisation observer's scale, starts as
a one-element placeholder and takes the number of channels on the first call, then keeps it
(load_state_dict is told to take the size it was saved with)."""

from typing import Any

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"state_valid": "takes its size on the first predict ((1,) became (3,))"}


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("peak", torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            seen = x.detach().abs().amax(dim=(0, 2))
            if self.peak.shape != seen.shape:
                self.peak.resize_(seen.shape).copy_(seen)
            else:
                torch.maximum(self.peak, seen, out=self.peak)
        return x / (1.0 + x.abs())

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        saved = state_dict.get(prefix + "peak")
        if saved is not None:
            self.peak.resize_(saved.shape)
        super()._load_from_state_dict(state_dict, prefix, *args)


LAYER = Layer

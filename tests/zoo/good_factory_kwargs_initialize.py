"""Correct: a layer that takes PyTorch's factory keywords, keeps them, and uses them for what its
constructor creates (a buffer) and for what ``initialize`` creates from the layout (a per-channel
gain), and whose ``reset_parameters`` sets every parameter and buffer, constants included. It
must pass every default check: built on ``meta`` or in float64 everything lands there, and
``to_empty`` + ``reset_parameters`` rebuild it."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()


class ChannelGain(nn.Module):
    def __init__(self, device=None, dtype=None) -> None:
        super().__init__()
        self.factory_kwargs = {"device": device, "dtype": dtype}
        self.gain: nn.Parameter | None = None
        self.register_buffer("offset", torch.empty(1, **self.factory_kwargs))
        nn.init.constant_(self.offset, 0.25)

    def initialize(self, layout) -> None:
        if self.gain is None:
            channels = layout.size[layout.finddim("C")[0]]
            self.gain = nn.Parameter(torch.empty(channels, 1, **self.factory_kwargs))
            self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.gain is not None:
            nn.init.ones_(self.gain)
        nn.init.constant_(self.offset, 0.25)

    def forward(self, x):
        return x * self.gain + self.offset


LAYER = ChannelGain

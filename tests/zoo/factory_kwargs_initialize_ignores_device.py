"""Broken for device= and dtype=: a layer that takes PyTorch's factory keywords but creates its
per-channel gain in ``initialize`` from the layout, with ``torch.ones(channels)`` — on the CPU, in
float32, whatever the constructor was given. The constructor alone places everything right (it
creates nothing); factory_kwargs must fail after initialize and name the parameter."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"factory_kwargs"}


class ChannelGain(nn.Module):
    def __init__(self, device=None, dtype=None) -> None:
        super().__init__()
        self.factory_kwargs = {"device": device, "dtype": dtype}
        self.gain: nn.Parameter | None = None

    def initialize(self, layout) -> None:
        if self.gain is None:
            channels = layout.size[layout.finddim("C")[0]]
            self.gain = nn.Parameter(torch.ones(channels, 1))  # the bug: **self.factory_kwargs left out

    def reset_parameters(self) -> None:
        nn.init.ones_(self.gain)

    def forward(self, x):
        return x * self.gain


LAYER = ChannelGain

"""Broken for deferred initialisation: a rotary-style layer whose constant frequencies live in a
buffer computed in the constructor, and whose ``reset_parameters`` sets only the weight. Built on
``meta`` and rebuilt with ``to_empty`` + ``reset_parameters`` (FSDP's deferred initialisation),
the frequencies are whatever memory to_empty left. Constructed normally it is right, so every
other check passes; factory_kwargs must fail and name the buffer reset_parameters forgets."""

import torch
from torch import nn

LAYOUTS = ["2,5,8:BTC"]
EXPECT_FAIL = {"factory_kwargs"}


class Rotary(nn.Module):
    def __init__(self, channels: int = 8, device=None, dtype=None) -> None:
        super().__init__()
        factory_kwargs = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(channels, channels, **factory_kwargs))
        self.register_buffer("frequencies", torch.linspace(0.1, 1.0, channels, **factory_kwargs), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.3)  # the bug: the frequencies are not recomputed here

    def forward(self, x):
        positions = torch.arange(x.shape[1], dtype=x.dtype, device=x.device)
        return (x @ self.weight.T) * torch.cos(positions[:, None] * self.frequencies)


LAYER = Rotary

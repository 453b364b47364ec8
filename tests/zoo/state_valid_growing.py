"""Broken: a layer keeps a history of per-call means by concatenating to a buffer, so the
state grows by one row per call (a memory leak); its size follows neither the batch nor
anything else the layout fixes."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"state_valid"}


class Layer(nn.Module):
    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.register_buffer("history", torch.zeros(1, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.history = torch.cat([self.history, x.mean(dim=(0, 2)).unsqueeze(0)])
        return x * self.weight.view(1, -1, 1)


LAYER = Layer

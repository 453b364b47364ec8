"""Broken: a layer adds the running mean of the inputs it has seen in training (a sum and a
step count, both state); reset_state zeroes the sum but forgets the count, so after a reset
the state is not the initial one and every later mean is divided by a stale count."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"reset_state"}


class Layer(nn.Module):
    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.register_buffer("total", torch.zeros(channels))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seen = self.total / self.count.clamp(min=1)  # what earlier calls saw: a constant for this call
        out = x * self.weight.view(1, -1, 1) + seen.view(1, -1, 1)
        if self.training:
            with torch.no_grad():
                self.total += x.mean(dim=(0, 2))
                self.count += 1
        return out

    def reset_state(self) -> None:
        self.total.zero_()  # bug: count is not reset


LAYER = Layer

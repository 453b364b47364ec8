"""Broken: an exponential moving average with bias correction divides by 1 - beta**step
before incrementing step, so the first training step stores inf/NaN in the corrected
statistic. The output does not depend on it yet; the state is already poisoned."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"state_valid"}


class Layer(nn.Module):
    def __init__(self, channels: int = 3, beta: float = 0.9) -> None:
        super().__init__()
        self.beta = beta
        self.weight = nn.Parameter(torch.ones(channels))
        self.register_buffer("ema", torch.zeros(channels))
        self.register_buffer("ema_corrected", torch.zeros(channels))
        self.register_buffer("step", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            with torch.no_grad():
                self.ema.mul_(self.beta).add_(x.mean(dim=(0, 2)), alpha=1 - self.beta)
                self.ema_corrected.copy_(self.ema / (1 - self.beta ** self.step))  # bug: step is still 0
                self.step += 1
        return x * self.weight.view(1, -1, 1)


LAYER = Layer

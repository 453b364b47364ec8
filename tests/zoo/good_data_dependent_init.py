"""Correct: Glow's activation normalisation (ActNorm), written as normflows writes it: the first
batch it sees sets its per-channel scale and shift (through ``.data``, so autograd holds them
constant) to make that batch's output zero-mean and unit-variance, and a buffer records that it
is done; from then on it is an elementwise affine map. Every check must start from the layer
after that first call (Note [data-dependent initialisation] in target/building.py): from the
constructed layer, the finite differences would move the initialisation with the input, and
one observation alone would initialise from a standard deviation of one value (NaN)."""

import torch
from torch import nn

LAYOUTS = ["6,4:BC"]
EXPECT_FAIL: set[str] = set()


class ActNorm(nn.Module):
    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.log_scale = nn.Parameter(torch.zeros(channels))
        self.shift = nn.Parameter(torch.zeros(channels))
        self.register_buffer("initialised", torch.tensor(False))

    def forward(self, x):
        if not self.initialised:
            self.log_scale.data = -torch.log(x.std(dim=0) + 1e-6)
            self.shift.data = -x.mean(dim=0) * torch.exp(self.log_scale.data)
            self.initialised.fill_(True)
        return x * torch.exp(self.log_scale) + self.shift


LAYER = ActNorm

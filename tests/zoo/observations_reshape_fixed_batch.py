"""Broken: a per-observation RMS normalisation that flattens each observation with
``x.reshape(self.batch_size, -1)``, the batch size taken from the training configuration, where
``x.reshape(x.shape[0], -1)`` was meant. At that batch size it is right. An observation alone
(1 x 3 x 4 here, 12 elements) reshapes to 4 x 3 without a complaint and, divided by four RMS
values, comes back with the whole batch's size, so nothing could be compared one observation at
a time and the check used to skip; a batch of two raises. observations must fail at a second
batch size."""

import torch
from torch import nn

LAYOUTS = ["4,3,4:BCU"]
EXPECT_FAIL = {"observations"}


class RMSNormalise(nn.Module):
    def __init__(self, channels: int = 3, batch_size: int = 4) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(self.batch_size, -1)  # the bug: x.reshape(x.shape[0], -1)
        rms = flat.pow(2).mean(dim=1).add(1e-6).sqrt()
        return x / rms.view(-1, 1, 1) * self.gain.view(1, -1, 1)


LAYER = RMSNormalise

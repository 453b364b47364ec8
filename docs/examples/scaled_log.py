"""A layer defined only for positive inputs: the layouts how-to's `values=positive` example."""

import torch
from torch import nn


class ScaledLog(nn.Module):
    """y = scale · log(x), one learnable scale per channel; x must be positive."""

    def __init__(self, channels: int = 16):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(channels))

    def forward(self, x):
        return self.scale * torch.log(x)

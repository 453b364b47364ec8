"""Correct: a Gaussian-process-style kernel whose constructor keeps whatever keywords it is given
as options (for its repr and a config file) and builds its parameters where PyTorch's default
puts them. It never declared ``device=``: given one through ``**options`` it keeps it as an
option and builds on the CPU, which breaks no promise, so factory_kwargs must not try it."""

import torch
from torch import nn

LAYOUTS = ["5,4:BC"]
EXPECT_FAIL: set[str] = set()


class RadialFeatures(nn.Module):
    def __init__(self, features: int = 4, **options: object) -> None:
        super().__init__()
        self.options = dict(options)
        self.lengthscale = nn.Parameter(torch.linspace(0.8, 1.6, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(-((x / self.lengthscale) ** 2))


LAYER = RadialFeatures

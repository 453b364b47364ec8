"""Broken: a custom operator defined through ``torch.library.Library`` with a CPU kernel and no
backward, called on the input where autograd records it. Its calls have no derivative: PyTorch
warns at backward and treats the operator's output as a constant, so nothing before the layer
learns."""

import torch
from torch import nn

LAYOUTS = ["3,8:BC"]
EXPECT_FAIL = {"op_autograd_registration"}


def _cube(x: torch.Tensor) -> torch.Tensor:
    return x * x * x


def _cube_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


if not hasattr(torch.ops.layercheck_zoo_missing, "cube"):  # once per process (the tests load this file often)
    torch.library.define("layercheck_zoo_missing::cube", "(Tensor x) -> Tensor")
    torch.library.impl("layercheck_zoo_missing::cube", "cpu", _cube)
    torch.library.register_fake("layercheck_zoo_missing::cube", _cube_fake)


class Cube(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.layercheck_zoo_missing.cube(x) * self.w


LAYER = Cube

"""Broken: a custom operator defined through ``torch.library`` with a Python CPU kernel and no
backward, whose kernel detaches part of its computation: x * (x * x).detach(). Without a
registered backward, autograd records the kernel's own operations (PyTorch warns), so the
gradient is x^2 where the derivative of x^3 is 3 x^2. Under a dispatch mode the same call gives
no gradient at all: a gradient check run under one must not leave the input out
(Note [a recorder that takes a gradient away])."""

import torch
from torch import nn

LAYOUTS = ["4,8:BC"]
EXPECT_FAIL = {"gradients", "op_autograd_registration"}


def _cube(x: torch.Tensor) -> torch.Tensor:
    return x * (x * x).detach()


def _cube_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


if not hasattr(torch.ops.layercheck_zoo_detach, "cube"):  # once per process (the tests load this file often)
    torch.library.define("layercheck_zoo_detach::cube", "(Tensor x) -> Tensor")
    torch.library.impl("layercheck_zoo_detach::cube", "cpu", _cube)
    torch.library.register_fake("layercheck_zoo_detach::cube", _cube_fake)


class Cube(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.layercheck_zoo_detach.cube(x) * self.w


LAYER = Cube

"""Broken: forward builds a position ramp with torch.arange and no device=, so it lives on the
CPU whatever device the input is on. On the CPU everything passes; on a GPU, and on the meta
device, forward raises a device mismatch."""

import torch
from torch import nn

from layercheck.checks.devices import accelerators

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"meta_device"} | ({"device"} if accelerators() else set())


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ramp = torch.arange(x.shape[-1], dtype=x.dtype) / x.shape[-1]  # bug: no device=x.device
        return x * (1 + ramp)


LAYER = Layer

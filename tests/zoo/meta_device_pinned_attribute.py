"""Broken: a fixed window kept as a plain tensor attribute instead of a buffer: .to(device)
does not move it, so the layer fails on any device but the CPU. meta_device catches it
without a GPU; registered_tensors names the attribute (the same root cause)."""

import torch
from torch import nn

from layercheck.checks.devices import accelerators

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"meta_device", "registered_tensors"} | ({"device"} if accelerators() else set())


class Layer(nn.Module):
    def __init__(self, width: int = 5) -> None:
        super().__init__()
        self.window = torch.hann_window(width + 2)[1:-1]  # bug: not register_buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.window.to(x.dtype)


LAYER = Layer

"""Broken on accelerators only: a "fast path" taken on any device but the CPU scales by the
wrong constant. CPU, meta (no values) and every CPU check pass; the device check must catch
it where a CUDA or MPS device is present (and skips without one)."""

import torch
from torch import nn

from layercheck.checks.devices import accelerators

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"device"} if accelerators() else set()


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu":
            return torch.tanh(x) * 2.0
        return torch.tanh(x) * 2.5  # bug: the accelerator path drifted from the CPU one


LAYER = Layer

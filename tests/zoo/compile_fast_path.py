"""Broken under torch.compile only: like several libraries, forward takes a separate
"compile-friendly" branch while torch.compile traces it, and that branch drifted from the
eager one: it uses the sigmoid approximation of GELU (``x * sigmoid(1.702 x)``, off by up
to 0.02) where eager computes the exact GELU. Every eager check passes; the compile check
must catch it."""

import torch
from torch import nn
from torch.nn import functional as F

LAYOUTS = ["4,3,5:BCU"]
ENABLE = ("compile",)
EXPECT_FAIL = {"compile"}

_is_compiling = getattr(torch.compiler, "is_compiling", None) or torch._dynamo.is_compiling


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _is_compiling():
            return x * torch.sigmoid(1.702 * x)  # the bug: not the GELU eager computes
        return F.gelu(x)


LAYER = Layer

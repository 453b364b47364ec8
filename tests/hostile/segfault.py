"""A segmentation fault in predict (native code reading address 0)."""

import ctypes

from torch import nn

CHECK = "predict_runs"
CAUSE = "SIGSEGV"


class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            ctypes.string_at(0)
        return x

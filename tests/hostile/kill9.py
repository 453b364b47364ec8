"""SIGKILL in predict: what the kernel's out-of-memory killer does to a process."""

import os
import signal

from torch import nn

CHECK = "predict_runs"
CAUSE = "SIGKILL"


class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            os.kill(os.getpid(), signal.SIGKILL)
        return x

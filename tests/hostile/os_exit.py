"""os._exit(3) in predict: the process ends at once, no exception, no cleanup."""

import os

from torch import nn

CHECK = "predict_runs"
CAUSE = "exited with status 3"


class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            os._exit(3)
        return x

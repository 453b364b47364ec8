"""sys.exit(0) in predict: in-process, the run stopped with exit status 0 and no report."""

import sys

from torch import nn

CHECK = "predict_runs"
CAUSE = "SystemExit(0)"


class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            sys.exit(0)
        return x

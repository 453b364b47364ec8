"""Predict loops forever and swallows every exception, the time-limit one too."""

import time

from torch import nn

CHECK = "predict_runs"
CAUSE = "timed out after"


class Layer(nn.Module):
    def forward(self, x):
        while not self.training:
            try:
                time.sleep(0.01)
            except BaseException:
                pass
        return x

"""Broken when training resumes from a checkpoint (a reported and fixed bug of public normalising-
flow code, reduced): Glow's activation normalisation initialises its scale and shift from the
first batch it sees, and keeps its "initialised" flag as a plain Python bool. The flag is not in
the state_dict, so after ``load_state_dict`` into a fresh instance the next training forward
initialises again, from that batch, over the trained parameters. Predict never calls the
initialisation; the state_dict check's training round trip catches it. Correct twin:
good_data_dependent_init (the flag in a buffer)."""

import torch
from torch import nn

LAYOUTS = ["6,4:BC"]
EXPECT_FAIL = {"state_dict"}


class ActNorm(nn.Module):
    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.log_scale = nn.Parameter(torch.zeros(channels))
        self.shift = nn.Parameter(torch.zeros(channels))
        self.initialised = False

    def forward(self, x):
        if self.training and not self.initialised:
            self.log_scale.data = -torch.log(x.std(dim=0) + 1e-6)
            self.shift.data = -x.mean(dim=0) * torch.exp(self.log_scale.data)
            self.initialised = True
        return x * torch.exp(self.log_scale) + self.shift


LAYER = ActNorm

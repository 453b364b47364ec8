"""Broken: an Elman recurrence whose initial hidden state is a buffer of zeros that ``initialize``
sizes from the layout's B dimension (batch x hidden) where one row (1 x hidden) was meant. At the
layout's batch it is right; an observation alone broadcasts against all rows and comes back with
the whole batch's size, so nothing could be compared one observation at a time and the check
used to skip; training's last, smaller batch raises. observations must fail at a second batch
size."""

import torch
from torch import nn

LAYOUTS = ["5,4,3:TBC"]
EXPECT_FAIL = {"observations"}


class Recurrence(nn.Module):
    def __init__(self, hidden: int = 4) -> None:
        super().__init__()
        self.hidden = hidden
        self.weight_ih: nn.Parameter | None = None
        self.weight_hh = nn.Parameter(torch.linspace(-0.4, 0.4, hidden * hidden).reshape(hidden, hidden))
        self.register_buffer("h0", None)  # made by initialize

    def initialize(self, layout) -> None:
        if self.weight_ih is None:
            channels = layout.size[layout.finddim("C")[0]]
            self.weight_ih = nn.Parameter(torch.linspace(-0.5, 0.5, self.hidden * channels).reshape(self.hidden,
                                                                                                      channels))
        if self.h0 is None:
            batch = layout.size[layout.finddim("B")[0]]
            self.h0 = torch.zeros(batch, self.hidden)  # the bug: torch.zeros(1, self.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.h0
        steps = []
        for x_t in x.unbind(0):
            h = torch.tanh(x_t @ self.weight_ih.T + h @ self.weight_hh.T)
            steps.append(h)
        return torch.stack(steps)


LAYER = Recurrence

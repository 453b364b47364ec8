"""Correct: a stateful Elman recurrence over T that carries its hidden state from one call to
the next (predict and forward alike) and resizes it to the batch; reset_state zeroes it. The
state's size changes only to follow the batch, which state_valid must accept; observations
must start every observation from the initial state."""

import torch
from torch import nn

LAYOUTS = ["5,3,4:TBC"]
EXPECT_FAIL: set[str] = set()


class Layer(nn.Module):
    def __init__(self, hidden: int = 6) -> None:
        super().__init__()
        self.hidden = hidden
        self.weight_ih: nn.Parameter | None = None
        self.weight_hh = nn.Parameter(torch.randn(hidden, hidden) * 0.3)
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.register_buffer("h", torch.zeros(1, hidden))

    def initialize(self, layout) -> None:
        if self.weight_ih is None:
            channels = layout.size[layout.finddim("C")[0]]
            self.weight_ih = nn.Parameter(torch.randn(self.hidden, channels) * 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.h
        if h.shape[0] != x.shape[1]:
            h = h.new_zeros(x.shape[1], self.hidden)  # a new batch starts from the zero state
        steps = []
        for x_t in x.unbind(0):
            h = torch.tanh(x_t @ self.weight_ih.T + h @ self.weight_hh.T + self.bias)
            steps.append(h)
        self.h = h.detach()
        return torch.stack(steps)

    def reset_state(self) -> None:
        self.h = self.h.new_zeros(1, self.hidden)


LAYER = Layer

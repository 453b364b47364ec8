"""Correct: a recurrent cell that keeps its hidden state in a buffer, updated by every training
forward (h = tanh(W x + U h_prev)). The gradient check must restore the state before every
evaluation, or each finite difference would see another h_prev."""

import torch
from torch import nn

LAYOUTS = ["3,5:BC"]
EXPECT_FAIL: set[str] = set()
# its hidden state is made for a batch of three: it takes no other batch size, and says so
SKIP = {"observations"}


class StatefulCell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-0.5, 0.5, 20).view(4, 5))
        self.u = nn.Parameter(torch.eye(4) * 0.5)
        self.register_buffer("h", torch.linspace(-0.3, 0.3, 12).view(3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ self.w.T + self.h @ self.u.T)
        self.h = h.detach()
        return h

    def reset_state(self) -> None:
        self.h = torch.linspace(-0.3, 0.3, 12, dtype=self.h.dtype, device=self.h.device).view(3, 4)


LAYER = StatefulCell

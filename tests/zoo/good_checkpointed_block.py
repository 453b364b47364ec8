"""Correct: a block run under non-reentrant activation checkpointing
(``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``), as large models are trained
with frozen layers. Checkpointing recomputes the forward during backward and refuses a graph
that differs from the one it saved, so a frozen parameter must stay frozen until backward ends:
needs_input_grad froze it for the forward only and made the checkpoint raise."""

from torch import nn
from torch.utils.checkpoint import checkpoint

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL: set[str] = set()


class CheckpointedMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 6))

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


LAYER = CheckpointedMLP

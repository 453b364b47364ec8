"""Correct: a block run through reentrant activation checkpointing
(``torch.utils.checkpoint.checkpoint(..., use_reentrant=True)``, what ``checkpoint`` did by
default for years). Its backward re-runs the block and only works through ``loss.backward()``:
``autograd.grad`` and ``backward(inputs=...)`` raise ("not supported"). Trained as a model trains
it, its gradients are right."""

from torch import nn
from torch.utils.checkpoint import checkpoint

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"needs_input_grad": "reentrant checkpointing"}


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 6))

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=True)


LAYER = Checkpointed

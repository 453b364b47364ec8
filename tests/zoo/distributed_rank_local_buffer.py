"""Broken under data parallelism (the opt-in ``distributed`` check): an activation observer
(as quantisation-aware training keeps one) records the largest output magnitude seen in
training in a buffer, from each rank's own part of the batch. After a step the ranks' buffers
differ; DDP copies rank 0's to every rank at the next forward, so what the other ranks saw is
lost (and without buffer broadcasting the replicas drift apart). In one process it is correct,
and the default suite passes it."""

import torch
from torch import nn

LAYOUTS = ["8,4:BC"]
EXPECT_FAIL: set[str] = set()


class ObservedLinear(nn.Module):
    def __init__(self, features: int = 4) -> None:
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.register_buffer("max_abs", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if self.training:
            with torch.no_grad():  # the bug: updated from this rank's data only
                self.max_abs.copy_(torch.maximum(self.max_abs, y.abs().amax()))
        return y


LAYER = ObservedLinear

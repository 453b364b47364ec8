"""Correct: stochastic depth (a residual branch dropped per observation in training, scaled by
1/(1-p) when kept, whole in eval). Two seeds can keep every row of a small batch alike, so its
outputs under both agree: that its training forward draws random numbers says it is random."""

import torch
from torch import nn

LAYOUTS = ["4,5,8:BTC"]
EXPECT_FAIL: set[str] = set()


class Layer(nn.Module):
    def __init__(self, p: float = 0.2) -> None:
        super().__init__()
        self.p = p
        self.branch = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x + self.branch(x)
        keep = (torch.rand(x.shape[0], 1, 1, device=x.device) > self.p).to(x.dtype) / (1 - self.p)
        return x + self.branch(x) * keep


LAYER = Layer

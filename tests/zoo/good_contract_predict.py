"""Correct: a separate predict. Training adds Gaussian noise (a regulariser drawn from the
random stream); predict is the noise-free expectation. Values of forward may not be compared
across memory layouts (the noise is laid out in memory order), and predict must be
deterministic."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()


class Layer(nn.Module):
    def __init__(self, sigma: float = 0.1) -> None:
        super().__init__()
        self.sigma = sigma
        self.weight = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.weight * x) + self.sigma * torch.randn_like(x)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.weight * x)


LAYER = Layer

"""Correct: a custom normalisation with state. Training normalises with batch statistics and
updates running ones in place under no_grad; predict uses the running statistics; reset_state
puts them back to their initial values. Every contract check must pass (reset_state runs)."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()


class Layer(nn.Module):
    def __init__(self, channels: int = 3, momentum: float = 0.1, eps: float = 1e-5) -> None:
        super().__init__()
        self.momentum = momentum
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            mean = x.mean(dim=(0, 2))
            var = x.var(dim=(0, 2), unbiased=False)
            with torch.no_grad():
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(var, self.momentum)
                self.steps += 1
        else:
            mean, var = self.running_mean, self.running_var
        scale = self.weight / torch.sqrt(var + self.eps)
        return (x - mean.view(1, -1, 1)) * scale.view(1, -1, 1)

    def reset_state(self) -> None:
        self.running_mean.zero_()
        self.running_var.fill_(1.0)
        self.steps.zero_()


LAYER = Layer

"""Correct: a masked (autoregressive-style) linear layer built the way Pyro's AutoRegressiveNN
builds its MaskedLinear layers: the mask is registered as a buffer by the inner layer, while
the outer layer also keeps it in a plain list, and keeps a skip mask it never uses. The buffer
carries what the layer computes with; the plain attributes are never read by a call, so there
is nothing for .to(), state_dict() or an optimiser to miss: registered_tensors must pass."""

import torch
from torch import nn
from torch.nn import functional as F

LAYOUTS = ["5,4:BC"]
EXPECT_FAIL: set[str] = set()


class MaskedLinear(nn.Linear):
    def __init__(self, features: int, mask: torch.Tensor) -> None:
        super().__init__(features, features)
        self.register_buffer("mask", mask.data)

    def forward(self, x):
        return F.linear(x, self.weight * self.mask, self.bias)


class MaskedStack(nn.Module):
    def __init__(self, features: int = 4) -> None:
        super().__init__()
        self.masks = [torch.tril(torch.ones(features, features), -1)]  # kept after building: never read
        self.mask_skip = torch.tril(torch.ones(features, features))  # for skip connections, which are off
        self.layer = MaskedLinear(features, self.masks[0])

    def forward(self, x):
        return torch.tanh(self.layer(x))


LAYER = MaskedStack

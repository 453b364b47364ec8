"""Correct: a vector quantiser (VQ-VAE) that passes its codebook entry forward and the input's
gradient straight through (``x + (q - x).detach()``), with the commitment and codebook losses
as a second output. Its forward is piecewise constant in the input, so finite differences of
it disagree with the straight-through gradient by design; with the detached value held at the
point they agree (Note [straight-through estimators] in layercheck/numerics/trace.py)."""

import torch
from torch import nn

LAYOUTS = ["6,4:BC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "straight-through estimator"}


class VectorQuantizer(nn.Module):
    def __init__(self, channels: int = 4, codes: int = 5) -> None:
        super().__init__()
        self.codebook = nn.Parameter(torch.linspace(-1.5, 1.5, codes * channels).reshape(codes, channels))

    def forward(self, x):
        index = torch.cdist(x, self.codebook).argmin(dim=1)
        q = self.codebook[index]
        loss = ((q.detach() - x) ** 2).mean() * 0.25 + ((q - x.detach()) ** 2).mean()
        return x + (q - x).detach(), loss


LAYER = VectorQuantizer

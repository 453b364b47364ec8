"""Correct: the same sharp softmax as gradients_softmax_overflows_in_float32, with the maximum
subtracted before exp, as torch.softmax does: finite in float32 at any magnitude, so the draw
into the tails (Note [tails in float32]) finds float32 and float64 in agreement."""

import torch

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = set()


class StableSharpSoftmax(torch.nn.Module):
    def __init__(self, temperature=0.05):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        z = x / self.temperature
        e = torch.exp(z - z.amax(dim=1, keepdim=True).detach())
        return e / e.sum(dim=1, keepdim=True)


LAYER = StableSharpSoftmax

"""Broken: the random-feature layer of good_random_projection_in_input_dtype.py (its projection
drawn inside forward, from a fixed seed, in the input's dtype, so that it computes another
function in float32 than in float64) with a hand-written backward that is right in float64 and
wrong in float32: a "fast path" for float32 that drops the 1/sqrt(dim) scale. gradients[float32]
judges the float32 gradients against float32 finite differences of the float32 layer (the float64
gradient is no yardstick for them) and must still see the missing factor."""

import torch
from torch import nn

LAYOUTS = ["6,8:BC"]
EXPECT_FAIL = {"gradients"}


class _Project(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return x @ w / w.shape[0] ** 0.5

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        scale = 1.0 if g.dtype == torch.float32 else w.shape[0] ** -0.5  # the bug: the float32 path drops it
        return g @ w.t() * scale, None


class RandomFeatures(nn.Module):
    def __init__(self, dim: int = 8, features: int = 16, seed: int = 1234) -> None:
        super().__init__()
        self.dim, self.features, self.seed = dim, features, seed

    def forward(self, x):
        g = torch.Generator(device="cpu").manual_seed(self.seed)
        w = torch.randn(self.dim, self.features, generator=g, dtype=x.dtype).to(x.device)
        z = _Project.apply(x, w)
        return torch.cat([torch.cos(z), torch.sin(z)], dim=-1)


LAYER = RandomFeatures

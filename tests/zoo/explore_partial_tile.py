"""Broken only beyond the declared sizes: a squared activation whose hand-written backward walks
the sequence in tiles of 16, as its kernel does, and forgets the last partial tile. At the
declared length (32, two whole tiles) it is right; at any length that is not a multiple of 16
the last steps get no gradient. The default draws miss it; ``--explore`` finds it (an odd length)."""

import torch
from torch import nn

LAYOUTS = ["2,32:BT"]
EXPECT_FAIL: set[str] = set()
EXPECT_FAIL_EXPLORED = {"gradients"}

BLOCK = 16


class TiledSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        out = torch.zeros_like(x)
        length = x.shape[-1]
        for start in range(0, length - length % BLOCK, BLOCK):  # whole tiles only
            tile = slice(start, start + BLOCK)
            out[..., tile] = 2 * x[..., tile] * grad[..., tile]
        return out


class Square(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return TiledSquare.apply(x)


LAYER = Square

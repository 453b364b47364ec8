"""Broken: the hand-written backward always returns float32 (``.float()``), so a float64
model silently gets float32-precision gradients: autograd casts them back without a word.
The raw backward output shows it in float64 (backward_size), and so do its float64 gradients against
autograd's derivative of the same forward (gradients: Note [float64 backward precision])."""

import torch
from torch import nn

LAYOUTS = ["4,3:BC"]
EXPECT_FAIL = {"backward_size", "gradients"}


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (2 * x * grad).float()


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Square.apply(x)


LAYER = Layer

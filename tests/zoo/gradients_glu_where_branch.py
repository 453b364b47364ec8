"""Broken: a gated linear unit with a hand-written backward whose gate derivative misses the
factor 0.5 on one branch of its torch.where: the gate is a leaky ramp (slope 1 above zero, 0.5
below), and the backward uses slope 1 on both sides. The gradient of the gate half of the input
(channels 16..31), where the gate is negative (about half of them), is twice the right one; every
other element's is right. A bug of one branch, on a quarter of the elements."""

import torch
from torch import nn

LAYOUTS = ["8,32:BC"]
EXPECT_FAIL = {"gradients"}


class LeakyGate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        value, gate = x.chunk(2, dim=-1)
        ctx.save_for_backward(value, gate)
        return value * torch.where(gate > 0, gate, 0.5 * gate)

    @staticmethod
    def backward(ctx, grad):
        value, gate = ctx.saved_tensors
        grad_value = grad * torch.where(gate > 0, gate, 0.5 * gate)
        grad_gate = grad * value * torch.where(gate > 0, 1.0, 1.0)  # the bug: 0.5 where the gate is negative
        return torch.cat([grad_value, grad_gate], dim=-1)


class LeakyGLU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LeakyGate.apply(x)


LAYER = LeakyGLU

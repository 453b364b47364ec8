"""Correct: a gated unit with two inputs and a hand-written backward that honours
needs_input_grad: out = x * sigmoid(gate + bias). First-order only: backward uses the
sigmoid saved from forward, so its double backward is wrong (opt-in gradgrad, not enabled)."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC", "4,6:BC"]
EXPECT_FAIL: set[str] = set()


class Gated(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gate, bias):
        s = torch.sigmoid(gate + bias)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        need_x, need_gate, need_bias = ctx.needs_input_grad
        grad_x = grad * s if need_x else None
        inner = grad * x * s * (1 - s) if (need_gate or need_bias) else None
        return grad_x, inner if need_gate else None, inner.sum(0) if need_bias else None


class GatedUnit(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, 6))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return Gated.apply(x, gate, self.bias)


LAYER = GatedUnit

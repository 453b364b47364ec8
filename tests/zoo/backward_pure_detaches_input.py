"""Broken: a memory-saving Function whose backward recomputes from its saved input after
``x.detach_()`` where ``x.detach()`` was meant (memcnn's couplings, mutated): the gradient
is right, but the caller's input is cut in place from the graph that made it: what is computed
from it after the backward no longer reaches the layers before."""

import torch
from torch import nn

LAYOUTS = ["3,4:BC"]
EXPECT_FAIL = {"backward_pure"}


class TanhRecompute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.tanh(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        x = x.detach_()  # the bug: detach() was meant
        with torch.enable_grad():
            x = x.requires_grad_()
            y = torch.tanh(x)
            (dx,) = torch.autograd.grad(y, x, grad)
        return dx


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return TanhRecompute.apply(x)


LAYER = Layer

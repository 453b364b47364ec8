"""Broken for torch.func: a correct Swish with a learnable beta and a hand-written backward and
jvp, written in the old style (``forward(ctx, ...)``, no ``setup_context``, no vmap rule).
Autograd and forward-mode AD run it, so every default check and forward_ad pass; ``torch.vmap``
and ``torch.func.grad`` refuse it. vmap must fail and say that the Function needs
setup_context and a vmap rule."""

import torch
from torch import nn

LAYOUTS = ["4,3:BC"]
EXPECT_FAIL = {"vmap"}
ENABLE = ("vmap", "forward_ad")


class OldStyleSwishFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x, beta)
        ctx.save_for_forward(x, beta)
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def backward(ctx, grad):
        x, beta = ctx.saved_tensors
        s = torch.sigmoid(beta * x)
        ds = s * (1 - s)
        return grad * (s + x * beta * ds), (grad * x * x * ds).sum_to_size(beta.shape)

    @staticmethod
    def jvp(ctx, x_t, beta_t):
        x, beta = ctx.saved_tensors
        s = torch.sigmoid(beta * x)
        ds = s * (1 - s)
        return x_t * (s + x * beta * ds) + beta_t * x * x * ds


class OldStyleSwish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.tensor([0.5, 1.0, 1.5]))

    def forward(self, x):
        return OldStyleSwishFunction.apply(x, self.beta)


LAYER = OldStyleSwish

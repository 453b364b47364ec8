"""Correct for every transform: the Swish of ``vmap_function_without_setup_context`` written the
torch.func way — ``forward`` without ``ctx``, ``setup_context`` saving what backward and jvp
need, ``generate_vmap_rule = True``. It must pass every default check and the opt-in vmap,
forward_ad and autocast checks."""

import torch
from torch import nn

LAYOUTS = ["4,3:BC"]
EXPECT_FAIL: set[str] = set()
ENABLE = ("vmap", "forward_ad", "autocast")


class SwishFunction(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, beta):
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

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
        tangent = torch.zeros_like(x)
        if x_t is not None:
            tangent = tangent + x_t * (s + x * beta * ds)
        if beta_t is not None:
            tangent = tangent + beta_t * x * x * ds
        return tangent


class Swish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.tensor([0.5, 1.0, 1.5]))

    def forward(self, x):
        return SwishFunction.apply(x, self.beta)


LAYER = Swish

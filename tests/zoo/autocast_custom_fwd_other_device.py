"""Broken under CPU mixed precision: the hand-written linear Function of
``good_autocast_custom_fwd`` decorated with ``@torch.amp.custom_fwd(device_type="cuda")`` and
``custom_bwd`` for CUDA only. The decorators act on CUDA's autocast alone: under
``torch.autocast("cpu")`` the forward's matmul is cast to bfloat16 and the backward runs outside
autocast on bfloat16 and float32, and raises (on a GPU machine a layer decorated for "cpu" fails
autocast:cuda the same way). autocast must fail and name the device type the decorators are for."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"autocast"}
ENABLE = ("autocast",)


class CudaOnlyLinearFunction(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight.T

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.T @ x


class HandWrittenLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 6) * 0.3)

    def forward(self, x):
        return CudaOnlyLinearFunction.apply(x, self.weight)


LAYER = HandWrittenLinear

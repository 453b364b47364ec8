"""Correct under mixed precision: the same hand-written linear Function as
``autocast_function_without_custom_fwd``, with ``@torch.amp.custom_fwd``/``@torch.amp.custom_bwd``,
so that its backward runs under the autocast state its forward saw. The decorators act on one
device type's autocast, so the layer has one Function per device type and picks the one for its
input's device: it trains under CPU and CUDA autocast alike. It must pass every default check
and the opt-in autocast check (autocast:cuda too, where CUDA is present)."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL: set[str] = set()
ENABLE = ("autocast",)


def _linear_function(device_type: str) -> type[torch.autograd.Function]:
    class LinearFunction(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type=device_type)
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return x @ weight.T

        @staticmethod
        @torch.amp.custom_bwd(device_type=device_type)
        def backward(ctx, grad):
            x, weight = ctx.saved_tensors
            return grad @ weight, grad.T @ x

    return LinearFunction


FUNCTIONS = {device_type: _linear_function(device_type) for device_type in ("cpu", "cuda")}


class HandWrittenLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 6) * 0.3)

    def forward(self, x):
        return FUNCTIONS[x.device.type].apply(x, self.weight)


LAYER = HandWrittenLinear

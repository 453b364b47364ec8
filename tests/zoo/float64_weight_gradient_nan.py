"""Broken: a normalisation whose hand-written backward picks its weight-gradient kernel by
dtype, and the float64 entry leaves the accumulator unwritten (NaN). Its float32 outputs and
gradients are finite and right, so the finite check, which looks at float32, passes; the
float64 gradient check cannot difference a NaN gradient, and used to skip pointing at finite:
a green run for a layer that trains to NaN in float64 (Note [no silent pass])."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"gradients"}
EXPECT_NOTES = {"gradients": "its float32 gradients were judged against float32 finite differences"}


def _weight_grad(grad: torch.Tensor, normed: torch.Tensor) -> torch.Tensor:
    accumulator = torch.full(normed.shape[1:], float("nan"), dtype=grad.dtype)
    if grad.dtype in (torch.float32, torch.float16, torch.bfloat16):  # the bug: no float64 kernel
        accumulator = (grad * normed).sum(0)
    return accumulator


class _RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        rms = x.square().mean(-1, keepdim=True).add(1e-6).rsqrt()
        normed = x * rms
        ctx.save_for_backward(normed, rms, weight)
        return normed * weight

    @staticmethod
    def backward(ctx, grad):
        normed, rms, weight = ctx.saved_tensors
        g = grad * weight
        dx = rms * (g - normed * (g * normed).mean(-1, keepdim=True))
        return dx, _weight_grad(grad, normed)


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNormFn.apply(x, self.weight)


LAYER = RMSNorm

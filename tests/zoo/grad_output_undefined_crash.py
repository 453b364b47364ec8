"""Broken when the output's gradient is undefined: a Function that turns off gradient
materialisation (``ctx.set_materialize_grads(False)``, to save allocating zeros) and then
multiplies the incoming gradient without looking, so backward raises TypeError when it receives
None — which it does when the layer after it returns None for its input (a legal "zero"
gradient). Every gradient it computes is right; grad_output must fail (gradcheck's
check_undefined_grad)."""

import torch
from torch import nn

LAYOUTS = ["4,5:BC"]
EXPECT_FAIL = {"grad_output"}


class ScaledSinFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, scale)
        return scale * torch.sin(x)

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        return grad * scale * torch.cos(x), (grad * torch.sin(x)).sum(dim=0)  # the bug: grad may be None


class ScaledSin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 5))

    def forward(self, x):
        return ScaledSinFunction.apply(x, self.scale)


LAYER = ScaledSin

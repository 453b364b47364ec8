"""Broken when an output is not used: a Function with two outputs (the activation and its
per-row sum, returned for a regulariser) that turns off gradient materialisation
(``ctx.set_materialize_grads(False)``) and, when the sum's gradient arrives as None because the
caller did not use it (``y, _ = layer(x)``), takes it as ones instead of zeros. With both outputs
used the gradient is right, so gradients passes; with one output used alone it is not, and
grad_output must fail."""

import torch
from torch import nn

LAYOUTS = ["4,5:BC"]
EXPECT_FAIL = {"grad_output"}


class SoftplusWithSumFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        y = torch.nn.functional.softplus(x)
        return y, y.sum(dim=1)

    @staticmethod
    def backward(ctx, grad_y, grad_sum):
        (x,) = ctx.saved_tensors
        if grad_y is None:
            grad_y = torch.zeros_like(x)
        if grad_sum is None:
            grad_sum = torch.ones(x.shape[0], dtype=x.dtype)  # the bug: an unused output's gradient is zero
        return (grad_y + grad_sum[:, None]) * torch.sigmoid(x)


class SoftplusWithSum(nn.Module):
    def forward(self, x):
        return SoftplusWithSumFunction.apply(x)


LAYER = SoftplusWithSum

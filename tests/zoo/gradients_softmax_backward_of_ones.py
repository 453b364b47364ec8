"""Bug: a masked softmax written as a Function (DeBERTa's and SEW-D's XSoftmax) whose backward
hands the softmax backward ones instead of grad_output. The softmax backward of ones is
y·(1 − Σy): zero by cancellation, about 1e-17, so the analytic gradient is rounding only. The
noise the differences may carry was judged against that spread and the check skipped the layer
as too noisy, though the differences see a derivative of order one far above their noise;
gradcheck fails it. The gradient check must fail it (Note [a derivative the gradient misses])."""

import torch
from torch import nn

LAYOUTS = ["2,4,6:BTC", "2,4,6:BTC dtype=bool values=0.8"]
EXPECT_FAIL = {"gradients"}


class XSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mask, dim):
        ctx.dim = dim
        rmask = ~mask
        y = torch.softmax(x.masked_fill(rmask, torch.finfo(x.dtype).min), dim)
        y = y.masked_fill(rmask, 0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        # bug: torch.ones_like(grad_output) where grad_output belongs
        return torch._softmax_backward_data(torch.ones_like(grad_output), y, ctx.dim, y.dtype), None, None


class MaskedSoftmax(nn.Module):
    def forward(self, x, mask):
        return XSoftmax.apply(x, mask, -1)


LAYER = MaskedSoftmax

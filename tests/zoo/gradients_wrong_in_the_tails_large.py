"""Broken: a sigmoid gate whose hand-written backward takes the derivative from exp(-|x|) with
|x| capped at 6 ("to keep exp from underflowing"): wrong only where |x| > 6, and the layout is
large. Standard-normal inputs of this size stay within about ±4.6, and a large layer gets no
second draw; the gradient check's draw into the tails, on the first observations of the batch,
reaches there (Note [tails])."""

import torch

LAYOUTS = ["8,16,32,32:BCSS"]
EXPECT_FAIL = {"gradients"}


class GateFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        e = torch.exp(-x.abs().clamp(max=6.0))  # the bug: the derivative needs exp(-|x|) uncapped
        return grad * e / (1 + e) ** 2


class Gate(torch.nn.Module):
    def forward(self, x):
        return x * GateFunction.apply(x)


LAYER = Gate

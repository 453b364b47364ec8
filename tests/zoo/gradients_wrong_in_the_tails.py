"""Broken: a sigmoid whose hand-written backward computes the derivative from the output
clamped to [0.01, 0.99] (meant to keep a log elsewhere finite), which is wrong only where
|x| > 4.6. Standard-normal inputs at this size never reach there; the gradient check's draw
scaled into the tails does (Note [tails])."""

import torch

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"gradients"}


class ClampedSigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        y = y.clamp(0.01, 0.99)  # the bug: the derivative of the unclamped output is y * (1 - y)
        return grad * y * (1 - y)


LAYER = ClampedSigmoid

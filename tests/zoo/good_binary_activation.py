"""Correct: a binarised activation (BinaryConnect, XNOR-Net) with a learned per-channel scale:
sign(x) · alpha, the sign a Function whose backward passes the gradient where |x| <= 1 (the
hard-tanh surrogate). Its forward is piecewise constant in x, so the gradient of x is a
surrogate by design, left out of the gradient check with a note (Note [surrogate gradients]);
alpha's is judged."""

import torch
from torch import nn

LAYOUTS = ["4,6,5:BCU"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "SignSurrogate computes a step"}
MUTANTS = False  # benchmarks/mutants.py: a mutant of a surrogate is another surrogate, judged by nothing


class SignSurrogate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


class BinaryActivation(nn.Module):
    def __init__(self, channels: int = 6) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.linspace(0.5, 1.5, channels))

    def forward(self, x):
        return SignSurrogate.apply(x) * self.alpha.view(1, -1, 1)


LAYER = BinaryActivation

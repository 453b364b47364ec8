"""Broken: a learned-step quantiser (LSQ) whose rounding is a correct straight-through
estimator, but whose multiplication by the step is a hand-written function that returns
twice the step's gradient. The straight-through part is by design; the step's gradient is
wrong, and holding the detached values constant must not hide that."""

import torch
from torch import nn

LAYOUTS = ["4,5:BC"]
EXPECT_FAIL = {"gradients"}


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v, step):
        ctx.save_for_backward(v, step)
        return v * step

    @staticmethod
    def backward(ctx, grad):
        v, step = ctx.saved_tensors
        return grad * step, 2 * (grad * v).sum().reshape(step.shape)  # should be (grad * v).sum()


class LearnedStepQuantizer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.step = nn.Parameter(torch.tensor(0.3))

    def forward(self, x):
        v = (x / self.step).clamp(-4, 3)
        v = v + (v.round() - v).detach()
        return Scale.apply(v, self.step)


LAYER = LearnedStepQuantizer

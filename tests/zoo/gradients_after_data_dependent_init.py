"""Broken: the ActNorm of ``good_data_dependent_init`` (it initialises itself from its first
batch) whose scale is applied by a hand-written Function with a backward wrong by a factor for
the scale. Starting every check from the layer after its first call must not hide a bug in
what it computes from then on: gradients fails."""

import torch
from torch import nn

LAYOUTS = ["6,4:BC"]
EXPECT_FAIL = {"gradients"}


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, log_scale):
        scale = torch.exp(log_scale)
        ctx.save_for_backward(x, scale)
        return x * scale

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        return grad * scale, 0.5 * (grad * x * scale).sum(0)  # the scale's gradient halved


class ActNorm(nn.Module):
    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.log_scale = nn.Parameter(torch.zeros(channels))
        self.shift = nn.Parameter(torch.zeros(channels))
        self.register_buffer("initialised", torch.tensor(False))

    def forward(self, x):
        if not self.initialised:
            self.log_scale.data = -torch.log(x.std(dim=0) + 1e-6)
            self.shift.data = -x.mean(dim=0) * torch.exp(self.log_scale.data)
            self.initialised.fill_(True)
        return _Scale.apply(x, self.log_scale) + self.shift


LAYER = ActNorm

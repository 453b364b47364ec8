"""Broken: a leaky integrate-and-fire neuron whose membrane update v = beta·v + i is a
Function with a hand-written backward that forgets the leak on the way back (grad_v is the
incoming gradient, not beta times it). Beside it sits a surrogate spike, whose gradient finite
differences cannot judge: with that gradient taken as zero, the leak's backward still
disagrees, and gradients must say so."""

import torch
from torch import nn

LAYOUTS = ["3,6,5:BTC"]
EXPECT_FAIL = {"gradients"}


class Spike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):
        ctx.save_for_backward(v)
        return (v > 0).to(v.dtype)

    @staticmethod
    def backward(ctx, grad):
        (v,) = ctx.saved_tensors
        return grad / (1 + 5 * v.abs()) ** 2


class Leak(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v, beta, i):
        ctx.save_for_backward(v, beta)
        return beta * v + i

    @staticmethod
    def backward(ctx, grad):
        v, _beta = ctx.saved_tensors
        return grad, (grad * v).sum(0), grad  # bug: grad_v should be grad * _beta


class LeakyIntegrateAndFire(nn.Module):
    def __init__(self, features: int = 5) -> None:
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.decay = nn.Parameter(torch.linspace(0.5, 1.5, features))
        self.threshold = nn.Parameter(torch.full((features,), 0.5))

    def forward(self, x):
        beta = torch.sigmoid(self.decay)
        v = torch.zeros_like(x[:, 0])
        spikes, potentials = [], []
        for t in range(x.shape[1]):
            v = Leak.apply(v, beta, self.fc(x[:, t]))
            spike = Spike.apply(v - self.threshold)
            v = v - spike.detach() * self.threshold
            spikes.append(spike)
            potentials.append(v)
        return torch.stack(spikes, 1), torch.stack(potentials, 1)


LAYER = LeakyIntegrateAndFire

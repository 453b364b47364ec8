"""Correct: a leaky integrate-and-fire neuron run over a sequence, as spiking-network libraries
(snntorch, spikingjelly, norse) write it: v = beta·v + W x_t, a spike where v crosses the
threshold, the spike subtracted back (the reset detached). The spike is a Function whose
forward is a step and whose backward is a fast-sigmoid surrogate, so the gradient check judges
everything else with the surrogate's gradient taken as zero (Note [surrogate gradients]): the
leak, the threshold and the weights through the membrane potential it returns."""

import torch
from torch import nn

LAYOUTS = ["3,6,5:BTC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "FastSigmoidSpike computes a step"}
MUTANTS = False  # benchmarks/mutants.py: a mutant of a surrogate is another surrogate, judged by nothing


class FastSigmoidSpike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):
        ctx.save_for_backward(v)
        return (v > 0).to(v.dtype)

    @staticmethod
    def backward(ctx, grad):
        (v,) = ctx.saved_tensors
        return grad / (1 + 5 * v.abs()) ** 2


class LeakyIntegrateAndFire(nn.Module):
    def __init__(self, features: int = 5) -> None:
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.decay = nn.Parameter(torch.linspace(0.5, 1.5, features))  # beta = sigmoid(decay)
        self.threshold = nn.Parameter(torch.full((features,), 0.5))

    def forward(self, x):
        beta = torch.sigmoid(self.decay)
        v = torch.zeros_like(x[:, 0])
        spikes, potentials = [], []
        for t in range(x.shape[1]):
            v = beta * v + self.fc(x[:, t])
            spike = FastSigmoidSpike.apply(v - self.threshold)
            v = v - spike.detach() * self.threshold
            spikes.append(spike)
            potentials.append(v)
        return torch.stack(spikes, 1), torch.stack(potentials, 1)


LAYER = LeakyIntegrateAndFire

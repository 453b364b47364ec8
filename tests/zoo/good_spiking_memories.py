"""Correct: a multi-step spiking neuron written as spikingjelly writes its nodes: the membrane
potential is kept between calls in a dict of "memories" (not a buffer), carries its autograd
graph from one call into the next until reset_state, and the layer returns spikes only. Every
gradient flows through the surrogate spike, so gradients has nothing left to judge (skipped);
the state in a dict must still be rewound between evaluations (deepcopy refuses a tensor with
a graph), and two uses summed must not be judged as if the first did not reach the second."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:TBC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"backward_pure": "carries its graph from one call into the next",
                "state_valid": "kept in plain attributes"}
MUTANTS = False  # benchmarks/mutants.py: a mutant of a surrogate is another surrogate, judged by nothing


class ArctanSpike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):
        ctx.save_for_backward(v)
        return (v >= 0).to(v)

    @staticmethod
    def backward(ctx, grad):
        (v,) = ctx.saved_tensors
        return grad / (1 + (torch.pi * v) ** 2)


class MultiStepLIFNode(nn.Module):
    def __init__(self, tau: float = 2.0, threshold: float = 1.0) -> None:
        super().__init__()
        self.tau, self.threshold = tau, threshold
        self._memories = {"v": 0.0}

    def forward(self, x):
        v = self._memories["v"]
        if not isinstance(v, torch.Tensor) or v.shape != x.shape[1:]:
            v = torch.zeros_like(x[0])
        spikes = []
        for t in range(x.shape[0]):
            v = v + (x[t] - v) / self.tau
            spike = ArctanSpike.apply(v - self.threshold)
            v = v * (1 - spike.detach())
            spikes.append(spike)
        self._memories["v"] = v
        return torch.stack(spikes)

    def reset_state(self) -> None:
        self._memories["v"] = 0.0


LAYER = MultiStepLIFNode

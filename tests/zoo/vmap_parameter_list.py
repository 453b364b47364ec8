"""Broken for torch.func: a two-layer perceptron that keeps its weights in a plain list
(``self.weights = [self.w1, self.w2]``, for a loop over layers) and reads them from there. The
parameters are registered, trained and saved as usual; but ``torch.func.functional_call`` — and
with it per-sample gradients, ensembles and ``torch.func`` Jacobians — replaces the attributes
``w1``/``w2`` for the call, which the list does not see: the layer computes with its own weights
whatever it is given. vmap must fail and say so. Moving the layer to ``meta`` replaces the
parameters with new tensors, while ``.to("cuda")`` keeps them and the list with them: meta_device,
which stands for a GPU, points the list at the moved parameters and passes."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"vmap"}
ENABLE = ("vmap",)


class ListPerceptron(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(8, 6) * 0.3)
        self.w2 = nn.Parameter(torch.randn(5, 8) * 0.3)
        self.weights = [self.w1, self.w2]  # the bug: a second reference functional_call cannot replace

    def forward(self, x):
        for w in self.weights:
            x = torch.tanh(x @ w.T)
        return x


LAYER = ListPerceptron

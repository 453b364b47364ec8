"""Broken: the soft path cost of good_backward_own_table, whose backward reuses the table it saved
as its workspace to save memory: it turns R into exp(-R) in place before weighting it (through
``.data``, as soft-DTW's backward writes through a NumPy or Numba view: no version counter sees
it). The
table is the backward's own (made by the forward, read by nothing else), so the caller sees no
change, and the first backward's gradient is right; but a second backward over the same graph
(a gradient penalty, retain_graph=True) reads exp(-R) as R and gives another gradient.
backward_pure must fail saying so; grad_output, whose comparisons need several backward passes
over one graph, must not blame grad_output for it."""

import torch
from torch import nn

LAYOUTS = ["3,6:BT"]
EXPECT_FAIL = {"backward_pure"}


class _SoftPathCost(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        batch, steps = x.shape
        table = x.new_zeros(batch, steps + 2)
        table[:, 1:steps + 1] = torch.logcumsumexp(x, dim=1)
        ctx.save_for_backward(x, table)
        return table[:, 1:steps + 1].clone()

    @staticmethod
    def backward(ctx, grad):
        x, table = ctx.saved_tensors
        steps = x.shape[1]
        inner = table.data[:, 1:steps + 1].neg_().exp_()  # the bug: the saved table becomes exp(-R)
        weights = grad * inner
        reverse = torch.flip(torch.cumsum(torch.flip(weights, [1]), dim=1), [1])
        return reverse * torch.exp(x)


class SoftPathCost(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SoftPathCost.apply(x)


LAYER = SoftPathCost

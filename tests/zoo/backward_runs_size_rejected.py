"""Broken: a per-channel bias whose hand-written backward sums the gradient over the batch
only, leaving (3, 5) for a (1, 3, 1) bias. Autograd cannot sum that back and raises in the
middle of back-propagation, so back-propagation does not run: backward_runs fails and says
which gradient had the wrong size (a size autograd can sum back silently is right, and noted
by backward_size: see good_grad_broadcast_shape.py)."""

import torch

LAYOUTS = ["4,3,5:BCU", "1,3,1:UCU"]
EXPECT_FAIL = {"backward_runs"}


class ChannelBias(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        return x + bias

    @staticmethod
    def backward(ctx, grad):
        return grad, grad.sum(0)  # the bug: (3, 5); the bias is (1, 3, 1)


LAYER = ChannelBias

"""Broken: a custom operator whose fake kernel (what torch.compile and export trace with) drops
the broadcast: it returns x's size where the real kernel returns the broadcast of x and w. The
eager operator is right; every compiled or exported model that uses it plans for another size."""

import torch

LAYOUTS = ["3,8:BC", "3,1:BU"]
EXPECT_FAIL = {"op_fake"}


@torch.library.custom_op("layercheck_zoo::outer_scale", mutates_args=())
def outer_scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * w + 0.0 * (x.sum() * w)


@outer_scale.register_fake
def _(x, w):
    return x.new_empty((*x.shape[:-1], w.shape[-1]))  # the bug: (3, 1), the real output is (3, 8)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    return (grad * w).sum_to_size(x.shape), (grad * x).sum_to_size(w.shape)


outer_scale.register_autograd(_backward, setup_context=_setup_context)

LAYER = outer_scale

"""Broken: a custom operator whose registered backward is twice the derivative. It passes every
test of ``torch.library.opcheck`` (which does not compare gradients with finite differences);
layercheck's gradient check catches it."""

import torch

LAYOUTS = ["3,8:BC"]
EXPECT_FAIL = {"gradients"}


@torch.library.custom_op("layercheck_zoo::softsign", mutates_args=())
def softsign(x: torch.Tensor) -> torch.Tensor:
    return x / (1 + x.abs())


@softsign.register_fake
def _(x):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return 2 * grad / (1 + x.abs()) ** 2  # the bug: the factor 2


softsign.register_autograd(_backward, setup_context=_setup_context)

LAYER = softsign

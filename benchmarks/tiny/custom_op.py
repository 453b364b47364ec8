"""A tiny custom operator (``torch.library.custom_op`` with a fake kernel and a backward):
start-up figures (benchmarks/goals.py)."""

import torch


@torch.library.custom_op("layercheck_tiny::softsign", mutates_args=())
def softsign(x: torch.Tensor) -> torch.Tensor:
    return x / (1 + x.abs())


@softsign.register_fake
def _(x):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad / (1 + x.abs()) ** 2


softsign.register_autograd(_backward, setup_context=_setup_context)

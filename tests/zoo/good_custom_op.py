"""Correct: a custom operator the PyTorch 2 way — ``torch.library.custom_op`` with a fake kernel
(``register_fake``) and a backward (``register_autograd``) — with two tensor inputs, the second
one broadcast over the batch."""

import torch

LAYOUTS = ["3,8:BC", "1,8:UC"]
EXPECT_FAIL: set[str] = set()


@torch.library.custom_op("layercheck_zoo::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * w


@scaled_tanh.register_fake
def _(x, w):
    return torch.empty_like(x * w)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    t = torch.tanh(x)
    return grad * (1 - t * t) * w, (grad * t).sum_to_size(w.shape)


scaled_tanh.register_autograd(_backward, setup_context=_setup_context)

LAYER = scaled_tanh

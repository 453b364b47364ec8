"""Broken: a custom operator that shifts its input in place without declaring it
(``mutates_args=()``): torch.compile and functionalization do not know about the write, and the
caller's tensor changes. opcheck's schema test and input_unchanged both see it."""

import torch

LAYOUTS = ["3,8:BC"]
EXPECT_FAIL = {"op_schema", "input_unchanged"}


@torch.library.custom_op("layercheck_zoo::shifted_exp", mutates_args=())
def shifted_exp(x: torch.Tensor) -> torch.Tensor:
    return x.sub_(1.0).exp()  # the bug: (x - 1.0).exp(), or declare mutates_args=("x",)


@shifted_exp.register_fake
def _(x):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)


def _backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return grad * y


shifted_exp.register_autograd(_backward, setup_context=_setup_context)

LAYER = shifted_exp

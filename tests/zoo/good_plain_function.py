"""Correct: a plain function of tensors — ``gated(x, w)`` — checked as an operation: no
parameters, no state, every check that applies to its inputs."""

import torch

LAYOUTS = ["3,8:BC", "1,8:UC"]
EXPECT_FAIL: set[str] = set()


def gated(x, w):
    return x * torch.sigmoid(w) + 0.1 * torch.tanh(x)


LAYER = gated

"""A tiny plain function of tensors: start-up figures (benchmarks/goals.py)."""

import torch


def scaled_tanh(x: torch.Tensor) -> torch.Tensor:
    return 2 * torch.tanh(x / 2)

"""The accelerators present, and full float32 precision on them (TF32 off)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


@contextlib.contextmanager
def full_float32() -> Iterator[None]:
    """Full float32 precision in CUDA matmul and cuDNN inside the block (TF32 off); the
    user's settings are restored. TF32 keeps 10 mantissa bits: against the CPU, or against
    float64, it looks like a bug. The ``device`` check compares under it, and every check of a
    layer checked on CUDA (``--on cuda``) runs under it."""
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        # torch >= 2.9: the per-backend API; mixing it with allow_tf32 raises, so use only it
        cudnn: Any = torch.backends.cudnn  # its conv and rnn sub-backends are missing from torch's stubs
        backends = [torch.backends.cuda.matmul, cudnn.conv, cudnn.rnn]
        saved = [b.fp32_precision for b in backends]
        try:
            for b in backends:
                b.fp32_precision = "ieee"
            yield
        finally:
            for b, value in zip(backends, saved):
                b.fp32_precision = value
        return
    # cuDNN's flags through its flags() context, the others as they are: torch's own test
    # utilities (torch.testing._internal, imported beside layercheck in a test session) forbid
    # setting them directly
    cudnn = torch.backends.cudnn
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, benchmark_limit=cudnn.benchmark_limit,
                         deterministic=cudnn.deterministic, allow_tf32=False):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def accelerators() -> tuple[str, ...]:
    """The accelerators present: ``cuda:N`` for each CUDA device, then ``mps``."""
    found = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return tuple(found)

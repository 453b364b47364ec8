"""Correct: a gated MLP (SwiGLU): ``down(silu(x @ W_gate) * (x @ W_up))``, the matrix products
in torch and the gate in Triton, with a hand-written backward that saves only the gate's inputs
and recomputes the forward (the sigmoid and the SiLU) instead of keeping the activations. Both
kernels are autotuned over two block sizes. They run on CUDA tensors, or on CPU tensors under
Triton's interpreter (``--interpret``, on by itself without a GPU), which runs the first
config; ``triton_gated_mlp_bug.py`` is the same layer with a backward bug."""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl
from torch import nn

PRODUCT_RULE = 1.0  # the buggy twin drops the SiLU's a·σ'(a) term from the recomputed derivative
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter runs the kernels on CPU tensors
CONFIGS = [triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512})]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _swiglu_forward(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    a = tl.load(a_ptr + offsets, mask=inside, other=0.0)
    b = tl.load(b_ptr + offsets, mask=inside, other=0.0)
    tl.store(c_ptr + offsets, a * tl.sigmoid(a) * b, mask=inside)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _swiglu_backward(dc_ptr, a_ptr, b_ptr, da_ptr, db_ptr, n, product_rule, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    dc = tl.load(dc_ptr + offsets, mask=inside, other=0.0)
    a = tl.load(a_ptr + offsets, mask=inside, other=0.0)
    b = tl.load(b_ptr + offsets, mask=inside, other=0.0)
    sig = tl.sigmoid(a)  # the forward, recomputed
    silu = a * sig
    tl.store(db_ptr + offsets, dc * silu, mask=inside)
    dsilu = sig + product_rule.to(a.dtype) * silu * (1 - sig)
    tl.store(da_ptr + offsets, dc * b * dsilu, mask=inside)


def _grid(n: int):  # type: ignore[no-untyped-def]
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        if not a.is_cuda and not INTERPRETED:
            raise RuntimeError("SwiGLUFunction is a Triton kernel: it runs on CUDA tensors only "
                               "(or on CPU tensors under Triton's interpreter, TRITON_INTERPRET=1)")
        a, b = a.contiguous(), b.contiguous()
        c = torch.empty_like(a)
        _swiglu_forward[_grid(a.numel())](a, b, c, a.numel())
        ctx.save_for_backward(a, b)  # not c, nor the sigmoid: backward recomputes them
        return c

    @staticmethod
    def backward(ctx, dc: torch.Tensor):  # type: ignore[override]
        a, b = ctx.saved_tensors
        dc = dc.contiguous()
        da, db = torch.empty_like(a), torch.empty_like(b)
        _swiglu_backward[_grid(a.numel())](dc, a, b, da, db, a.numel(), PRODUCT_RULE)
        return da, db


class TritonGatedMLP(nn.Module):
    def __init__(self, channels: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.gate = nn.Parameter(torch.randn(channels, hidden) / math.sqrt(channels))
        self.up = nn.Parameter(torch.randn(channels, hidden) / math.sqrt(channels))
        self.down = nn.Parameter(torch.randn(hidden, channels) / math.sqrt(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SwiGLUFunction.apply(x @ self.gate, x @ self.up) @ self.down


LAYER = TritonGatedMLP
LAYOUTS = ["4,8,16:BTC"]

"""Which low-precision dtypes Triton's interpreter computes right on CPU tensors (issue 48): a
load and store, arithmetic, tl.sum, tl.atomic_add and tl.sigmoid per dtype, each against
PyTorch; prints ok, WRONG (how far off) or what it raises.

    python benchmarks/interpreter_dtypes.py
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(y_ptr + o, tl.load(x_ptr + o, mask=o < n), mask=o < n)


@triton.jit
def _arithmetic(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + o, mask=o < n)
    tl.store(y_ptr + o, x * 3 + x, mask=o < n)


@triton.jit
def _sum(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(y_ptr, tl.sum(tl.load(x_ptr + o, mask=o < n, other=0.0), axis=0))


@triton.jit
def _atomic(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.atomic_add(y_ptr + o, tl.load(x_ptr + o, mask=o < n), mask=o < n)


@triton.jit
def _sigmoid(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(y_ptr + o, tl.sigmoid(tl.load(x_ptr + o, mask=o < n)), mask=o < n)


CASES = (("load/store", _copy, lambda x: x), ("arithmetic", _arithmetic, lambda x: x * 4),
         ("tl.sum", _sum, lambda x: x.float().sum().to(x.dtype).reshape(1)), ("tl.atomic_add", _atomic, lambda x: x),
         ("tl.sigmoid", _sigmoid, torch.sigmoid))


def main() -> None:
    print(f"Triton {triton.__version__}, torch {torch.__version__}, interpreter on CPU tensors")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(64, generator=torch.Generator().manual_seed(0)).to(dtype)
        said = []
        for name, kernel, expected in CASES:
            y = torch.zeros(1 if name == "tl.sum" else 64, dtype=dtype)
            try:
                kernel[(1,)](x, y, 64, BLOCK=64)
            except Exception as exc:
                said.append(f"{name}: raises {type(exc).__name__}")
                continue
            want = expected(x).double()
            off = float((y.double() - want).abs().max())
            said.append(f"{name}: ok" if off <= 0.02 * max(1.0, float(want.abs().max())) else
                        f"{name}: WRONG ({off:.3g} off)")
        print(f"{str(dtype).removeprefix('torch.')}: {'; '.join(said)}")


if __name__ == "__main__":
    main()

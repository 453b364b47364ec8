"""Broken: triton_leaky.py with the input gradient of the negative side off by a factor of 1.5
in the Triton backward kernel; `gradients` must catch it, on the negative elements, on CUDA
tensors (``--on cuda``) and on CPU tensors under Triton's interpreter."""

from __future__ import annotations

from _twin import with_bug

_base = with_bug("triton_leaky.py", BUG=1.5)


class BuggyTritonLeaky(_base.TritonLeaky):
    pass


LAYER = BuggyTritonLeaky
LAYOUTS = _base.LAYOUTS

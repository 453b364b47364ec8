"""Broken: triton_gated_mlp.py whose backward, recomputing the forward, differentiates the SiLU
as if its a·σ(a) were σ(a) times a constant: the a·σ'(a) term of the product rule is dropped, so
the gradients reaching x and the gate's weight are wrong (the up and down weights' are right).
`gradients` must catch it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("layercheck_gpu_triton_gated_mlp_bug_base",
                                               Path(__file__).with_name("triton_gated_mlp.py"))
assert _spec is not None and _spec.loader is not None
_base = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _base
_spec.loader.exec_module(_base)
_base.PRODUCT_RULE = 0.0


class BuggyTritonGatedMLP(_base.TritonGatedMLP):
    pass


LAYER = BuggyTritonGatedMLP
LAYOUTS = _base.LAYOUTS

"""Broken, GPU only: triton_leaky.py with the input gradient of the negative side off by a
factor of 1.5 in the Triton backward kernel; `gradients` must catch it with ``--on cuda``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("layercheck_gpu_triton_leaky_bug_base",
                                               Path(__file__).with_name("triton_leaky.py"))
assert _spec is not None and _spec.loader is not None
_base = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _base
_spec.loader.exec_module(_base)
_base.BUG = 1.5


class BuggyTritonLeaky(_base.TritonLeaky):
    pass


LAYER = BuggyTritonLeaky
LAYOUTS = _base.LAYOUTS

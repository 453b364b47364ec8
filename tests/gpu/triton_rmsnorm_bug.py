"""Broken: triton_rmsnorm.py with each backward program's partial weight gradient stored into
the weight gradient instead of added to it (``tl.store`` where ``tl.atomic_add`` belongs): the
weight gets the gradient of the last program's rows only (on a GPU: of whichever program wrote
last, a race). `gradients` must catch it, naming the parameter 'weight'."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("layercheck_gpu_triton_rmsnorm_bug_base",
                                               Path(__file__).with_name("triton_rmsnorm.py"))
assert _spec is not None and _spec.loader is not None
_base = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _base
_spec.loader.exec_module(_base)
_base.ACCUMULATE = False


class BuggyTritonRMSNorm(_base.TritonRMSNorm):
    pass


LAYER = BuggyTritonRMSNorm
LAYOUTS = _base.LAYOUTS

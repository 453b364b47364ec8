"""Broken: triton_rmsnorm.py with each backward program's partial weight gradient stored into
the weight gradient instead of added to it (``tl.store`` where ``tl.atomic_add`` belongs): the
weight gets the gradient of the last program's rows only (on a GPU: of whichever program wrote
last, a race). `gradients` must catch it, naming the parameter 'weight'."""

from __future__ import annotations

from _twin import with_bug

_base = with_bug("triton_rmsnorm.py", ACCUMULATE=False)


class BuggyTritonRMSNorm(_base.TritonRMSNorm):
    pass


LAYER = BuggyTritonRMSNorm
LAYOUTS = _base.LAYOUTS

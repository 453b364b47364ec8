"""Broken: triton_rowsum.py with its running total kept in the input's dtype (float16: each of
the row's 128 partial sums rounded to 11 bits). Right in float32 and float64, so finite
differences and every default check pass; against ``references.RowSumRef`` in float16 it is
several times worse than PyTorch's own x.sum(-1): `reference` fails it."""

from __future__ import annotations

from _twin import with_bug

_base = with_bug("triton_rowsum.py", WIDE=False)


class BuggyTritonRowSum(_base.TritonRowSum):
    pass


LAYER = BuggyTritonRowSum
LAYOUTS = _base.LAYOUTS

"""Broken: triton_gated_mlp.py whose backward, recomputing the forward, differentiates the SiLU
as if its a·σ(a) were σ(a) times a constant: the a·σ'(a) term of the product rule is dropped, so
the gradients reaching x and the gate's weight are wrong (the up and down weights' are right).
`gradients` must catch it."""

from __future__ import annotations

from _twin import with_bug

_base = with_bug("triton_gated_mlp.py", PRODUCT_RULE=0.0)


class BuggyTritonGatedMLP(_base.TritonGatedMLP):
    pass


LAYER = BuggyTritonGatedMLP
LAYOUTS = _base.LAYOUTS

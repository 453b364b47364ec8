"""A layer judged against a reference implementation (SPEC section 6, the ``reference`` check).

``binding`` resolves the reference a target names (``reference:``, ``--reference``,
``check_layer(..., reference=...)``), checks before any check runs that it takes the layer's
parameter values (a state_dict load through ``reference_map``) and builds it with them;
``rule`` is flash-attention's rule, the layer's error against the reference in float64 held to
k times the reference's own error in the same dtype; ``unwrapped`` is ``reference: autograd``,
the layer's own forward with its hand-written ``autograd.Function``\\ s run as plain PyTorch.

Support for checks: imports torch and the support modules (``subject``, ``loading``,
``runs``), never ``checks/`` and never the parent's ``cli``.
"""

"""A layer judged against a reference implementation: the ``reference`` check's numerics.

``rule`` is flash-attention's rule, the layer's error against the reference in float64 held to
k times the reference's own error in the same dtype; ``unwrapped`` is ``reference: autograd``,
the layer's own forward with its hand-written ``autograd.Function``\\ s run as plain PyTorch;
``precision`` judges a float64 backward against autograd's derivative of the same forward (a
cast to float32 inside it); ``per_dtype`` gives the gradient check a lower precision's yardstick
where the float64 gradient is not one (the float32 layer's own function where it computes another
than the float64 one; autograd of the same forward in float16 and bfloat16). Resolving the
reference a target names and giving it the layer's parameter values happens where the target is
made ready, :mod:`layercheck.target.reference`.

Imports torch, the checks' support, the target and the parent layer; never ``checks/``. The
checks (``checks/reference.py``, ``checks/gradients.py``) import it.
"""

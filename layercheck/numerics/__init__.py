"""Finite differences along random directions, the float64 reference that analytic gradients
are judged by. Import from the modules:

- ``engine``: ``FiniteDifferences`` with its probes, comparisons and rounding-noise model,
  the ``DifferentiableFunction`` protocol it differences, and ``NotDifferentiable``.
- ``functions``: ``LayerFunction`` and ``GradientFunction``, a layer and its first gradient as
  such functions, and ``Backprop``.
- ``verdict``: the per-dtype gradient tolerances and ``judge``.
- ``locate``: ``diagnose`` and ``locate``, which narrow a disagreement down to tensors,
  regions and elements.
- ``patterns``: ``explain``, which recognises a wrong gradient's shape (a constant factor,
  a flipped sign, a transpose, another tensor's gradient).
"""

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
- ``trace``: what a run computes (its lowest precision, detaches, steps, surrogates).
- ``recording``: one forward and backward of a layer, recorded, with what its hand-written
  backwards returned (``analytic_run``, ``BackwardRecorder``).
- ``reference``: the runs and the float64 reference the gradient checks share
  (``float32_run``, ``float64_run``, ``gradient_reference``, ``float64_reference``, ``Reference``).
- ``second_looks``: that reference taken again (a second draw, the tails, a second call, eval
  mode, past the parameters' writes).
- ``diagnosis``: what the checks say of a verdict (``agreement``, ``disagreement``) and why.
"""

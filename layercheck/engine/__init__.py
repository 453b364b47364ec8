"""The engine: a plan run into results. :mod:`serve` is a worker's main loop (with
:mod:`lazytorch`, installed in the fork server only), :mod:`runner` turns a TargetPlan into its
checks and runs them in order under their limits, making every CheckResult, and :mod:`api` is
the Python API over the runner (with :mod:`scan`, ``check_model``: a model's layers found by
``layercheck.scan`` and run here). It may import ``layercheck.scan``, ``layercheck.parent``, ``layercheck.target`` (a
plan is made a ready target through ``target.prepare`` alone; the rest is the Target type, the
layer's frames and Triton's limits), ``layercheck.support``, ``layercheck.numerics`` and
``layercheck.reporting``; nothing below it imports it.
"""

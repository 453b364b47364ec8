"""The engine: a plan run into results. :mod:`serve` is a worker's main loop (with
:mod:`lazytorch`, installed in the fork server only), :mod:`runner` turns a TargetPlan into its
checks and runs them in order under their limits, making every CheckResult, and :mod:`api` is
the Python API over the runner. It may import ``layercheck.parent``, ``layercheck.target``
(through its one entrance, ``prepare``) and ``layercheck.support``; nothing below it imports it.
"""

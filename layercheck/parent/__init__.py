"""The parent side of a run, and the plain data every layer shares; never torch at import.

Parsing and validating what a user asked for (:mod:`layout`, :mod:`inputs`, :mod:`spec`,
:mod:`sources`, :mod:`invocation`, :mod:`shards`), the catalogue of checks read from source
(:mod:`listing`) and the check registry itself (:mod:`registry`, :mod:`plugins`), a run's plan
(:mod:`plan`: Options, TargetPlan, Record), the parent process that hands plans to forked workers
and survives them (:mod:`isolation`, :mod:`workers`, :mod:`limits`), and the records and errors
that come back (:mod:`result`, :mod:`errors`). Its modules import each other and
``layercheck.reporting.registry``; the worker's side (``layercheck.engine.serve``) and the
target's sample size are imported only inside the functions that need them, and the Target type
for annotations only: never at import.
"""

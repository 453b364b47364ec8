"""Failures kept: the ``.layercheck/`` store and the tests written from it, torch-free.

``settings`` is what one target's exploration is asked to do (the plan carries it), ``folder``
the store itself (saved failures per target, replayed first and dropped once they pass a few
runs, bounded in size, a corrupt or foreign file ignored with a warning), ``keeping`` what the
command line and the Python API do with it before and after a run, and ``emit`` the pytest files
``--emit-test`` writes. The searching and shrinking themselves are :mod:`layercheck.explore`'s.

Imports nothing of layercheck outside this package and never torch: the parent layer (the plan)
imports it.
"""

"""Failures searched for beyond the fixed draws, and each shrunk to its smallest input.

``draws`` (the explored inputs: sizes, batch sizes, scales, special and structured values),
``shrink`` (the smallest failing input) and ``engine`` (replay, explore and shrink inside one
target's run) import torch and run in the process that checks the layer. What a target's
exploration is asked to do and the ``.layercheck/`` store of kept failures are
:mod:`layercheck.store`'s (torch-free, for the parent and the command line).

May import ``layercheck.store``, the target and the parent layer; the engine imports it. Nothing
here imports the runner: the engine drives the runner's ``TargetRun`` it is handed.
"""

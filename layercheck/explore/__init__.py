"""Failures you can keep: search beyond the fixed draws, shrink every failure, store and replay it.

``settings`` (what one target's exploration is asked to do), ``store`` (the ``.layercheck/``
failure store) and ``emit`` (pytest files replaying stored failures) are torch-free: the parent
of a run and the command line use them. ``draws`` (the explored inputs), ``shrink`` (the
smallest failing input) and ``engine`` (replay, explore and shrink inside one target's run)
import torch and run in the process that checks the layer. Nothing here imports the runner: the
engine drives the runner's ``TargetRun`` it is handed.
"""

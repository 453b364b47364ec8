"""The entry layer: the command line (:mod:`~layercheck.cli.commands`, the typer app that parses
and validates everything, calls a run and writes its reports) and ``layercheck new``'s scaffold
(:mod:`~layercheck.cli.scaffold`). It may import every other package; nothing imports it but
:mod:`layercheck.launch` and :mod:`layercheck.__main__`, which stay at the top so the console
script and ``python -m layercheck`` find them. Nothing it imports before a run starts imports torch.
"""

from __future__ import annotations

import importlib
import warnings


def __getattr__(name: str) -> object:
    # The command line's module had this package's name until it became the package: its names
    # (``app``, ``main``) still resolve from here, for a release, with a warning.
    if name.startswith("__"):
        raise AttributeError(name)
    commands = importlib.import_module("layercheck.cli.commands")
    try:
        value = getattr(commands, name)
    except AttributeError:
        raise AttributeError(f"module 'layercheck.cli' has no attribute {name!r}") from None  # old path: kept
    from layercheck._moved import moved_message

    old = f"layercheck.cli.{name}"  # old path: kept
    warnings.warn(moved_message(old, f"layercheck.cli.commands.{name}"),
                  DeprecationWarning, stacklevel=2)
    return value

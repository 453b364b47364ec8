"""The command line's entry point: ``layercheck`` and ``python -m layercheck`` start here.

Nothing here, in :mod:`layercheck.cli.commands` or in what it imports before a run starts, imports
torch: ``--help``, ``--version``, ``layercheck checks`` and a usage error answer at once, and
a run's first line shows while its workers are importing torch (:mod:`layercheck.parent.workers`).
The engine never imports this module nor the command line.
"""

from __future__ import annotations

import time


def main() -> None:
    started = time.perf_counter()  # the run's time counts from here: the user's clock, less the interpreter's start
    from layercheck.cli.commands import main as cli_main

    cli_main(started=started)

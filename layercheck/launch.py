"""The command line's entry point: ``layercheck`` and ``python -m layercheck`` start here,
before torch is imported.

A ``layercheck run`` that will check its targets in worker processes starts their fork
server first, so that the fork server imports torch while this process imports it too: on a
machine with two cores, most of the time a cold run would otherwise wait for the fork server
is spent beside this process's own start-up. A fork server started for a run that ends
before using it (a usage error) is stopped when this process exits.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import sys
from typing import Any

# What the fork server imports before it forks workers: torch, layercheck, the checks, and
# what the checks import on first use (torch._dynamo and what it pulls in: 1.5 s that every
# worker would pay again), and the command line, which a worker imports as its main module.
PRELOAD = ["layercheck.workers", "layercheck.checks", "layercheck.cli", "torch._dynamo"]


def context() -> Any:
    """The multiprocessing context workers come from: a fork server where there is one."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


def main() -> None:
    if _isolated_run(sys.argv[1:]) and "forkserver" in multiprocessing.get_all_start_methods():
        _start_fork_server()
    from layercheck.cli import main as cli_main

    cli_main()


def _isolated_run(args: list[str]) -> bool:
    return bool(args) and args[0] == "run" and not {"--no-isolate", "--help", "-h"} & set(args)


def _start_fork_server() -> None:
    from multiprocessing import forkserver

    context()
    forkserver.ensure_running()
    atexit.register(_stop_fork_server)


def _stop_fork_server() -> None:
    """Stop the fork server now rather than when it notices this process is gone: it may be
    importing torch still, for nothing."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # no public way to ask
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass

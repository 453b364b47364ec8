"""The worker's side of :mod:`layercheck.parent.workers`: a worker process checks the targets its
parent sends it, one at a time, and tells the parent what it does. This module imports torch
and the checks; the parent never imports it (its fork server does, once)."""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import gc
import io
import json
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import torch

gc.freeze()  # Note [the fork server's objects frozen]

from layercheck.engine import lazytorch, runner  # noqa: E402
from layercheck.parent import registry  # noqa: E402
from layercheck.parent.errors import LoadError, UsageError  # noqa: E402
from layercheck.parent.limits import limit_worker_memory  # noqa: E402
from layercheck.parent.plan import TargetPlan  # noqa: E402
from layercheck.parent.result import CheckResult, RunReport  # noqa: E402
from layercheck.support.containment import capture_into  # noqa: E402
from layercheck.support.raised import raised_at  # noqa: E402
from layercheck.target.loading import TargetNotFound  # noqa: E402

registry.load_checks()  # in the fork server, once: every worker forked from it has them
gc.unfreeze()  # lazytorch finds torch's wrappers with gc.get_referrers, which sees no frozen object
lazytorch.install()  # Note [torch internals a check does not need]

# Note [the fork server's objects frozen]
#     Importing torch leaves some 170,000 objects the garbage collector tracks, and every full
#     collection walks them all (some 50 ms of CPU each): one fell inside the import of the
#     checks, others inside a worker's checks. None of them is ever garbage: they are torch's and
#     layercheck's modules, functions and tables, alive for the process's life. So the fork
#     server moves them out of the collector's sight (gc.freeze) right after torch and again
#     once the checks are loaded, as Python's documentation advises before fork(): collections in
#     the workers forked from it walk only what the worker makes (the layer, its tensors, the
#     checks' runs), and do not write into the parent's pages (copy-on-write kept). Measured: the
#     checks' import 0.15 s -> 0.09 s of CPU after torch's. gc.get_referrers and gc.get_objects do not
#     see frozen objects: lazytorch.install, which finds torch's wrappers that way, runs between an
#     unfreeze and the last freeze (frozen, they were missed, and the first run imported
#     torch._dynamo and sympy: 0.8 s).
gc.freeze()


def serve(conn: Connection, options: runner.Options, environ: dict[str, str], capture: str,
           threads: int | None = None) -> None:
    """Worker process: check the targets it is given, one at a time, until told to stop."""
    _become_worker(environ, capture)
    if threads is not None:
        torch.set_num_threads(threads)
    limit_worker_memory(options.max_memory)
    options = dataclasses.replace(options, contained=True)
    _send(conn, ("environment", runner.environment()))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if request is None:
            return
        kind, plan, record = request  # the plan as the parent resolved it: not resolved again here
        try:
            if kind == "load":
                _send(conn, ("loaded", _load(plan, options)))
                continue
            if kind == "survey":  # Note [a scan surveys its model in the worker that checks it]
                _send(conn, _survey(*plan))
                continue
            if kind == "options":  # the run that adopts this worker: its options, and its memory limit now
                options = dataclasses.replace(plan, contained=True)
                limit_worker_memory(options.max_memory)
                continue
            run = runner.run_plan(plan, options, progress=lambda *payload: _send(conn, ("start", payload)),
                                  record=record, listener=_Messages(conn))
            # A thread the layer started would go on running beside the next target.
            _send(conn, ("report", run, threading.active_count() == 1))
        except UsageError as exc:  # a check plug-in that failed to load: nothing can be checked
            _send(conn, ("usage", str(exc)))
        except BaseException:
            _send(conn, ("crash", traceback.format_exc(limit=-8)))
            return


def _become_worker(environ: dict[str, str], capture: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    _die_with_parent()
    if environ != dict(os.environ):  # the fork server's environment is the one it started with
        os.environ.clear()
        os.environ.update(environ)
    os.dup2(2, 1)  # what a layer prints outside a check (at import) must not reach a report on stdout
    capture_into(capture)
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent (the fork server, which ends with
    the run) ends, so that no worker outlives a run that was killed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _load(plan: TargetPlan, options: runner.Options) -> tuple[str, str | None, dict[str, Any] | None]:
    """Import a layer named on the command line: ("missing", why) when it does not exist (a
    usage error), ("failed", the run's error) when it cannot be imported, ("loaded", None); and
    where the user's file raised on import, where it did."""
    try:
        runner.load_target(plan, options, announce=False)  # the check that follows says what it needs to
    except TargetNotFound as exc:
        return "missing", str(exc), None
    except LoadError as exc:
        return "failed", str(exc), raised_at(exc)
    return "loaded", None, None


def _survey(spec: Any, folder: str, seed: int) -> tuple[str, Any]:
    """A scan's model built, surveyed and its specs written into ``folder``: ("surveyed",
    Prepared), or ("unscannable", why) where the model cannot be built or its forward raises,
    ("usage", why) for inputs that do not fit or a model with nothing to check."""
    from pathlib import Path

    from layercheck.scan.command import Unscannable, prepare

    try:
        return "surveyed", prepare(spec, Path(folder), seed=seed)
    except Unscannable as exc:
        return "unscannable", str(exc)
    except UsageError as exc:
        return "usage", str(exc)
    finally:
        gc.collect()  # the model and its sample forward: the targets are checked without them


class _Messages(runner.Listener):
    """Tells the parent what the run does."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def phase(self, text: str) -> None:
        _send(self.conn, ("phase", text))

    def planned(self, limits: Sequence[tuple[tuple[str, str], float | None]]) -> None:
        _send(self.conn, ("planned", list(limits)))

    def finished(self, key: tuple[str, str], result: CheckResult, record: runner.Record) -> None:
        _send(self.conn, ("done", key, result, record.blocked.get(key[0]), dict(record.facts), record.kind))


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    try:
        _ParentCanRead(io.BytesIO(pickle.dumps(message))).load()
    except Exception:  # a detail that cannot be pickled, or that the parent could not unpickle
        message = tuple(_plain(part) for part in message)  # what the JSON report would hold
    conn.send(message)


class _ParentCanRead(pickle.Unpickler):
    """Unpickles only what the parent can import: not the classes of a layer's module, which
    only workers import (a detail holding an instance of one would fail there)."""

    def find_class(self, module: str, name: str) -> Any:
        if module.partition(".")[0] not in _PARENT_MODULES and module not in _PARENT_LAYERCHECK:
            raise pickle.UnpicklingError(f"{module}.{name} may not be importable in the parent")
        return super().find_class(module, name)


# Not torch nor numpy: the parent never imports them (a detail holding a tensor or a dtype is
# sent as the JSON report would hold it).
_PARENT_MODULES = frozenset({"builtins", "copyreg", "collections", "_codecs", "enum", "pathlib"})
# Of layercheck, the results, and what a scan's survey tells (Note [a scan surveys its model in the
# worker that checks it] in parent/isolation.py).
_PARENT_LAYERCHECK = frozenset({"layercheck.parent.result", "layercheck.scan.command",
                                "layercheck.reporting.scan_tree"})


def _plain(value: Any) -> Any:
    if isinstance(value, CheckResult):
        return CheckResult.from_dict(json.loads(json.dumps(value.to_dict(), default=str)))
    if isinstance(value, RunReport):
        return RunReport.from_dict(json.loads(json.dumps(value.to_dict(), default=str)))
    if isinstance(value, dict):
        return json.loads(json.dumps(value, default=str))
    return value

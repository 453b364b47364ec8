"""Worker processes: where a layer is checked, apart from the run that reports on it.

A worker is a fork of a fork server that imported torch, layercheck and its checks once
(:func:`layercheck.launch.context`; spawned where there is no fork server): forking a
process that already runs torch's thread pools can deadlock, a fork server's clean process
cannot, and each worker costs a fork instead of an import of torch. A worker checks one
target at a time, one check at a time, telling its parent which check starts and how each
ended, so that when the process ends — a segfault, ``os._exit``, a kill — the parent knows
which check it was and can let a fresh worker run the remaining ones
(:mod:`layercheck.isolation`).

A worker:

- ignores SIGINT (the user's Ctrl-C is its parent's to handle, and a KeyboardInterrupt in a
  worker is then always the layer's), leads its own process group (so that its parent can
  kill whatever the layer started) and dies with its fork server, hence with the run;
- computes with torch's default number of threads in a serial run, and with its share of
  the CPUs (``cpus // jobs``, at least one) beside others: ``jobs`` workers each running as
  many threads as there are CPUs fight over them, which made ``--jobs 2`` slower than a
  serial run on two CPUs (benchmarks/startup.py). Layers whose tensors are below torch's
  parallel grain (32768 elements) compute the very same numbers either way; larger ones may
  differ in the last bits of a sum, far inside every tolerance;
- sends its stdout to stderr outside checks, and captures both during a check into a file
  its parent names (the parent reads it when the worker dies in the middle of a check);
- writes the Python stack of every thread there on SIGUSR1 and on a fatal signal
  (faulthandler), which says where a layer hung or crashed;
- runs under the memory limit (:func:`layercheck.limits.limit_worker_memory`).

Messages, parent to worker: ``("check", spec, record)`` (check a target, ``record`` holding
what an earlier worker finished), ``("load", spec, None)`` (only import the layer), ``None``
(exit). Worker to parent: ``("phase", text)``, ``("start", (target, label, index, total))``,
``("done", key, result, blocked, facts, kind)``, ``("report", run, healthy)``,
``("loaded", outcome)``, ``("crash", traceback)``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import io
import json
import os
import pickle
import re
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import torch

from layercheck import runner
from layercheck.containment import capture_into, read_capture
from layercheck.errors import LoadError
from layercheck.limits import limit_worker_memory
from layercheck.loading import TargetNotFound
from layercheck.result import CheckResult, RunReport
from layercheck.spec import TargetSpec

# How long a worker asked to stop, or killed, is waited for.
JOIN_SECONDS = 5.0


@dataclass(eq=False)  # a handle is a key: the same process, not equal fields
class Worker:
    """The parent's handle on one worker process and its pipe."""

    process: Any
    conn: Connection
    capture: str  # the file the worker captures a check's output into

    @classmethod
    def start(cls, context: Any, options: runner.Options, capture: str, *, threads: int | None = None) -> Worker:
        """A new worker; ``threads``: torch's thread count there (None: torch's default)."""
        mine, theirs = context.Pipe()
        process = context.Process(target=_serve, args=(theirs, options, dict(os.environ), capture, threads),
                                  daemon=True, name="layercheck-worker")
        process.start()
        theirs.close()  # the child holds the only other end now: its exit means EOF here
        return cls(process, mine, capture)

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def send(self, message: Any) -> bool:
        """Send a request; False when the worker is no longer there to take it."""
        try:
            self.conn.send(message)
        except (OSError, ValueError):
            return False
        return True

    def receive(self) -> Any:
        """The next message, or None when the worker ended without sending one."""
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def exit_description(self) -> str:
        """How the process ended, once it has: ``was killed by signal SIGSEGV (...)``."""
        self.process.join(timeout=JOIN_SECONDS)
        return describe_exit(self.process.exitcode)

    def output(self) -> str:
        """What the worker wrote during its last check (its stacks, when it crashed or was stopped)."""
        return _without_addresses(read_capture(self.capture))

    def dump_stacks(self) -> None:
        """Have the worker write where every thread is (faulthandler), before it is killed."""
        try:
            os.kill(self.pid, signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.2)  # the dump is written by a C signal handler: at once, even in native code

    def stop(self) -> None:
        """Ask the worker to exit and wait for it; kill it when it does not."""
        if self.process.is_alive() and self.send(None):
            self.process.join(timeout=JOIN_SECONDS)
        self.kill()

    def kill(self) -> None:
        """Kill the worker and its process group (anything the layer started), and reap it."""
        self.send_kill()
        self.process.join()
        self.conn.close()

    def send_kill(self) -> None:
        """SIGKILL the worker and its process group, without waiting: what it sent before
        stays readable on the pipe, and a message it was half-way through writing reads as
        its end (:meth:`receive` gives None)."""
        for kill, target in ((os.killpg, self.pid), (os.kill, self.pid)):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue


def describe_exit(code: int | None) -> str:
    """How a process ended, for a message."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            return f"was killed by signal {-code}"
        return f"was killed by signal {name}{_SIGNALS.get(name, '')}"
    return f"exited with status {code} before reporting (os._exit(), or exit() in native code)"


_SIGNALS = {
    "SIGSEGV": " (a segmentation fault: native code touched memory it does not own)",
    "SIGBUS": " (a bus error: native code touched memory it does not own)",
    "SIGKILL": " (the kernel's out-of-memory killer, or a kill -9)",
    "SIGABRT": " (an abort: a failed assertion or an uncaught C++ exception in native code)",
    "SIGFPE": " (an arithmetic fault in native code, e.g. an integer division by zero)",
    "SIGILL": " (an illegal instruction: native code built for another processor)",
}


def _without_addresses(text: str) -> str:
    """faulthandler names threads by address; without it, two runs write the same text."""
    return re.sub(r"(?m)^(Current thread|Thread) 0x[0-9a-f]+", r"\1", text)


# -- the worker's side ----------------------------------------------------------------------------


def _serve(conn: Connection, options: runner.Options, environ: dict[str, str], capture: str,
           threads: int | None = None) -> None:
    """Worker process: check the targets it is given, one at a time, until told to stop."""
    _become_worker(environ, capture)
    if threads is not None:
        torch.set_num_threads(threads)
    limit_worker_memory(options.max_memory)
    options = dataclasses.replace(options, contained=True)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if request is None:
            return
        kind, spec, record = request
        try:
            if kind == "load":
                _send(conn, ("loaded", _load(spec, options)))
                continue
            run = runner.run_spec(spec, options, progress=lambda *payload: _send(conn, ("start", payload)),
                                  record=record, listener=_Messages(conn))
            # A thread the layer started would go on running beside the next target.
            _send(conn, ("report", run, threading.active_count() == 1))
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


def _load(spec: TargetSpec, options: runner.Options) -> tuple[str, str | None]:
    """Import a layer named on the command line: ("missing", why) when it does not exist (a
    usage error), ("failed", the run's error) when it cannot be imported, ("loaded", None)."""
    try:
        runner.load_target(spec, options, announce=False)  # the check that follows says what it needs to
    except TargetNotFound as exc:
        return "missing", str(exc)
    except LoadError as exc:
        return "failed", str(exc)
    return "loaded", None


class _Messages(runner.Listener):
    """Tells the parent what the run does."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def phase(self, text: str) -> None:
        _send(self.conn, ("phase", text))

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
        if module.partition(".")[0] not in _PARENT_MODULES:
            raise pickle.UnpicklingError(f"{module}.{name} may not be importable in the parent")
        return super().find_class(module, name)


_PARENT_MODULES = frozenset({"builtins", "copyreg", "collections", "_codecs", "enum", "pathlib", "numpy", "torch",
                             "layercheck"})


def _plain(value: Any) -> Any:
    if isinstance(value, CheckResult):
        return CheckResult.from_dict(json.loads(json.dumps(value.to_dict(), default=str)))
    if isinstance(value, RunReport):
        return RunReport.from_dict(json.loads(json.dumps(value.to_dict(), default=str)))
    if isinstance(value, dict):
        return json.loads(json.dumps(value, default=str))
    return value

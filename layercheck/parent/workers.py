"""Worker processes: where a layer is checked, apart from the run that reports on it.

A worker is a fork of a fork server that imported torch, layercheck and its checks once
(:func:`context`; spawned where there is no fork server): forking a
process that already runs torch's thread pools can deadlock, a fork server's clean process
cannot, and each worker costs a fork instead of an import of torch. A worker checks one
target at a time, one check at a time, telling its parent which check starts and how each
ended, so that when the process ends — a segfault, ``os._exit``, a kill — the parent knows
which check it was and can let a fresh worker run the remaining ones
(:mod:`layercheck.parent.isolation`).

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
- runs under the memory limit (:func:`layercheck.parent.limits.limit_worker_memory`).

Messages, parent to worker: ``("check", plan, record)`` (check a target, its
:class:`~layercheck.parent.plan.TargetPlan` as the parent resolved it, ``record`` holding what an
earlier worker finished), ``("load", plan, None)`` (only import the layer), ``("survey",
(model spec, folder, seed), None)`` (a scan's model surveyed and its specs written, in a worker
started ahead of its run), ``("options", options, None)`` (the options of the run that adopts
such a worker), ``None`` (exit). Worker to parent: ``("environment", environment)``, ``("phase", text)``,
``("start", (target, label, index, total))``, ``("done", key, result, blocked, facts, kind)``,
``("report", run, healthy)``, ``("loaded", outcome)``, ``("surveyed", prepared)`` (or
``("unscannable", why)``, ``("usage", why)``), ``("crash", traceback)``.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import re
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from layercheck.parent.limits import OUTPUT_LIMIT, shortened
from layercheck.parent.plan import Options

# What the fork server imports before it forks workers, once for the whole run rather than once
# per worker, and before any check's clock starts: torch, layercheck and the checks (the
# worker's side, layercheck.engine.serve, imports them). Neither torch._dynamo (1 s) nor torch's
# symbolic shapes with sympy (0.4 s) are needed by a default check on plain sizes (Note [torch
# internals a check does not need] in engine/lazytorch.py); torch._dynamo is preloaded for a run that asks
# for a check that compiles, which imports it anyway.
PRELOAD = ["layercheck.engine.serve"]
COMPILING = ("compile", "export", "op_aot_dispatch")


def context(enabled: Iterable[str] = ()) -> Any:
    """The multiprocessing context workers come from: a fork server where there is one (stopped
    when this process exits). ``enabled``: the checks the run asks for by name (ID[:VARIANT])."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        compiling = any(selector.partition(":")[0].strip() in COMPILING for selector in enabled)
        ctx.set_forkserver_preload([*PRELOAD, *(["torch._dynamo"] if compiling else [])])
        atexit.unregister(_stop_fork_server)
        atexit.register(_stop_fork_server)
        return ctx
    return multiprocessing.get_context("spawn")


def _stop_fork_server() -> None:
    """Stop the fork server now rather than when it notices this process is gone: it may still
    be importing torch, for nothing, or outlive the run by as long."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # no public way to ask
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


# How long a worker asked to stop, or killed, is waited for.
JOIN_SECONDS = 5.0


@dataclass(eq=False)  # a handle is a key: the same process, not equal fields
class Worker:
    """The parent's handle on one worker process and its pipe."""

    process: Any
    conn: Connection
    capture: str  # the file the worker captures a check's output into

    @classmethod
    def start(cls, context: Any, options: Options, capture: str, *, threads: int | None = None) -> Worker:
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


def _serve(*args: Any) -> None:
    """The worker process's main function (:func:`layercheck.engine.serve.serve`), imported there, not here."""
    from layercheck.engine import serve

    serve.serve(*args)


def read_capture(path: str) -> str:
    """What a worker's capture file holds (after it died), shortened like any output."""
    try:
        with open(path, "rb") as f:
            return shortened(f.read(4 * OUTPUT_LIMIT).decode("utf-8", "replace"))
    except OSError:
        return ""

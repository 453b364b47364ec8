"""Checking targets in parallel worker processes (``layercheck run --jobs N``).

``jobs`` worker processes each take the next waiting target, check it and send its run
report back through a pipe; the report lists the runs in the order given, exactly as a
serial run would. A worker checks one target after another, as a serial run does in one
process, so torch's first-call costs are paid once per worker, not once per target.
Workers come from a fork server that has imported torch once (or are spawned where there
is no fork server): forking a process that already runs torch's thread pools can
deadlock, a fork server's clean process cannot. A worker that dies (a segfault in a
native kernel, ``os._exit`` in the layer) costs only the target it was checking, which
becomes an error run naming the check it was running; a new worker takes its place.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

from layercheck import __version__, runner
from layercheck.result import Report, RunReport
from layercheck.spec import TargetSpec


def run_parallel(specs: Sequence[TargetSpec], options: runner.Options, *, jobs: int,
                 progress: runner.Progress | None = None) -> Report:
    """Check every target, ``jobs`` at a time in worker processes; same report as :func:`runner.run`."""
    if jobs <= 1 or len(specs) <= 1:
        return runner.run(specs, options, progress=progress)
    start = time.perf_counter()
    context = _context()
    jobs = min(jobs, len(specs))
    # Share the cores: N workers each using every core would slow all of them down.
    threads = max(1, (os.cpu_count() or 1) // jobs)
    runs: list[RunReport | None] = [None] * len(specs)
    waiting = list(enumerate(specs))
    workers: list[_Worker] = []
    try:
        while waiting or any(w.busy for w in workers):
            workers = [w for w in workers if w.alive]
            while len(workers) < min(jobs, len(waiting) + sum(w.busy for w in workers)):
                workers.append(_Worker.start(context, options, threads))
            for worker in workers:
                if not worker.busy and worker.alive and waiting:
                    failed = worker.give(*waiting.pop(0))
                    if failed is not None:  # it died before taking the target (it could not start)
                        runs[failed[0]] = failed[1]
            if not any(w.busy for w in workers):
                continue
            for conn in wait([w.conn for w in workers if w.busy]):
                worker = next(w for w in workers if w.conn is conn)
                done = worker.receive(progress)
                if done is not None:
                    runs[done[0]] = done[1]
        for worker in workers:
            worker.stop()
    finally:
        for worker in workers:
            worker.kill()
    finished = [run for run in runs if run is not None]
    assert len(finished) == len(specs)
    return Report(runs=finished, environment=runner.environment(), version=__version__,
                  seconds=time.perf_counter() - start)


@dataclass
class _Worker:
    """One worker process, the parent's end of its pipe, and the target it is checking."""

    process: Any
    conn: Connection
    seed: int | None  # the command line's --seed, which overrides the spec's
    alive: bool = True
    index: int | None = None  # position of the target it is checking, None when idle
    spec: TargetSpec | None = None
    started: float = 0.0
    current: str | None = None  # the check it last reported starting

    @classmethod
    def start(cls, context: Any, options: runner.Options, threads: int) -> _Worker:
        mine, theirs = context.Pipe()
        process = context.Process(target=_serve, args=(theirs, options, threads), daemon=True,
                                  name="layercheck-worker")
        process.start()
        theirs.close()  # the child holds the only other end now: its exit means EOF here
        return cls(process, mine, options.seed)

    @property
    def busy(self) -> bool:
        return self.index is not None

    def give(self, index: int, spec: TargetSpec) -> tuple[int, RunReport] | None:
        """Hand the worker a target; when it is no longer there to take it, the target's error run."""
        self.index, self.spec, self.current, self.started = index, spec, None, time.perf_counter()
        try:
            self.conn.send(spec)
        except OSError:
            return self._finish("died", None)
        return None

    def receive(self, progress: runner.Progress | None) -> tuple[int, RunReport] | None:
        """Handle one message; the finished (index, run) when the target is done, else None."""
        assert self.index is not None
        try:
            kind, payload = self.conn.recv()
        except (EOFError, OSError):  # the process ended without sending its report
            kind, payload = "died", None
        if kind == "progress":
            self.current = payload[1]
            if progress is not None:
                progress(*payload)
            return None
        return self._finish(kind, payload)

    def _finish(self, kind: str, payload: Any) -> tuple[int, RunReport]:
        assert self.index is not None
        index, run = self.index, payload if kind == "result" else self._error_run(kind, payload)
        self.index = self.spec = None
        if kind != "result":
            self.kill()
        return index, run

    def _error_run(self, kind: str, payload: Any) -> RunReport:
        """The run report of a target whose worker crashed or died while checking it."""
        assert self.spec is not None
        during = f" while running {self.current}" if self.current else ""
        if kind == "crash":
            reason = f"the worker process checking this target failed{during}:\n{payload}"
        else:
            self.process.join(timeout=5)
            reason = (f"the worker process checking this target {_describe_exit(self.process.exitcode)}{during}; "
                      "run this target without --jobs to see more")
        seed = self.seed if self.seed is not None else (self.spec.seed or 0)
        return RunReport(target=self.spec.name, kind=None, inputs=[layout.to_dict() for layout in self.spec.layouts],
                         seed=seed, seconds=time.perf_counter() - self.started, results=[], error=reason)

    def stop(self) -> None:
        """Ask an idle worker to exit, and wait for it."""
        if self.alive:
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.process.join(timeout=5)
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()
        self.alive = False


def _serve(conn: Connection, options: runner.Options, threads: int) -> None:
    """Worker process: check the targets it is given, one at a time, until told to stop."""
    torch.set_num_threads(threads)

    def report_progress(target: str, check: str, index: int, total: int) -> None:
        conn.send(("progress", (target, check, index, total)))

    while True:
        try:
            spec = conn.recv()
        except EOFError:  # the parent is gone
            return
        if spec is None:
            return
        try:
            run = runner.run_spec(spec, options, progress=report_progress)
        except BaseException:
            conn.send(("crash", traceback.format_exc(limit=-8)))
            return
        try:
            conn.send(("result", run))
        except Exception:  # a detail that cannot be pickled: send what the JSON report would hold
            conn.send(("result", RunReport.from_dict(json.loads(json.dumps(run.to_dict(), default=str)))))


def _context() -> Any:
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        # The server imports torch and layercheck once; each worker is a cheap fork of it.
        context.set_forkserver_preload(["layercheck.workers"])
        return context
    return multiprocessing.get_context("spawn")


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code} before reporting"

"""Checking targets in worker processes (the default): whatever a layer does to its process,
the run goes on, reports it, and ends.

This process never runs a layer. It hands the targets to worker processes
(:mod:`layercheck.parent.workers`) — one for a serial run, reused from target to target while it is
healthy; ``jobs`` of them with ``--jobs`` — and follows what each tells it: which check
starts, how each ends. The report lists the runs in the order given, as a serial run does.

- A worker that dies in the middle of a check (a segfault, ``os._exit``, a kill, the kernel's
  out-of-memory killer) turns that check into an ``error`` result naming how the process
  ended; a fresh worker runs the remaining checks of the target from the record of what
  finished, so an error blocks the checks that need it, as in a run that did not crash.
- A check that runs past its time limit by more than a grace period (a hang in native code,
  a layer that swallows the time-limit exception) has its worker write where every thread is,
  then killed: ``timed out after N s in CHECK``, and a fresh worker goes on.
- A worker that dies or hangs while importing or constructing the layer costs that target
  (an error run), not the run.
- ``--timeout-total`` stops everything at its deadline: the check then running gets an
  error, the targets not started an error run each. The user's Ctrl-C stops the run at once:
  the workers are killed and the report holds what finished, marked interrupted.

Every worker is reaped as soon as it ends: none outlives the run, none lingers as a zombie.

This process never imports torch (:mod:`layercheck.parent.plan` is all it needs): the workers do,
and tell it each target's plan (its checks in order, with their time limits) and where they
run (the report's environment).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

from layercheck._version import __version__
from layercheck.parent import plan
from layercheck.parent.errors import UsageError
from layercheck.parent.plan import Options, Progress, Record, TargetPlan
from layercheck.parent.registry import selector
from layercheck.parent.result import CheckResult, Report, RunReport, Status, label
from layercheck.parent.workers import Worker, context

# How much of a worker's output an error run quotes (a check's result keeps more, in its details).
QUOTED_OUTPUT = 2_000


def grace(limit: float) -> float:
    """How long past its limit a check may take before its worker is killed: time for the
    time-limit exception to reach the runner and the result to come back, and for a native
    call (a large convolution) that the exception must wait for to return."""
    return min(max(2.0, 0.1 * limit), 30.0)


def run(plans: Sequence[TargetPlan], options: Options, *, jobs: int = 1,
        progress: Progress | None = None, ahead: Ahead | None = None) -> Report:
    """Check every target in worker processes, each given its plan as resolved here, ``jobs`` at a time; same report as
    :func:`layercheck.engine.runner.run`. ``ahead``: a worker started before the plans existed,
    taken as the run's first. Raises UsageError when a layer named on the command line
    does not exist, or when a check plug-in fails to load."""
    return _Run(plans, options, jobs=max(1, jobs), progress=progress, ahead=ahead).go()


def worker_threads(jobs: int) -> int | None:
    """torch's thread count in a worker: its share of the CPUs beside ``jobs - 1`` others, or
    torch's default in a serial run."""
    return max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None


class WorkerLost(Exception):
    """The worker started ahead of a run died, or ran past its limit, doing what it was asked:
    how, and what it wrote."""


# Note [a scan surveys its model in the worker that checks it]
#     `layercheck scan` builds the model, runs its sample forward and writes a spec per layer
#     before the specs' targets are checked. Done in the command's own process, that work
#     imported torch and the model's modules there (3 s of CPU for transformers' Llama alone, on
#     top of torch's), and the worker that then checked the saved layers imported those modules
#     again; a model whose forward crashed the process (a segfault in native code) took the
#     command with it, without a word, and one that hung hung it for good. So the survey runs in
#     a worker started ahead of the run (Ahead), under the run's time limit per check, and the
#     run takes that worker as its first: its targets are checked where the model's modules are
#     imported already. A worker that dies or runs past the limit while surveying is an error
#     the command reports (what it wrote, where its threads were), not a crash of the command.
#     The survey runs without the memory limit (a model as large as the machine allows, as in
#     the command's process before); the run's options, sent when it adopts the worker, set it.
class Ahead:
    """A worker started before its run's plans exist, to do one thing first (a scan's survey of
    its model), then taken by :func:`run` as the run's first worker. A context manager: on
    leaving it, the worker (unless a run adopted it, which ends it) and its folder go."""

    def __init__(self, options: Options, *, jobs: int = 1) -> None:
        self.context = context([*options.only, *options.enable])
        self.folder = tempfile.mkdtemp(prefix="layercheck-")
        self.worker: Worker | None = Worker.start(self.context, dataclasses.replace(options, max_memory=None),
                                                  os.path.join(self.folder, "worker-0.out"),
                                                  threads=worker_threads(jobs))
        self.environment: dict[str, Any] | None = None

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.worker is not None:
            self.worker.kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def ask(self, request: tuple[Any, ...], *, doing: str, limit: float | None) -> tuple[Any, ...]:
        """Send ``request`` and return the worker's answer. Raises WorkerLost when the worker
        ends, or runs past ``limit`` seconds (and grace), before it answers; the user's Ctrl-C
        kills it and goes on (KeyboardInterrupt)."""
        worker = self.worker
        assert worker is not None
        deadline = None if limit is None else time.monotonic() + limit + grace(limit)
        try:
            if not worker.send(request):
                raise self._lost(f"the worker process {worker.exit_description()} before {doing}")
            while wait([worker.conn, worker.process.sentinel],
                       None if deadline is None else max(0.0, deadline - time.monotonic())):
                message = worker.receive() if worker.conn.poll() else None
                if message is None:  # it ended
                    raise self._lost(f"the worker process {worker.exit_description()} while {doing}")
                if message[0] != "environment":
                    return message
                self.environment = message[1]
            worker.dump_stacks()
            raise self._lost(f"timed out after {limit:g} s while {doing} (it did not return; its worker process "
                             "was killed)")
        except KeyboardInterrupt:
            self._lost("")
            raise

    def _lost(self, what: str) -> WorkerLost:
        """Kill the worker: ``what`` happened, with what it wrote, as the error to raise."""
        worker, self.worker = self.worker, None
        output = ""
        if worker is not None:
            worker.kill()
            output = worker.output()
        return WorkerLost(what + (f"; it wrote:\n{_tail(output)}" if output else ""))

    def adopt(self) -> tuple[Worker | None, dict[str, Any] | None]:
        """The worker and the environment it told, for a run to take (the run ends the worker)."""
        worker, self.worker = self.worker, None
        return worker, self.environment


@dataclass
class _Target:
    """One target of the run, and what is known of it."""

    plan: TargetPlan
    # check[variant] -> (key, time limit), and the plan's order: as the worker planned it
    limits: dict[str, tuple[tuple[str, str], float | None]] = field(default_factory=dict)
    order: list[tuple[str, str]] = field(default_factory=list)
    record: Record = field(default_factory=Record)
    started: float | None = None
    run: RunReport | None = None


@dataclass
class _Job:
    """What a worker is doing: importing a target's layer ("load") or checking it ("check")."""

    kind: str
    target: _Target
    doing: str = "starting"  # a phase ("importing the layer") or the check[variant] running
    key: tuple[str, str] | None = None  # the check running
    limit: float | None = None
    since: float = field(default_factory=time.monotonic)

    def follow(self, doing: str, limit: float | None, key: tuple[str, str] | None = None) -> None:
        self.doing, self.limit, self.key, self.since = doing, limit, key, time.monotonic()

    @property
    def deadline(self) -> float | None:
        return None if self.limit is None else self.since + self.limit + grace(self.limit)


class _Run:
    def __init__(self, plans: Sequence[TargetPlan], options: Options, *, jobs: int,
                 progress: Progress | None, ahead: Ahead | None = None) -> None:
        self.options = options
        self.jobs = jobs
        self.progress = progress
        self.targets = [_Target(plan) for plan in plans]
        # Layers named on the command line are imported first: one that does not exist is a
        # usage error (exit 2), found before any target is checked.
        self.queue: list[_Job] = [_Job("load", t) for t in self.targets if t.plan.source is None]
        self.queue += [_Job("check", t) for t in self.targets]
        self.workers: dict[Worker, _Job | None] = {}
        # the checks asked for: --check, and each plan's enable (--enable's, then its spec's)
        self.context = context([*options.only, *(s for plan in plans for s in plan.enable)])
        self.folder = ""
        self.started_workers = 0
        # One clock for the run's time and each target's: from the command's start where it is known.
        self.start = options.started if options.started is not None else time.perf_counter()
        self.environment: dict[str, Any] | None = None  # a worker's, once one has started
        self.startup: float | None = None  # the first worker's start-up, told apart in a run of several targets
        adopted, environment = ahead.adopt() if ahead is not None else (None, None)
        if adopted is not None and adopted.send(("options", options, None)):
            self.workers[adopted] = None
            self.started_workers, self.environment = 1, environment
        elif adopted is not None:
            adopted.kill()

    @property
    def phase_limit(self) -> float | None:
        return self.options.timeout if self.options.timeout > 0 else None

    def go(self) -> Report:
        deadline = time.monotonic() + self.options.timeout_total if self.options.timeout_total else None
        interrupted = False
        self.folder = tempfile.mkdtemp(prefix="layercheck-")
        try:
            self._loop(deadline)
        except KeyboardInterrupt:
            interrupted = True
            self._stop("interrupted by the user (Ctrl-C)", unstarted=None)
        finally:
            for worker in list(self.workers):
                worker.kill()
            self.workers.clear()
            shutil.rmtree(self.folder, ignore_errors=True)
        return Report(runs=[t.run for t in self.targets if t.run is not None], environment=self._environment(),
                      version=__version__, seconds=time.perf_counter() - self.start, interrupted=interrupted)

    # -- the loop -----------------------------------------------------------------------------

    def _loop(self, deadline: float | None) -> None:
        while any(t.run is None for t in self.targets):
            if deadline is not None and time.monotonic() >= deadline:
                assert self.options.timeout_total is not None
                ran_out = plan.total_timeout(self.options.timeout_total)
                self._stop(ran_out, unstarted=f"not checked: {ran_out} before this target started")
                return
            self._dispatch()
            busy = {worker: job for worker, job in self.workers.items() if job is not None}
            if not busy:  # every waiting job has a worker, so this cannot be; never wait for nothing
                raise RuntimeError("layercheck lost track of a target: no worker is checking it")
            ends = [d for d in (job.deadline for job in busy.values()) if d is not None]
            ends += [deadline] if deadline is not None else []
            timeout = max(0.0, min(ends) - time.monotonic()) if ends else None
            handles: list[Any] = [w.conn for w in busy] + [w.process.sentinel for w in busy]
            ready = set(wait(handles, timeout))
            for worker in busy:
                if worker.conn in ready or worker.process.sentinel in ready:
                    self._drain(worker)
            now = time.monotonic()
            for worker, job in list(self.workers.items()):
                if job is not None and job.deadline is not None and now > job.deadline:
                    self._died(worker, timed_out=True)

    def _dispatch(self) -> None:
        """Give waiting jobs to idle workers, starting workers up to ``jobs``."""
        loading = any(job.kind == "load" for job in [*self.queue, *self.workers.values()] if job is not None)
        while self.queue:
            job = self.queue[0]
            if job.target.run is not None:  # its layer could not be imported: nothing to check
                self.queue.pop(0)
                continue
            if job.kind == "check" and loading:
                return  # first every layer named on the command line is known to exist
            if job.target.started is None and self._has_room():
                # Its time runs from now (the run's start, for the first ones: what the user waits
                # for), and its line shows now, before the first worker has imported torch.
                job.target.started = self.start if not self.started_workers else time.perf_counter()
                if self.progress is not None:
                    self.progress(job.target.plan.name, "starting", 0, 0)
            worker = self._idle_worker()
            if worker is None:
                return
            self.queue.pop(0)
            record = job.target.record if job.target.record.results else None
            if not worker.send((job.kind, job.target.plan, record)):
                self.queue.insert(0, job)
                self._discard(worker)
                continue
            job.follow("importing the layer" if job.kind == "load" else "starting", self.phase_limit)
            self.workers[worker] = job

    def _has_room(self) -> bool:
        """Whether a job can be given to a worker now (an idle one, or room for a new one)."""
        return len(self.workers) < self.jobs or any(job is None for job in self.workers.values())

    def _idle_worker(self) -> Worker | None:
        for worker, job in list(self.workers.items()):
            if job is None:
                if worker.process.is_alive() and not worker.conn.poll():
                    return worker
                self._discard(worker)  # it ended while idle (a thread the layer left behind)
        if len(self.workers) >= self.jobs:
            return None
        self.started_workers += 1
        capture = os.path.join(self.folder, f"worker-{self.started_workers}.out")
        # Workers beside each other share the CPUs rather than each taking all of them.
        worker = Worker.start(self.context, self.options, capture, threads=worker_threads(self.jobs))
        self.workers[worker] = None
        return worker

    def _discard(self, worker: Worker) -> None:
        self.workers.pop(worker, None)
        worker.kill()

    def _drain(self, worker: Worker) -> None:
        """Handle everything the worker has sent; its death when it has ended."""
        while worker in self.workers and worker.conn.poll():
            message = worker.receive()
            if message is None:
                self._died(worker)
                return
            self._handle(worker, message)
        if worker in self.workers and self.workers[worker] is not None and not worker.process.is_alive() \
                and not worker.conn.poll():
            self._died(worker)

    def _handle(self, worker: Worker, message: tuple[Any, ...]) -> None:
        if message[0] == "environment":
            self.environment = message[1]
            self._warmed_up(worker)
            return
        job = self.workers[worker]
        assert job is not None
        target, kind = job.target, message[0]
        if kind == "phase":
            job.follow(message[1], self.phase_limit)
        elif kind == "planned":
            target.order = [key for key, _ in message[1]]
            target.limits = {label(*key): (key, limit) for key, limit in message[1]}
        elif kind == "start":
            # a check this process does not know (a plug-in only the worker loads) has --timeout
            key, limit = target.limits.get(message[1][1], (None, self.phase_limit))
            job.follow(message[1][1], limit, key)
            if self.progress is not None:
                self.progress(*message[1])
        elif kind == "done":
            _, key, result, blocked, facts, target_kind = message
            target.record.results[key] = result
            if blocked is not None:
                target.record.blocked[key[0]] = blocked
            target.record.facts, target.record.kind = facts, target_kind
            job.follow(f"after {label(*key)}", self.phase_limit)
        elif kind == "report":
            target.run = dataclasses.replace(message[1], seconds=self._seconds(target))
            self.workers[worker] = None
            if not message[2]:  # not healthy: a thread the layer started is still running
                self._retire(worker)
        elif kind == "usage":
            raise UsageError(message[1])
        elif kind == "loaded":
            outcome, text, raised = message[1]
            if outcome == "missing":
                raise UsageError(text)
            if outcome == "failed":
                target.run = plan.error_run(target.plan, text, seconds=self._seconds(target), location=raised)
            self.workers[worker] = None
        elif kind == "crash":
            target.run = self._partial_run(target, seconds=self._seconds(target),
                                            error=f"layercheck failed while checking this target:\n{message[1]}")
            self._retire(worker)

    def _retire(self, worker: Worker) -> None:
        self.workers.pop(worker, None)
        worker.stop()  # one killed by _stop already is joined at once

    def _read_sent(self, worker: Worker) -> None:
        """Take in what a worker killed by :meth:`_stop` sent before it died. A Ctrl-C that
        lands between the worker's "start" of a check and the parent reading it would
        otherwise report the target as stopped after the check before, and lose the one
        in progress (and any result sent since the parent last read)."""
        try:
            while worker in self.workers and worker.conn.poll():
                message = worker.receive()
                if message is None:  # the end, or a message the kill cut short
                    return
                self._handle(worker, message)
        except Exception:  # a layer found not to exist; anything a pipe cut mid-read by the Ctrl-C unpickles to
            return

    def _died(self, worker: Worker, *, timed_out: bool = False) -> None:
        """The worker ended (or is killed for running past its deadline): what it was doing
        becomes an error, and the target goes on in a fresh worker where that makes sense."""
        job = self.workers.pop(worker, None)
        if timed_out:
            worker.dump_stacks()
            worker.kill()
            how = ""
        else:
            how = worker.exit_description()
            worker.kill()
        output = worker.output()
        if job is None:
            return
        target = job.target
        if job.key is not None:  # in the middle of a check: it is an error, the others go on
            target.record.results[job.key] = self._crashed_check(job, how, output)
            target.record.blocked.setdefault(job.key[0], "ended in an error")
            self.queue.insert(0, _Job("check", target))
            return
        if timed_out:
            assert job.limit is not None
            error = (f"timed out after {job.limit:g} s {_while(job.doing)} (it did not return; its worker process "
                     "was killed)")
        else:
            error = f"the worker process checking this target {how} {_while(job.doing)}"
        if output:
            error += f"; it wrote:\n{_tail(output)}"
        if job.kind == "load" or not target.record.results:
            target.run = plan.error_run(target.plan, error, seconds=self._seconds(target))
        else:
            target.run = self._partial_run(target, seconds=self._seconds(target),
                                            error=error)

    def _crashed_check(self, job: _Job, how: str, output: str) -> CheckResult:
        assert job.key is not None
        check, variant = job.key
        if how:
            message = (f"the worker process checking this target {how} while running {job.doing}; "
                       "the remaining checks ran in a fresh worker")
        else:
            assert job.limit is not None
            message = (f"{plan.timeout_message(job.limit, job.doing)}; it did not return to Python within "
                       f"{grace(job.limit):g} s more (a hang in native code, or a layer that swallows the "
                       "time-limit exception), so its worker process was killed and the remaining checks ran "
                       "in a fresh one")
        details: dict[str, Any] = {"output": output} if output else {}
        details["reproduce"] = job.target.plan.invocation.reproduce(selector(check, variant))
        return CheckResult(check, variant, Status.ERROR, time.monotonic() - job.since, message, details)

    def _stop(self, reason: str, *, unstarted: str | None) -> None:
        """End the run now: kill every worker; what each was doing becomes an error ending
        with ``reason``; targets not started get ``unstarted`` as their error (None: left out)."""
        for worker in self.workers:
            worker.send_kill()
        for worker in list(self.workers):
            self._read_sent(worker)
        for worker, job in list(self.workers.items()):
            self._discard(worker)
            if job is None or job.target.run is not None:
                continue
            target = job.target
            if job.key is not None:
                target.record.results[job.key] = CheckResult(
                    job.key[0], job.key[1], Status.ERROR, time.monotonic() - job.since,
                    f"{reason} while running {job.doing}")
                target.run = self._partial_run(target, seconds=self._seconds(target))
            else:
                target.run = self._partial_run(target, seconds=self._seconds(target),
                                               error=f"{reason} {_while(job.doing)}")
        for target in self.targets:
            if target.run is not None:
                continue
            if target.started is not None:  # a fresh worker was to go on with its remaining checks
                target.run = self._partial_run(target, seconds=self._seconds(target),
                                                error=f"{reason} before its remaining checks ran")
            elif unstarted is not None:
                target.run = plan.error_run(target.plan, unstarted)

    @staticmethod
    def _partial_run(target: _Target, *, seconds: float, error: str | None = None) -> RunReport:
        return plan.run_report(target.plan, target.record, target.order, seconds=seconds, error=error)

    def _warmed_up(self, worker: Worker) -> None:
        """A worker is ready: in a run of several targets, the first target's time starts now, not at
        the run's start, and the start-up (Python, torch and the checks imported) is reported apart
        (the environment's ``startup_seconds``), so that the first target is timed as the others."""
        job = self.workers.get(worker)
        if len(self.targets) < 2 or job is None or job.target.started != self.start or job.target.record.results:
            return
        job.target.started = time.perf_counter()
        if self.startup is None:
            self.startup = job.target.started - self.start

    def _environment(self) -> dict[str, Any]:
        """The workers' environment; where none started, what is known without torch."""
        if self.environment is not None:
            if self.startup is not None:
                return {**self.environment, "startup_seconds": round(self.startup, 6)}
            return self.environment
        try:
            torch_version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            torch_version = "not installed"
        return {"python": platform.python_version(), "torch": torch_version, "devices": ["cpu"], "plugins": []}

    @staticmethod
    def _seconds(target: _Target) -> float:
        return time.perf_counter() - target.started if target.started is not None else 0.0


def _while(doing: str) -> str:
    """``while importing the layer``, ``after predict_runs`` (between checks)."""
    return doing if doing.startswith("after ") else f"while {doing}"


def _tail(text: str) -> str:
    return text if len(text) <= QUOTED_OUTPUT else "..." + text[-QUOTED_OUTPUT:]


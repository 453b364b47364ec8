"""Run selected checks on targets and turn every outcome into a CheckResult.

Only the runner makes results (checks return or raise), and no exception from a layer or a
check escapes it: it becomes a ``failed`` or ``error`` result, and the next check runs.
"""

from __future__ import annotations

import contextlib
import platform
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from layercheck import __version__
from layercheck.context import Context
from layercheck.errors import (
    CheckError,
    CheckFailed,
    CheckSkipped,
    CheckTimeout,
    LayerRaised,
    LoadError,
    UsageError,
)
from layercheck.invocation import Invocation
from layercheck.loading import resolve
from layercheck.registry import CheckInfo, Planned, resolve_tolerances, select, selector
from layercheck.result import CheckResult, Report, RunReport, Status, label
from layercheck.spec import TargetSpec
from layercheck.subject import Target, accelerators

DEFAULT_TIMEOUT = 300.0

Progress = Callable[[str, str, int, int], None]
"""Called before each check runs: (target name, "check[variant]", index, total)."""


@dataclass(frozen=True)
class Options:
    """Knobs of one invocation that apply to every target (the command line's).

    ``tolerance`` maps ``CHECK.DTYPE`` (or a bare ``DTYPE``: the gradient check) to a value;
    it overrides a spec's own ``tolerance:``."""

    seed: int | None = None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    enable: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    tolerance: Mapping[str, float] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT


def check_devices(devices: Sequence[str]) -> None:
    """A device the user asked for must exist here: one torch does not know, or an accelerator
    this machine lacks, is a UsageError (exit 2), not a skipped check and a green run."""
    present = accelerators()
    for text in devices:
        try:
            dev = torch.device(text)
        except RuntimeError as exc:
            raise UsageError(f"--device {text!r}: not a device torch knows ({str(exc).splitlines()[0]})") from None
        if dev.type == "cpu":
            continue
        if not any(torch.device(name).type == dev.type and (dev.index is None or torch.device(name) == dev)
                   for name in present):
            raise UsageError(f"--device {text}: not present on this machine (accelerators here: "
                             f"{', '.join(present) or 'none'})")


def environment() -> dict[str, Any]:
    return {"python": platform.python_version(), "torch": torch.__version__, "devices": ["cpu", *accelerators()]}


def seed_of(spec: TargetSpec, options: Options) -> int:
    """The command line's seed, else the spec's, else 0."""
    return options.seed if options.seed is not None else (spec.seed if spec.seed is not None else 0)


def invocation_of(spec: TargetSpec, options: Options) -> Invocation:
    """How the user named this target and what they gave beside it."""
    seed, tolerance = seed_of(spec, options), dict(options.tolerance)
    if spec.source is not None:
        return Invocation(str(spec.source), spec=True, seed=seed, tolerance=tolerance, devices=options.devices,
                          enable=options.enable)
    return Invocation(spec.layer, layouts=spec.inputs, args=spec.args, kwargs=dict(spec.kwargs), seed=seed,
                      tolerance=tolerance, devices=options.devices, enable=options.enable, constants=spec.constants)


def make_target(spec: TargetSpec, options: Options) -> Target:
    """Resolve the spec's layer class; raises LoadError when it cannot be imported."""
    cls = resolve(spec.layer, base_dir=spec.base_dir)
    return Target(cls, spec.inputs, args=spec.args, kwargs=dict(spec.kwargs), seed=seed_of(spec, options),
                  name=spec.name, invocation=invocation_of(spec, options), constants=spec.constants)


def plan_for(spec: TargetSpec | None, options: Options) -> list[Planned]:
    """The checks for one target: the command line's selection merged with the spec's.
    Raises UsageError for an unknown check id or a tolerance no check declares."""
    skip = options.skip + (spec.skip if spec else ())
    enable = options.enable + (spec.enable if spec else ())
    plan = select(only=options.only, skip=skip, enable=enable)
    tolerances_of(spec, options)
    return plan


def tolerances_of(spec: TargetSpec | None, options: Options) -> dict[tuple[str, str], float]:
    """The tolerance overrides for one target, ``{(check, dtype): value}``: the spec's, then
    the command line's on top."""
    resolved = resolve_tolerances(spec.tolerance, f"{spec.name}: tolerance") if spec else {}
    resolved.update(resolve_tolerances(options.tolerance, "--tolerance"))
    return resolved


def run_spec(spec: TargetSpec, options: Options, progress: Progress | None = None) -> RunReport:
    """Check one target described by a spec; a layer that cannot be loaded is an error run."""
    start = time.perf_counter()
    plan = plan_for(spec, options)
    try:
        target = make_target(spec, options)
    except LoadError as exc:
        where = "layer: " if spec.source is not None else ""  # the spec file is the run's name already
        return RunReport(target=spec.name, kind=None, inputs=spec.input_dicts(),
                         seed=seed_of(spec, options), seconds=time.perf_counter() - start, results=[],
                         error=f"{where}{exc}")
    return run_target(target, plan, options=options, tolerances=tolerances_of(spec, options), progress=progress)


class TargetRun:
    """The checks of one target, run one at a time: the runs they share, the facts they
    record, and which of them failed in a way that leaves their dependents nothing to run."""

    def __init__(self, target: Target, plan: Sequence[Planned], *, options: Options = Options(),
                 tolerances: Mapping[tuple[str, str], float] | None = None) -> None:
        self.target = target
        self.plan = list(plan)
        self.options = options
        self.tolerances = dict(tolerances) if tolerances is not None else tolerances_of(None, options)
        self.shared: dict[Any, Any] = {}
        self.facts: dict[str, Any] = {}
        # check id -> what blocks its dependents: "failed" or "ended in an error" for a root cause,
        # "was skipped because ROOT failed" for a check skipped because of one
        self.blocked: dict[str, str] = {}
        self.setup_failure: str | None = None
        self.results: dict[tuple[str, str], CheckResult] = {}
        self._planned = frozenset([p.info.id for p in self.plan]
                                  + [selector(p.info.id, v) for p in self.plan for v in p.variants])

    def start(self) -> str | None:
        """Construct and initialise the layer once; the run's error when that is impossible
        (the constructor raised or hung). ``initialize`` raising is the layer's failure: the
        checks that need a layer are then skipped naming it."""
        try:
            with _time_limit(self.options.timeout):
                self.target.pristine()
        except LoadError as exc:
            return str(exc)
        except CheckTimeout:
            return (f"constructing and initialising the layer ran past the time limit of {self.options.timeout:g} s "
                    "(does it hang?)")
        except LayerRaised as exc:
            self.setup_failure = f"needs initialize, which raised {type(exc.exc).__name__}: {exc.exc}"
        return None

    def result(self, info: CheckInfo, variant: str) -> CheckResult:
        """The outcome of one check, run once: its prerequisites first (every planned variant
        of each, unless they ran already), so that it is gated as in a whole run even when it
        is run alone (a pytest item selected with -k)."""
        key = (info.id, variant)
        if key not in self.results:
            for planned in self.plan:
                if planned.info.id in info.requires:
                    for other in planned.variants:
                        self.result(planned.info, other)
            self.results[key] = self.run(info, variant)
        return self.results[key]

    def run(self, info: CheckInfo, variant: str) -> CheckResult:
        """Run one check (or skip it when a prerequisite blocks it) and remember its outcome."""
        reason = self._gate(info)
        if reason is not None:
            root = next((req for req in info.requires if req in self.blocked), None)
            if root is not None:  # skipped for a root cause: its dependents are skipped naming it too
                cause = self.blocked[root]
                self.blocked.setdefault(info.id, cause if cause.startswith("was skipped") else
                                        f"was skipped because {root} {cause}")
            return CheckResult(info.id, variant, Status.SKIPPED, 0.0, reason)
        ctx = Context(self.target, info, variant, invocation=self.target.invocation, tolerances=self.tolerances,
                      devices=self.options.devices, shared=self.shared, facts=self.facts, planned=self._planned)
        result, blocking = run_check(info, ctx, timeout=info.timeout or self.options.timeout)
        if blocking:
            self.blocked.setdefault(info.id, "ended in an error" if result.status is Status.ERROR else "failed")
        return result

    def _gate(self, info: CheckInfo) -> str | None:
        """Why this check is skipped without running, or None."""
        if self.setup_failure is not None and info.needs_subject:
            return self.setup_failure
        for req in info.requires:
            if req in self.blocked:
                return f"needs {req}, which {self.blocked[req]}"
        return info.skip_reason(self.target)


def run_target(target: Target, plan: Sequence[Planned], *, options: Options = Options(),
               tolerances: Mapping[tuple[str, str], float] | None = None,
               progress: Progress | None = None) -> RunReport:
    """Run the planned checks on one target, in order, each isolated from the others."""
    start = time.perf_counter()
    inputs = [spec.to_dict() for spec in target.specs]
    session = TargetRun(target, plan, options=options, tolerances=tolerances)
    error = session.start()
    if error is not None:
        return RunReport(target=target.name, kind=target.kind, inputs=inputs, seed=target.seed,
                         seconds=time.perf_counter() - start, results=[], error=error)
    results: list[CheckResult] = []
    total = sum(len(p.variants) for p in plan)
    for planned in plan:
        for variant in planned.variants:
            if progress is not None:
                progress(target.name, label(planned.info.id, variant), len(results),
                         total)
            results.append(session.result(planned.info, variant))
    return RunReport(target=target.name, kind=target.kind, inputs=inputs, seed=target.seed,
                     seconds=time.perf_counter() - start, results=results,
                     custom_backward=session.facts.get("custom_backward"))


def run(specs: Sequence[TargetSpec], options: Options, progress: Progress | None = None) -> Report:
    """Check every target in order; one that fails to load does not stop the others."""
    start = time.perf_counter()
    runs = [run_spec(spec, options, progress) for spec in specs]
    return Report(runs=runs, environment=environment(), version=__version__, seconds=time.perf_counter() - start)


def run_check(info: CheckInfo, ctx: Context, *, timeout: float | None = None) -> tuple[CheckResult, bool]:
    """Call one check and capture its outcome and time as a record; the flag says whether
    the outcome blocks the checks that require this one (CheckFailed.blocking)."""
    start = time.perf_counter()
    details: dict[str, Any] = {}
    blocking = False
    try:
        with _time_limit(timeout):
            value = info.func(ctx)
        status, message = Status.PASSED, ""
        if isinstance(value, tuple):
            message, details = value[0], dict(value[1])
        elif value is not None:
            message = str(value)
    except CheckFailed as exc:
        status, message, details, blocking = Status.FAILED, exc.message, dict(exc.details), exc.blocking
    except CheckSkipped as exc:
        status, message = Status.SKIPPED, str(exc)
    except LayerRaised as exc:
        status, message, blocking = Status.FAILED, f"{exc}", True
        details = {"phase": exc.phase, "traceback": exc.trace}
    except (CheckTimeout, CheckError) as exc:
        status, message, blocking = Status.ERROR, str(exc), True
        if isinstance(exc, CheckError) and exc.__cause__ is not None:
            details = {"traceback": "".join(traceback.format_exception(exc.__cause__, limit=-6))}
    except Exception as exc:
        status, blocking = Status.ERROR, True
        message = f"the check could not complete: {type(exc).__name__}: {exc}"
        details = {"traceback": traceback.format_exc(limit=-6)}
    if status in (Status.FAILED, Status.ERROR):
        details.setdefault("reproduce", ctx.reproduce)
    return (CheckResult(info.id, ctx.variant, status, time.perf_counter() - start, message, details,
                        tuple(ctx.notes)), blocking)


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt a check that runs too long (a hanging layer). Main thread on POSIX only;
    a single long native call is interrupted only when it returns to Python."""
    usable = (
        seconds is not None
        and seconds > 0
        and hasattr(signal, "SIGALRM")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def _expired(signum: int, frame: object) -> None:
        raise CheckTimeout(f"the check ran past its time limit of {seconds:g} s (does the layer hang?)")

    assert seconds is not None
    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

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
from layercheck.errors import CheckFailed, CheckSkipped, CheckTimeout, LayerRaised, LoadError
from layercheck.loading import resolve
from layercheck.registry import CheckInfo, Planned, select
from layercheck.result import CheckResult, Report, RunReport, Status
from layercheck.spec import TargetSpec
from layercheck.subject import Subject, Target

DEFAULT_TIMEOUT = 300.0

Progress = Callable[[str, str, int, int], None]
"""Called before each check runs: (target name, "check[variant]", index, total)."""


@dataclass(frozen=True)
class Options:
    """Knobs of one invocation that apply to every target (the command line's)."""

    seed: int | None = None
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    enable: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    tolerance: Mapping[str, float] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT


class Context:
    """What a check gets: the target, fresh subjects, shared inputs, tolerances."""

    def __init__(self, target: Target, info: CheckInfo, variant: str, *, tolerance: Mapping[str, float],
                 devices: Sequence[str], shared: dict[Any, Any], facts: dict[str, Any]) -> None:
        self.target = target
        self.info = info
        self.variant = variant
        self.devices = tuple(devices)
        self._tolerance = dict(tolerance)
        self._shared = shared
        self._facts = facts

    @property
    def seed(self) -> int:
        return self.target.seed

    @property
    def layouts(self) -> tuple:
        return self.target.layouts

    def fresh(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> Subject:
        """A new subject, built from the same constructor call and seed as every other."""
        return self.target.build(dtype=dtype, device=device)

    def tolerance(self, dtype: torch.dtype | str, default: float) -> float:
        """The tolerance for ``dtype``: the user's override (spec or command line) or ``default``."""
        name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
        return self._tolerance.get(name, default)

    def shared(self, key: Any, compute: Callable[[], Any]) -> Any:
        """A value computed once per target and shared between checks (treat as read-only)."""
        if key not in self._shared:
            self._shared[key] = compute()
        return self._shared[key]

    def fact(self, key: str, value: Any) -> None:
        """Record a fact about the target for the run report (e.g. ``custom_backward``)."""
        self._facts[key] = value

    @property
    def reproduce(self) -> str:
        """The command that reruns only this check, with this seed."""
        selector = f"{self.info.id}:{self.variant}" if self.variant else self.info.id
        return f"{self.target.reproduce} --check {selector} --seed {self.seed}"


def environment() -> dict[str, Any]:
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        devices.append("mps")
    return {"python": platform.python_version(), "torch": torch.__version__, "devices": devices}


def make_target(spec: TargetSpec, options: Options) -> Target:
    """Resolve the spec's layer class; raises LoadError when it cannot be imported."""
    cls = resolve(spec.layer, base_dir=spec.base_dir)
    seed = options.seed if options.seed is not None else (spec.seed if spec.seed is not None else 0)
    if spec.source is not None:
        base = f"layercheck run {spec.source}"
    else:
        layouts = " ".join(f"--layout {layout}" for layout in spec.layouts)
        base = f"layercheck run {spec.layer} {layouts}"
    return Target(cls, spec.layouts, args=spec.args, kwargs=dict(spec.kwargs), seed=seed,
                  name=spec.name, reproduce=base)


def plan_for(spec: TargetSpec | None, options: Options) -> list[Planned]:
    """The checks for one target: the command line's selection merged with the spec's."""
    skip = options.skip + (spec.skip if spec else ())
    enable = options.enable + (spec.enable if spec else ())
    return select(only=options.only, skip=skip, enable=enable)


def run_spec(spec: TargetSpec, options: Options, progress: Progress | None = None) -> RunReport:
    """Check one target described by a spec; a layer that cannot be loaded is an error run."""
    start = time.perf_counter()
    plan = plan_for(spec, options)
    try:
        target = make_target(spec, options)
    except LoadError as exc:
        seed = options.seed if options.seed is not None else (spec.seed or 0)
        where = "layer: " if spec.source is not None else ""  # the spec file is the run's name already
        return RunReport(target=spec.name, kind=None, inputs=[layout.to_dict() for layout in spec.layouts],
                         seed=seed, seconds=time.perf_counter() - start, results=[], error=f"{where}{exc}")
    tolerance = {**spec.tolerance, **options.tolerance}
    return run_target(target, plan, options=options, tolerance=tolerance, progress=progress)


def run_target(target: Target, plan: Sequence[Planned], *, options: Options = Options(),
               tolerance: Mapping[str, float] | None = None, progress: Progress | None = None) -> RunReport:
    """Run the planned checks on one target, in order, each isolated from the others."""
    start = time.perf_counter()
    inputs = [layout.to_dict() for layout in target.layouts]
    try:
        with _time_limit(options.timeout):
            target.pristine()
        setup_failure: str | None = None
    except (LoadError, CheckTimeout) as exc:
        error = str(exc) if isinstance(exc, LoadError) else (
            f"constructing and initialising the layer ran past the time limit of {options.timeout:g} s (does it hang?)")
        return RunReport(target=target.name, kind=target.kind, inputs=inputs, seed=target.seed,
                         seconds=time.perf_counter() - start, results=[], error=error)
    except LayerRaised as exc:
        setup_failure = f"needs initialize, which raised {type(exc.exc).__name__}: {exc.exc}"
    shared: dict[Any, Any] = {}
    facts: dict[str, Any] = {}
    worst: dict[str, Status] = {}
    results: list[CheckResult] = []
    total = sum(len(p.variants) for p in plan)
    for planned in plan:
        info = planned.info
        for variant in planned.variants:
            if progress is not None:
                progress(target.name, f"{info.id}[{variant}]" if variant else info.id, len(results), total)
            reason = _gate(info, target, worst, setup_failure)
            if reason is not None:
                result = CheckResult(info.id, variant, Status.SKIPPED, 0.0, reason)
            else:
                ctx = Context(target, info, variant, tolerance=tolerance or {}, devices=options.devices,
                              shared=shared, facts=facts)
                result = run_check(info, ctx, timeout=info.timeout or options.timeout)
            results.append(result)
            worst[info.id] = _worse(worst.get(info.id), result.status)
    return RunReport(target=target.name, kind=target.kind, inputs=inputs, seed=target.seed,
                     seconds=time.perf_counter() - start, results=results,
                     custom_backward=facts.get("custom_backward"))


def run(specs: Sequence[TargetSpec], options: Options, progress: Progress | None = None) -> Report:
    """Check every target in order; one that fails to load does not stop the others."""
    start = time.perf_counter()
    runs = [run_spec(spec, options, progress) for spec in specs]
    return Report(runs=runs, environment=environment(), version=__version__, seconds=time.perf_counter() - start)


def run_check(info: CheckInfo, ctx: Context, *, timeout: float | None = None) -> CheckResult:
    """Call one check and capture its outcome and time as a record."""
    start = time.perf_counter()
    details: dict[str, Any] = {}
    try:
        with _time_limit(timeout):
            value = info.func(ctx)
        status, message = Status.PASSED, ""
        if isinstance(value, tuple):
            message, details = value[0], dict(value[1])
        elif value is not None:
            message = str(value)
    except CheckFailed as exc:
        status, message, details = Status.FAILED, exc.message, dict(exc.details)
    except CheckSkipped as exc:
        status, message = Status.SKIPPED, str(exc)
    except LayerRaised as exc:
        status, message = Status.FAILED, f"{exc}"
        details = {"phase": exc.phase, "traceback": exc.trace}
    except CheckTimeout as exc:
        status, message = Status.ERROR, str(exc)
    except Exception as exc:
        status = Status.ERROR
        message = f"the check could not complete: {type(exc).__name__}: {exc}"
        details = {"traceback": traceback.format_exc(limit=-6)}
    if status in (Status.FAILED, Status.ERROR):
        details.setdefault("reproduce", ctx.reproduce)
    return CheckResult(info.id, ctx.variant, status, time.perf_counter() - start, message, details)


def _gate(info: CheckInfo, target: Target, worst: Mapping[str, Status], setup_failure: str | None) -> str | None:
    """Why this check is skipped without running, or None."""
    if setup_failure is not None and info.needs_subject:
        return setup_failure
    for req in info.requires:
        status = worst.get(req)
        if status in (Status.FAILED, Status.ERROR):
            return f"needs {req}, which {'failed' if status is Status.FAILED else 'ended in an error'}"
    return info.skip_reason(target)


_RANK = {Status.PASSED: 0, Status.SKIPPED: 1, Status.FAILED: 2, Status.ERROR: 3}


def _worse(a: Status | None, b: Status) -> Status:
    return b if a is None or _RANK[b] > _RANK[a] else a


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

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

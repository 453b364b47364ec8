"""Run selected checks on targets and turn every outcome into a CheckResult.

Only the runner makes results (checks return or raise), and no exception from a layer or a
check escapes it: it becomes a ``failed`` or ``error`` result, and the next check runs. That
holds for what ends a program too (``SystemExit``, other ``BaseException`` subclasses, an
allocation beyond the memory limit); only the user's Ctrl-C stops a run in this process. Each
check runs :func:`~layercheck.support.containment.contained`: global settings the layer changes are
put back, and its warnings (and, in a worker process, its prints) go into the result.

This module runs checks in the current process (the Python API, the pytest plugin,
``--no-isolate``); :mod:`layercheck.parent.isolation` runs them in worker processes, through
:class:`TargetRun`, and survives what this process cannot.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from layercheck._version import __version__
from layercheck.engine import lazytorch
from layercheck.explore.engine import Explorer
from layercheck.parent import limits, plugins
from layercheck.parent.errors import (
    CheckError,
    CheckFailed,
    CheckSkipped,
    CheckTimeout,
    LayerRaised,
    LoadError,
    UsageError,
    layer_failure,
)
from layercheck.parent.plan import (  # re-exported: the runner's API
    Listener,
    Options,
    Progress,
    Record,
    TargetPlan,
    error_run,
    limit,
    timeout_message,
    total_timeout,
)
from layercheck.parent.registry import CheckInfo, Planned, resolve_tolerances, select, selector
from layercheck.parent.result import BLOCKED, NOT_APPLICABLE, NOT_JUDGED, CheckResult, Report, RunReport, Status, label
from layercheck.store.settings import Exploration
from layercheck.support.accelerators import accelerators, full_float32
from layercheck.support.containment import contained
from layercheck.support.context import Context
from layercheck.support.locations import layer_location, with_backward
from layercheck.support.raised import raised_at
from layercheck.target.frames import user_trace
from layercheck.target.prepare import INTERPRET, KERNELS, TRITON_INSTALLED, prepare, try_once
from layercheck.target.subject import Target


def check_devices(devices: Sequence[str], option: str = "--device") -> None:
    """A device the user asked for must exist here: one torch does not know, or an accelerator
    this machine lacks, is a UsageError (exit 2), not a skipped check and a green run.
    ``option`` names where it was asked for (``--device``, ``--on``, a spec's ``on:``)."""
    present = accelerators()
    for text in devices:
        try:
            dev = torch.device(text)
        except RuntimeError as exc:
            raise UsageError(f"{option} {text!r}: not a device torch knows ({str(exc).splitlines()[0]})") from None
        if dev.type == "cpu":
            continue
        if not any(torch.device(name).type == dev.type and (dev.index is None or torch.device(name) == dev)
                   for name in present):
            raise UsageError(f"{option} {text}: not present on this machine (accelerators here: "
                             f"{', '.join(present) or 'none'})")


def environment() -> dict[str, Any]:
    """Where the checks ran: Python, torch, the devices, and the check plug-ins loaded."""
    return {"python": platform.python_version(), "torch": torch.__version__, "devices": ["cpu", *accelerators()],
            "plugins": [p.to_dict() for p in plugins.loaded(plugins.CHECKS)]}


@dataclass(frozen=True)
class Checks:
    """A plan's checks as the engine runs them: the planned checks and variants, in order, and
    the tolerance overrides resolved, ``{(check, dtype): value}``."""

    planned: tuple[Planned, ...]
    tolerances: Mapping[tuple[str, str], float]


def checks_of(plan: TargetPlan) -> Checks:
    """The checks of one target: the selection the plan merged, and its tolerance overrides (the
    spec's, then the command line's on top). Made once per target and carried (run_plan, the
    pytest plugin's file, the Python API). Raises UsageError for an unknown check id, a
    tolerance no check declares, or a check plug-in that failed to load."""
    return Checks(tuple(select(only=plan.only, skip=plan.skip, enable=plan.enable)), _tolerances(plan.tolerances))


def check_options(options: Options) -> None:
    """The command line's own selection and tolerances, before any target's are merged in: a
    UsageError names the option, not a target."""
    select(only=options.only, skip=options.skip, enable=options.enable)
    _tolerances((("--tolerance", options.tolerance),))


def _tolerances(sources: Sequence[tuple[str, Mapping[str, float]]]) -> dict[tuple[str, str], float]:
    """Tolerance overrides given in ``sources`` (where, ``CHECK.DTYPE`` -> value), each on top of those before."""
    resolved: dict[tuple[str, str], float] = {}
    for where, overrides in sources:
        resolved.update(resolve_tolerances(overrides, where))
    return resolved


def run_plan(plan: TargetPlan, options: Options, progress: Progress | None = None, *, record: Record | None = None,
             listener: Listener | None = None, deadline: float | None = None) -> RunReport:
    """Check one target; a layer that cannot be loaded is an error run. ``record``: what an
    earlier worker finished (its checks are not run again)."""
    start = time.perf_counter()
    checks = checks_of(plan)
    listener = listener or Listener()
    listener.planned([((p.info.id, variant), limit_of(p.info, options))
                      for p in checks.planned for variant in p.variants])
    listener.phase("importing the layer")
    try:
        target = load_target(plan, options)
    except LoadError as exc:
        where = "layer: " if plan.source is not None else ""  # the spec file is the run's name already
        # the line of the user's file that raised on import, where one did: the report points there
        return error_run(plan, f"{where}{exc}", seconds=time.perf_counter() - start, location=raised_at(exc))
    return run_target(target, checks.planned, options=options, tolerances=checks.tolerances, progress=progress,
                      record=record, listener=listener, deadline=deadline, exploration=plan.exploration)


def load_target(plan: TargetPlan, options: Options, *, announce: bool = True) -> Target:
    """The plan's target made ready (:func:`~layercheck.target.prepare.prepare`), under the time
    limit and with global settings put back; raises LoadError (TargetNotFound when the file,
    module or class does not exist)."""
    try:
        with _time_limit(options.timeout), contained(capture=options.contained, echo=True):
            return prepare(plan, announce=announce)
    except CheckTimeout:
        raise LoadError(f"importing the layer ran past the time limit of {options.timeout:g} s "
                        "(does its module hang at import?)") from None


# The checks that judge a hand-written backward: their failures name it, with its file and line.
_IN_BACKWARD = frozenset({"backward_size", "gradients", "needs_input_grad", "backward_pure", "grad_output",
                          "gradgrad"})
# A check that requires it runs on a layer known to run forward and backward: the runner tries the
# sample of the batch first, so that the parts of the check meant for the sample (the gradient
# check's draw into the tails, second call and float64 yardstick; state_valid's note) run on it
# whichever checks ran before (run alone, no check on the sample had made it).
_BACKWARD_RUNS = "backward_runs"

def ordered_results(plan: Sequence[Planned], results: Mapping[tuple[str, str], CheckResult]) -> list[CheckResult]:
    """The results there are, in the order the checks are planned."""
    keys = ((planned.info.id, variant) for planned in plan for variant in planned.variants)
    return [results[key] for key in keys if key in results]


def limit_of(info: CheckInfo, options: Options) -> float | None:
    """A check's time limit in seconds: its own, else ``--timeout``; None for none."""
    return limit(info.timeout, options)


class TargetRun:
    """The checks of one target, run one at a time: the runs they share, the facts they
    record, and which of them failed in a way that leaves their dependents nothing to run."""

    def __init__(self, target: Target, plan: Sequence[Planned], *, options: Options = Options(),
                 tolerances: Mapping[tuple[str, str], float] | None = None, record: Record | None = None,
                 listener: Listener | None = None, progress: Progress | None = None) -> None:
        self.target = target
        self.plan = list(plan)
        self.options = options
        if tolerances is None:  # a run made without a plan (tests): the options' own
            tolerances = _tolerances((("--tolerance", options.tolerance),))
        self.tolerances = dict(tolerances)
        self.shared: dict[Any, Any] = {}
        self.readers: dict[Any, frozenset[str]] = {}  # shared key -> the checks that read it
        self.record = record if record is not None else Record()
        self.record.kind = target.kind
        self.facts = self.record.facts
        self.facts.setdefault("location", layer_location(target.cls))  # for a report made without this run
        if target.interpreter is not None:
            self.facts.setdefault("interpreter", target.interpreter)
        self.blocked = self.record.blocked
        self.results = self.record.results
        self.setup_failure: str | None = None
        self.raised: dict[str, Any] | None = None
        self.listener = listener or Listener()
        self.progress = progress
        self._planned = frozenset([p.info.id for p in self.plan]
                                  + [selector(p.info.id, v) for p in self.plan for v in p.variants])
        self._total = sum(len(p.variants) for p in self.plan)
        self._sample: _Sample | None = None
        self._sample_tried = False

    @lazytorch.lending  # Note [torch internals a check does not need]
    def start(self) -> str | None:
        """Construct and initialise the layer once; the run's error when that is impossible
        (the constructor raised or hung). ``initialize`` raising is the layer's failure: the
        checks that need a layer are then skipped naming it."""
        self.listener.phase("constructing and initialising the layer")
        try:
            with _time_limit(self.options.timeout), contained(capture=self.options.contained, echo=True):
                self.target.pristine()
                if self.target.reference is not None:  # its parameter names and sizes, before any check
                    self.target.reference.check(self.target)
        except LoadError as exc:
            self.raised = raised_at(exc)  # the constructor's line that raised: the report points there
            return str(exc)
        except CheckTimeout:
            return (f"constructing and initialising the layer ran past the time limit of {self.options.timeout:g} s "
                    "(does it hang?)")
        except LayerRaised as exc:
            self.setup_failure = f"needs initialize, which raised {type(exc.exc).__name__}: {exc.exc}"
        except KeyboardInterrupt as exc:
            if not self.options.contained:
                raise  # the user's Ctrl-C
            return f"constructing and initialising the layer: {_ended(exc)}"
        except Exception as exc:  # not the layer's (that is a LoadError or LayerRaised): layercheck's own
            return f"constructing and initialising the layer could not complete: {type(exc).__name__}: {exc}"
        except BaseException as exc:  # SystemExit and its kind: the layer tried to end the program
            return f"constructing and initialising the layer: {_ended(exc)}"
        return None

    def steps(self) -> Iterator[tuple[CheckInfo, str]]:
        """Every planned check and variant, in the plan's order, except that while shared runs
        with declared readers are held, the readers still to run of the one held longest come
        first, so that it is let go early (Context.shared); the report keeps the plan's order.
        A check that runs on the sample of the batch reads none of them."""
        order = [(planned.info, variant) for planned in self.plan for variant in planned.variants]
        given: set[tuple[str, str]] = set()
        while True:
            pending = [(info, variant) for info, variant in order
                       if (info.id, variant) not in self.results and (info.id, variant) not in given]
            if not pending:
                return
            readers = [step for held in self.readers.values() for step in pending
                       if step[0].id in held and not self._on_sample(step[0])]
            info, variant = readers[0] if readers else pending[0]
            given.add((info.id, variant))
            yield info, variant

    def report(self, seconds: float, *, error: str | None = None) -> RunReport:
        """The run report of what has results so far, in the plan's order."""
        return RunReport(target=self.target.name, kind=self.target.kind,
                         inputs=[spec.to_dict() for spec in self.target.given], seed=self.target.seed,
                         seconds=seconds, results=ordered_results(self.plan, self.results), error=error,
                         custom_backward=self.facts.get("custom_backward"), location=self._location(),
                         interpreter=self.facts.get("interpreter"))

    def _location(self) -> dict[str, Any] | None:
        """Where the layer is defined, and its hand-written backward (the Function classes
        forward_runs found in its graph)."""
        if self.raised is not None:  # the constructor raised: where, and where the layer is defined
            return {**self.raised, "defined": self.facts.get("location")}
        forward = self.results.get(("forward_runs", ""))
        names = forward.details.get("custom_backward") if forward is not None else None
        return with_backward(self.facts.get("location"), self.target.cls, names if isinstance(names, list) else ())

    @lazytorch.lending
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
            self.run(info, variant)
        return self.results[key]

    def run(self, info: CheckInfo, variant: str) -> CheckResult:
        """Run one check (or skip it when a prerequisite blocks it) and remember its outcome."""
        if self.progress is not None:
            self.progress(self.target.name, label(info.id, variant), len(self.results), self._total)
        reason, kind = self._gate(info)
        if reason is not None:
            root = next((req for req in info.requires if req in self.blocked), None)
            if root is not None:  # skipped for a root cause: its dependents are skipped naming it too
                cause = self.blocked[root]
                self.blocked.setdefault(info.id, cause if cause.startswith("was skipped") else
                                        f"was skipped because {root} {cause}")
            result = CheckResult(info.id, variant, Status.SKIPPED, 0.0, reason, skip=kind)
        else:
            if _BACKWARD_RUNS in info.requires:  # the layer runs forward and backward: a part may read the sample
                self.sampled(info)
            sample = self.sampled(info) if self._on_sample(info) else None
            target, shared, readers = ((sample.target, sample.shared, sample.readers) if sample is not None
                                       else (self.target, self.shared, self.readers))
            ctx = Context(target, info, variant, invocation=self.target.invocation, tolerances=self.tolerances,
                          devices=self.options.devices, shared=shared, facts=self.facts, planned=self._planned,
                          readers=readers, sampler=None if sample is not None else self._made_sample)
            result, blocking = run_check(info, ctx, timeout=limit_of(info, self.options), options=self.options,
                                         backward=lambda: (self._location() or {}).get("backward"))
            if sample is not None:
                result = sample.mark(result)
            if blocking:
                self.block(info.id, result)
        self.results[(info.id, variant)] = result
        self._release()
        self.listener.finished((info.id, variant), result, self.record)
        return result

    def sampled(self, info: CheckInfo) -> _Sample | None:
        """The target on a few of its observations (``Target.sampled``), built and tried once:
        a predict and a forward and backward of the smaller batch. None when the inputs are
        small already, or the layer does not take the smaller batch as it takes the whole one
        (it raises, or its parameters follow the batch): the checks then run on the whole batch."""
        if not self._sample_tried:
            self._sample_tried = True
            try:
                with _time_limit(limit_of(info, self.options)), contained(capture=self.options.contained):
                    sample = self.target.sampled()
                    if sample is not None:
                        try_once(sample)
                        self._sample = _Sample(sample, self.target.batch)
            except (Exception, CheckTimeout):
                pass  # the layer's trouble with a smaller batch: the checks that could use one use all of it
        return self._sample

    def _made_sample(self) -> Target | None:
        """The sample's target where it has been made already (Context.fresh(sample=True)): never
        made inside a check, whose time limit would then cover the layer's trial on it: the runner
        tries it before every check that requires backward_runs (which passed: the layer runs)."""
        return None if self._sample is None else self._sample.target

    def _on_sample(self, info: CheckInfo) -> bool:
        """Whether the check runs on the sample of the batch (the sample is made on first asking)."""
        return info.any_batch and self.sampled(info) is not None

    def _release(self) -> None:
        """Let go of the shared runs whose declared readers have all run (Context.shared)."""
        if not self.readers:
            return
        # a check that runs on the sample reads the sample's runs, never these
        pending = {p.info.id for p in self.plan if any((p.info.id, v) not in self.results for v in p.variants)
                   and not self._on_sample(p.info)}
        for key, readers in list(self.readers.items()):
            if not readers & pending:
                self.shared.pop(key, None)
                del self.readers[key]

    def block(self, check_id: str, result: CheckResult) -> None:
        """Switch off the checks that need ``check_id``, which ended in ``result``."""
        self.blocked.setdefault(check_id, "ended in an error" if result.status is Status.ERROR else "failed")

    def _gate(self, info: CheckInfo) -> tuple[str | None, str]:
        """Why this check is skipped without running (or None), and the kind of that skip
        (CheckResult.skip)."""
        if self.setup_failure is not None and info.needs_subject:
            return self.setup_failure, BLOCKED
        for req in info.requires:
            if req in self.blocked:
                return f"needs {req}, which {self.blocked[req]}", BLOCKED
        return info.skip_reason(self.target), NOT_APPLICABLE


@dataclass
class _Sample:
    """A target cut to a few of the batch's observations, with the runs its checks share: small
    ones, held for the whole target."""

    target: Target
    batch: int | None
    shared: dict[Any, Any] = field(default_factory=dict)
    readers: dict[Any, frozenset[str]] = field(default_factory=dict)

    def mark(self, result: CheckResult) -> CheckResult:
        """A result of a check run on the sample, saying so (message and details)."""
        if result.status is Status.SKIPPED:
            return result
        kept = self.target.batch
        where = f"on {kept} of the batch's {self.batch} observations"
        head, fix, tail = result.message.rpartition(" Fix: ") if result.status is Status.FAILED else ("", "", "")
        message = (f"{head.rstrip('.')} ({where}).{fix}{tail}" if fix else
                   f"{result.message} ({where})" if result.message else where)
        return replace(result, message=message,
                       details={**result.details, "sample": {"observations": kept, "batch": self.batch}})


@lazytorch.lending  # one loan for the whole target (Note [torch internals a check does not need])
def run_target(target: Target, plan: Sequence[Planned], *, options: Options = Options(),
               tolerances: Mapping[tuple[str, str], float] | None = None,
               progress: Progress | None = None, record: Record | None = None, listener: Listener | None = None,
               deadline: float | None = None, exploration: Exploration | None = None) -> RunReport:
    """Run the planned checks on one target, in order, each isolated from the others (those
    ``record`` holds already are not run again). Past ``deadline`` (``time.monotonic()``), the
    next check is an error and the others do not run. ``exploration``: saved failures replayed
    first, failures shrunk, more draws explored (Note [exploring] in explore/engine.py)."""
    start = time.perf_counter()
    session = TargetRun(target, plan, options=options, tolerances=tolerances, record=record, listener=listener,
                        progress=progress)
    error = session.start()
    if error is not None:
        return session.report(time.perf_counter() - start, error=error)
    explorer = None
    if exploration is not None:
        explorer = Explorer(session, exploration, lambda other, checks: TargetRun(
            other, checks, options=options, tolerances=session.tolerances))
        explorer.replay()
    for info, variant in session.steps():
        if deadline is not None and time.monotonic() >= deadline and (info.id, variant) not in session.results:
            assert options.timeout_total is not None
            message = f"{total_timeout(options.timeout_total)} before {label(info.id, variant)}"
            session.results[(info.id, variant)] = CheckResult(info.id, variant, Status.ERROR, 0.0, message)
            break
        session.result(info, variant)
    if explorer is not None:
        explored = explorer.finish()
        return replace(session.report(time.perf_counter() - start), explore=explored)
    return session.report(time.perf_counter() - start)


def run(plans: Sequence[TargetPlan], options: Options, progress: Progress | None = None) -> Report:
    """Check every target in order, in this process; one that fails to load does not stop the
    others. The user's Ctrl-C stops the run: the report holds the targets that finished and
    says it was interrupted. ``--timeout-total`` is kept between checks (a check that hangs
    is stopped by its own limit)."""
    start = options.started if options.started is not None else time.perf_counter()
    deadline = time.monotonic() + options.timeout_total if options.timeout_total else None
    runs: list[RunReport] = []
    interrupted = False
    try:
        for plan in plans:
            if deadline is not None and time.monotonic() >= deadline:
                assert options.timeout_total is not None
                runs.append(error_run(plan, f"not checked: {total_timeout(options.timeout_total)} "
                                            "before this target started"))
                continue
            runs.append(run_plan(plan, options, progress, deadline=deadline))
    except KeyboardInterrupt:
        interrupted = True
    return Report(runs=runs, environment=environment(), version=__version__, seconds=time.perf_counter() - start,
                  interrupted=interrupted)


def run_check(info: CheckInfo, ctx: Context, *, timeout: float | None = None, options: Options = Options(),
              backward: Callable[[], Mapping[str, Any] | None] | None = None) -> tuple[CheckResult, bool]:
    """Call one check and capture its outcome and time as a record; the flag says whether
    the outcome blocks the checks that require this one (CheckFailed.blocking). A failure's
    message names the layer's hand-written backward (``backward()``, asked only for a failure:
    finding it reads source) with its file and line, and ends with the check's fix
    (CheckInfo.explained)."""
    start = time.perf_counter()
    # a layer checked on CUDA (--on) runs with TF32 off: its float32 results are compared with
    # float64 and with the CPU, where TF32's 10-bit mantissa looks like a bug
    precision = full_float32() if ctx.target.home.type == "cuda" else contextlib.nullcontext()
    with limits.measure_peak() as peak, contained(capture=options.contained) as effects, precision:
        status, message, details, blocking, skip = _outcome(info, ctx, timeout=timeout, options=options)
    message, details = effects.annotate(message, details)
    if status is Status.FAILED:
        message = info.explained(message, backward() if backward is not None else None, lead=info.id in _IN_BACKWARD)
    if skip == NOT_JUDGED and options.strict:  # Note [no silent pass] in numerics/reference.py
        status, skip = Status.FAILED, None
        message = f"not judged, which --strict fails: {message}"
    if status in (Status.FAILED, Status.ERROR):
        details.setdefault("reproduce", ctx.reproduce)
    return (CheckResult(info.id, ctx.variant, status, time.perf_counter() - start, message, details,
                        tuple(ctx.notes), peak.total, skip=skip), blocking)


def _outcome(info: CheckInfo, ctx: Context, *, timeout: float | None,
             options: Options) -> tuple[Status, str, dict[str, Any], bool, str | None]:
    """Status, message, details, blocking flag and skip kind of one call of a check."""
    details: dict[str, Any] = {}
    blocking = False
    skip = None
    caught: BaseException | None = None
    try:
        with _time_limit(timeout), limits.deadline(timeout):
            value = info.func(ctx)
        status, message = Status.PASSED, ""
        if isinstance(value, tuple):
            message, details = value[0], dict(value[1])
        elif value is not None:
            message = str(value)
    except CheckFailed as exc:
        status, message, details, blocking, caught = Status.FAILED, exc.message, dict(exc.details), exc.blocking, exc
    except CheckSkipped as exc:
        status, message, skip = Status.SKIPPED, str(exc), NOT_JUDGED if exc.applies else NOT_APPLICABLE
    except LayerRaised as exc:
        failure = layer_failure(exc, blocking=True)  # its message and details, with a hint where one applies
        status, message, blocking, caught = Status.FAILED, failure.message, True, exc
        details = dict(failure.details)
    except CheckTimeout:
        assert timeout is not None
        status, message, blocking = Status.ERROR, timeout_message(timeout, label(info.id, ctx.variant)), True
        if KERNELS.get(ctx.target.name) and os.environ.get(INTERPRET) == "1":
            message += (". Its Triton kernels run under Triton's interpreter, one program after another in NumPy: "
                        "check it at smaller layouts (fewer programs), or with a larger --timeout")
        details = {"traceback": traceback.format_exc(limit=-8)}
    except CheckError as exc:
        status, message, blocking, caught = Status.ERROR, str(exc), True, exc
        if exc.__cause__ is not None:
            details = {"traceback": "".join(traceback.format_exception(exc.__cause__, limit=-6))}
    except Exception as exc:
        status, blocking, caught = Status.ERROR, True, exc
        message = f"the check could not complete: {type(exc).__name__}: {exc}"
        details = {"traceback": traceback.format_exc(limit=-6)}
    except KeyboardInterrupt as exc:
        if not options.contained:
            raise  # the user's Ctrl-C: the run stops
        status, blocking, message = Status.ERROR, True, f"{label(info.id, ctx.variant)}: {_ended(exc)}"
        details = {"traceback": user_trace(exc)}
    except BaseException as exc:  # SystemExit, GeneratorExit, a layer's own BaseException subclass
        status, blocking, message = Status.ERROR, True, f"{label(info.id, ctx.variant)}: {_ended(exc)}"
        details = {"traceback": user_trace(exc)}
    limit = _environment_limit(caught) if status in (Status.FAILED, Status.ERROR) else None
    if limit is not None:  # Triton asked for a GPU driver this machine lacks: not the layer's failure
        status, message, blocking = Status.ERROR, limit, True
    if caught is not None and "traceback" in details and "location" not in details:
        where = raised_at(caught)  # the line of the user's code that raised: reports point there
        if where is not None:
            details["location"] = where
    oom = limits.out_of_memory(caught) if caught is not None else None
    if oom is not None:
        status, blocking = Status.ERROR, True
        message = _out_of_memory_message(oom, label(info.id, ctx.variant), options)
    return status, message, details, blocking, skip


def _environment_limit(caught: BaseException | None) -> str | None:
    """What a check that failed because Triton needs a GPU here reports instead (triton_interpret)."""
    if caught is None or "triton" not in sys.modules or not TRITON_INSTALLED:
        return None
    try:
        from layercheck.target import triton_interpret
    except Exception:
        return None
    return triton_interpret.environment_limit(caught)


def _ended(exc: BaseException) -> str:
    """What a layer did that would end a program, for a message."""
    if isinstance(exc, SystemExit):
        return (f"the layer raised SystemExit({exc.code!r}) (sys.exit() or exit()), which would end the program "
                "that trains with it")
    if isinstance(exc, KeyboardInterrupt):
        return ("the layer raised KeyboardInterrupt (not the user's Ctrl-C: a worker process ignores that), "
                "which would end the program that trains with it")
    text = f": {exc}" if str(exc) else ""
    return (f"the layer raised {type(exc).__name__}{text}, a BaseException that is not an Exception: it passes "
            "through `except Exception` and would end the program that trains with it")


def _out_of_memory_message(exc: BaseException, label_: str, options: Options) -> str:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    limit = (f" beyond the memory limit of {limits.format_size(options.max_memory)} per worker (--max-memory)"
             if options.max_memory is not None and options.contained else "")
    return f"ran out of memory in {label_}: an allocation{limit} failed: {first}"


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

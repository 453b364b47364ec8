"""What a run is asked to do and what is known of it, without torch: the command line's
options, each target's plan (a spec and the options resolved into one value, :class:`TargetPlan`),
the record of a target's results, and the run report made from them.

The parent process of an isolated run (:mod:`layercheck.parent.isolation`) works from this module
alone, so that it never imports torch: its workers do, once each fork server.
:mod:`layercheck.engine.runner`, which runs checks, builds on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import EllipsisType
from typing import Any

from layercheck.parent.inputs import InputSpec
from layercheck.parent.invocation import Invocation
from layercheck.parent.layout import Layout
from layercheck.parent.limits import DEFAULT_TIMEOUT
from layercheck.parent.result import CheckResult, RunReport
from layercheck.parent.spec import TargetSpec
from layercheck.store import folder as store
from layercheck.store.settings import DEFAULT_SECONDS as DEFAULT_EXPLORE_SECONDS
from layercheck.store.settings import Exploration

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
    on: str | None = None  # the device every target is checked on (--on); overrides a spec's on:
    tolerance: Mapping[str, float] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    timeout_total: float | None = None  # the whole run's limit (--timeout-total)
    max_memory: int | None = None  # bytes a worker process may allocate beyond its start (--max-memory)
    started: float | None = None  # time.perf_counter() when the command started: the run's time counts from it
    strict: bool = False  # a check that applies but could not judge the layer fails (--strict)
    interpret: bool = False  # Triton kernels run under Triton's interpreter (--interpret; triton_interpret.py)
    interpret_sizes: str | None = None  # "full" or "reduced": the sizes interpreted kernels run at (--interpret-sizes)
    reference: str | None = None  # --reference TARGET: overrides a spec's reference:
    contained: bool = False  # set in a worker process: prints are captured, a KeyboardInterrupt is the layer's
    # layercheck.explore: failures shrunk, kept and replayed (the command line and the Python API; not the
    # pytest plugin), --explore N (None: the spec's explore:), --explore-time, the store (None: --no-store)
    exploring: bool = False
    explore: int | None = None
    explore_time: float = DEFAULT_EXPLORE_SECONDS
    store: bool = True


@dataclass
class Record:
    """What is known of a target's checks so far: their results, the checks whose failure
    blocks their dependents, and the facts recorded. A worker that takes over a target whose
    worker died starts from the record its parent kept."""

    results: dict[tuple[str, str], CheckResult] = field(default_factory=dict)
    # check id -> what blocks its dependents: "failed" or "ended in an error" for a root cause,
    # "was skipped because ROOT failed" for a check skipped because of one
    blocked: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    kind: str | None = None  # the target's, once its layer is imported


class Listener:
    """Told what a run does as it does it (a worker tells its parent); here it does nothing."""

    def phase(self, text: str) -> None:
        """A step that is not a check begins: importing the layer, constructing it."""

    def planned(self, limits: Sequence[tuple[tuple[str, str], float | None]]) -> None:
        """The target's checks and variants, in the plan's order, with their time limits."""

    def finished(self, key: tuple[str, str], result: CheckResult, record: Record) -> None:
        """A check has its result (already in ``record``)."""


@dataclass(frozen=True)
class TargetPlan:
    """What one target's spec and the command line's options resolve to, made once
    (:meth:`of`) and handed as it is to the runner, a worker process, the pytest plugin and the
    Python API: nothing downstream reads the spec or the options again for what is here.

    The run-wide knobs (time limits, ``--strict``, ``--device``, the memory limit) stay in
    :class:`Options`, which the engine takes beside the plan. Which checks the selection names
    and what the tolerances mean is the catalogue's to say (it may hold plug-ins'), so the engine
    turns ``only``/``skip``/``enable`` and ``tolerances`` into its checks in one place
    (:func:`layercheck.engine.runner.checks_of`)."""

    name: str  # how the report names the target: the spec file, else the layer reference
    layer: str  # the layer reference (file.py:Class, module:Class), relative to base_dir
    inputs: tuple[InputSpec, ...]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    constants: Mapping[str, Any] = field(default_factory=dict)  # plain keyword values of the call
    base_dir: Path = field(default_factory=Path.cwd)
    source: Path | None = None  # the spec file, when the target is one
    seed: int = 0  # the command line's --seed, else the spec's seed:, else 0
    on: str | None = None  # the command line's --on, else the spec's on:, else None (the CPU)
    interpret: bool = False  # --interpret or the spec's interpret: true
    interpret_sizes: str | None = None  # --interpret-sizes, else the spec's interpret_sizes: (Note [interpreted sizes])
    only: tuple[str, ...] = ()  # --check
    skip: tuple[str, ...] = ()  # --skip, then the spec's checks: skip:
    enable: tuple[str, ...] = ()  # --enable, then the spec's checks: enable:
    # the tolerance overrides, each source with where it was given, in the order they apply:
    # the spec's tolerance:, then --tolerance on top
    tolerances: tuple[tuple[str, Mapping[str, float]], ...] = ()
    invocation: Invocation = field(default_factory=lambda: Invocation(None))  # for reproduce commands
    # the reference implementation (--reference, else the spec's reference:), or "autograd"; its
    # constructor arguments (None: the layer's), the parameter map, and the folder it is relative to
    reference: str | None = None
    reference_args: tuple[Any, ...] | None = None
    reference_kwargs: Mapping[str, Any] | None = None
    reference_map: Mapping[str, str] = field(default_factory=dict)
    reference_dir: Path = field(default_factory=Path.cwd)
    exploration: Exploration | None = None  # replaying, exploring, shrinking (layercheck.explore); None: none

    @classmethod
    def of(cls, spec: TargetSpec, options: Options, *, name: str | None = None,
           reference: str | EllipsisType | None = ...) -> TargetPlan:
        """The one place a spec and the command line's options meet. ``name``: the report's
        name for the target (default: the spec's); ``reference``: how a reproduce command names
        the layer, None where only Python can (an instance given to the Python API); default:
        the spec file, else the spec's layer."""
        seed = options.seed if options.seed is not None else (spec.seed if spec.seed is not None else 0)
        on = options.on if options.on is not None else spec.on
        interpret = options.interpret or spec.interpret
        interpret_sizes = options.interpret_sizes or spec.interpret_sizes
        tolerance = dict(options.tolerance)
        given = options.reference if options.reference is not None else spec.reference
        reference_dir = Path.cwd() if options.reference is not None else spec.base_dir
        if spec.source is not None and reference is ...:
            invocation = Invocation(str(spec.source), spec=True, seed=seed, tolerance=tolerance,
                                    devices=options.devices, enable=options.enable, on=options.on,
                                    interpret=options.interpret, interpret_sizes=options.interpret_sizes,
                                    strict=options.strict, reference=options.reference)
            # a spec's own on:, interpret: and reference: are in the spec
        else:
            invocation = Invocation(spec.layer if reference is ... else reference, layouts=spec.inputs,
                                    args=spec.args, kwargs=dict(spec.kwargs), seed=seed, tolerance=tolerance,
                                    devices=options.devices, enable=options.enable, constants=spec.constants,
                                    on=on, interpret=interpret, interpret_sizes=interpret_sizes,
                                    strict=options.strict, reference=given)
        sources = ((f"{spec.name}: tolerance", spec.tolerance),) if spec.tolerance else ()
        exploration = None
        if options.exploring:
            exploration = Exploration(draws=options.explore if options.explore is not None else spec.explore,
                                      seconds=options.explore_time,
                                      store=store.default_folder(spec.source) if options.store else None)
        return cls(name=name or spec.name, layer=spec.layer, inputs=spec.inputs, args=spec.args,
                   kwargs=spec.kwargs, constants=spec.constants, base_dir=spec.base_dir, source=spec.source,
                   seed=seed, on=on, interpret=interpret, interpret_sizes=interpret_sizes, only=options.only,
                   skip=options.skip + spec.skip,
                   # the reference check runs wherever a reference is named (it is opt-in otherwise)
                   enable=options.enable + spec.enable + (("reference",) if given is not None else ()),
                   tolerances=(*sources, *((("--tolerance", options.tolerance),) if options.tolerance else ())),
                   invocation=invocation, reference=given, reference_args=spec.reference_args,
                   reference_kwargs=spec.reference_kwargs, reference_map=spec.reference_map,
                   reference_dir=reference_dir,
                   exploration=exploration)

    @property
    def layouts(self) -> tuple[Layout, ...]:
        """The layout of every tensor input (positional, then keyword)."""
        return tuple(spec.layout for spec in self.inputs)

    def input_dicts(self) -> list[dict[str, Any]]:
        """The inputs as the report lists them."""
        return [spec.to_dict() for spec in self.inputs]


def timeout_message(limit: float, label_: str) -> str:
    return f"timed out after {limit:g} s in {label_} (its time limit of {limit:g} s; does the layer hang?)"


def total_timeout(total: float) -> str:
    return f"the run's time limit of {total:g} s (--timeout-total) ran out"


def limit(own: float | None, options: Options) -> float | None:
    """A check's time limit in seconds: its own, else ``--timeout``; None for none."""
    value = own or options.timeout
    return value if value and value > 0 else None


def error_run(target: TargetPlan, error: str, *, seconds: float = 0.0,
              location: dict[str, Any] | None = None) -> RunReport:
    """The run report of a target that could not be checked: why, and where the user's code
    raised when ``location`` says (:func:`~layercheck.support.raised.raised_at`)."""
    return run_report(target, Record(facts={} if location is None else {"location": location}), (),
                      seconds=seconds, error=error)


def run_report(target: TargetPlan, record: Record, order: Sequence[tuple[str, str]], *,
               seconds: float, error: str | None = None) -> RunReport:
    """The run report of a target from what is known of it: the results ``record`` holds, in
    ``order`` (the plan's; a result it does not name follows), and why the rest is missing
    when it could not be checked to the end."""
    keys = [*order, *(key for key in record.results if key not in order)]
    return RunReport(target=target.name, kind=record.kind, inputs=target.input_dicts(),
                     seed=target.seed, seconds=seconds,
                     results=[record.results[key] for key in keys if key in record.results], error=error,
                     custom_backward=record.facts.get("custom_backward"), location=record.facts.get("location"),
                     interpreter=record.facts.get("interpreter"))

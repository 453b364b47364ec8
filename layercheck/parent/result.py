"""Outcome records and the exit policy. Plain data: reporters read these and nothing else."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from layercheck.reporting import registry as reporters


class Status(str, enum.Enum):
    """The verdict of a check, a run or a report; equal to its value (``Status.FAILED == "failed"``).

    ``passed``; ``failed`` (the layer is wrong); ``skipped`` (the check does not apply, or could
    not judge: the reason is given); ``error`` (the check could not complete, or the layer could
    not be loaded or constructed)."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class ExitCode(enum.IntEnum):
    """The exit policy, written once.

    OK: every check passed or was skipped. INVALID_LAYER: a check failed or errored, or a
    layer could not be loaded or constructed. USAGE: the command line, a spec or a layout is
    invalid, and nothing was checked. INTERRUPTED: the user stopped the run (Ctrl-C), as a
    shell reports a program that SIGINT ended (128 + 2).
    """

    OK = 0
    INVALID_LAYER = 1
    USAGE = 2
    INTERRUPTED = 130


# CheckResult.skip: why a check was skipped, in one word
NOT_APPLICABLE = "not_applicable"
NOT_JUDGED = "not_judged"
BLOCKED = "blocked"


def label(check_id: str, variant: str) -> str:
    """``check[variant]``, or ``check`` for a check without variants: how reports name a result."""
    return f"{check_id}[{variant}]" if variant else check_id


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check (and variant) on one target.

    ``notes`` are facts worth a user's attention that are not failures (a parameter with no
    effect on the output, a broadcast-shaped gradient); every report format shows them.
    ``peak_memory``: the most memory the check used beyond what its process held when it
    began, in bytes (the growth of the resident set, plus an accelerator's allocated memory
    when it used one; memory the process kept from an earlier check and reused does not
    count); None where it was not measured. ``skip``: for a skipped result, why in one word:
    ``"not_applicable"`` (the check does not apply to this layer), ``"not_judged"`` (it applies
    but could not judge it: ``--strict`` fails such a check) or ``"blocked"`` (a check it needs
    failed); None otherwise.
    """

    check: str
    variant: str
    status: Status
    seconds: float
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    peak_memory: int | None = None
    skip: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "variant": self.variant,
            "status": self.status.value,
            "seconds": round(self.seconds, 6),
            "peak_memory": self.peak_memory,
            "skip": self.skip,
            "message": self.message,
            "notes": list(self.notes),
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        return cls(
            check=data["check"],
            variant=data["variant"],
            status=Status(data["status"]),
            seconds=float(data["seconds"]),
            message=data.get("message", ""),
            details=dict(data.get("details") or {}),
            notes=tuple(data.get("notes") or ()),
            peak_memory=None if data.get("peak_memory") is None else int(data["peak_memory"]),
            skip=data.get("skip"),
        )


def count(results: list[CheckResult]) -> dict[str, int]:
    summary = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    for r in results:
        summary[r.status.value] += 1
    return summary


@dataclass(frozen=True)
class RunReport:
    """The outcome of checking one target.

    ``error`` is why the layer could not be loaded or constructed (then there are no results);
    ``location`` is where the layer is defined, ``{"file": ..., "line": ...}``, when known;
    ``interpreter``, where its Triton kernels ran under Triton's interpreter (not compiled):
    ``{"kernels", "sizes" ("reduced" or "given"), "inputs" (as checked), "why"}``; ``explore``, where
    failures were replayed, explored or shrunk (layercheck.explore): the store, the saved failures
    replayed, the draws explored and where they stopped.
    """

    target: str
    kind: str | None
    inputs: list[dict[str, Any]]
    seed: int
    seconds: float
    results: list[CheckResult]
    custom_backward: bool | None = None
    error: str | None = None
    location: dict[str, Any] | None = None
    interpreter: dict[str, Any] | None = None
    explore: dict[str, Any] | None = None

    @property
    def status(self) -> Status:
        if self.error is not None or any(r.status is Status.ERROR for r in self.results):
            return Status.ERROR
        if any(r.status is Status.FAILED for r in self.results):
            return Status.FAILED
        return Status.PASSED

    @property
    def summary(self) -> dict[str, int]:
        """Results by status; a layer that could not be loaded or constructed counts as one error."""
        summary = count(self.results)
        if self.error is not None:
            summary["error"] += 1
        return summary

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "kind": self.kind,
            "custom_backward": self.custom_backward,
            "inputs": self.inputs,
            "status": self.status.value,
            "error": self.error,
            "location": self.location,
            "interpreter": self.interpreter,
            "seed": self.seed,
            "seconds": round(self.seconds, 6),
            "summary": self.summary,
            "results": [r.to_dict() for r in self.results],
            **({"explore": self.explore} if self.explore is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunReport:
        return cls(
            target=data["target"],
            kind=data.get("kind"),
            inputs=list(data.get("inputs") or []),
            seed=int(data.get("seed", 0)),
            seconds=float(data.get("seconds", 0.0)),
            results=[CheckResult.from_dict(r) for r in data.get("results", [])],
            custom_backward=data.get("custom_backward"),
            error=data.get("error"),
            location=data.get("location"),
            interpreter=data.get("interpreter"),
            explore=data.get("explore"),
        )


@dataclass(frozen=True)
class Report:
    """Every run of one invocation, plus the environment it ran in. ``interrupted``: the user
    stopped the run (Ctrl-C); the runs are those that finished, and the one in progress."""

    runs: list[RunReport]
    environment: dict[str, Any]
    version: str
    seconds: float
    interrupted: bool = False
    # layercheck scan: one entry per kind of layer found in the model (layercheck.reporting.scan_tree), else None
    scan: list[dict[str, Any]] | None = None

    SCHEMA = "layercheck.report/1"

    @property
    def results(self) -> list[CheckResult]:
        return [r for run in self.runs for r in run.results]

    @property
    def summary(self) -> dict[str, Any]:
        """Every run's summary added up, and the time the whole invocation took."""
        total: dict[str, Any] = count([])
        for run in self.runs:
            for status, n in run.summary.items():
                total[status] += n
        total["seconds"] = round(self.seconds, 6)
        return total

    @property
    def status(self) -> Status:
        """The whole invocation's verdict, as a run's: ``error`` where a layer could not be checked
        or a check ended in an error, else ``failed`` where a check failed, else ``passed``."""
        statuses = {run.status for run in self.runs}
        for status in (Status.ERROR, Status.FAILED):
            if status in statuses:
                return status
        return Status.PASSED

    @property
    def passed(self) -> bool:
        """Whether every check passed or was skipped (``exit_code`` is 0)."""
        return self.exit_code is ExitCode.OK

    @property
    def exit_code(self) -> ExitCode:
        if self.interrupted:
            return ExitCode.INTERRUPTED
        if all(run.status is Status.PASSED for run in self.runs):
            return ExitCode.OK
        return ExitCode.INVALID_LAYER

    def failures(self) -> list[tuple[RunReport, CheckResult]]:
        """Failed and errored results, in report order."""
        return [
            (run, r)
            for run in self.runs
            for r in run.results
            if r.status in (Status.FAILED, Status.ERROR)
        ]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": self.SCHEMA,
            "layercheck_version": self.version,
            "environment": self.environment,
            "runs": [run.to_dict() for run in self.runs],
            "summary": self.summary,
        }
        if self.interrupted:  # only then: the schema of a complete report is unchanged
            data["interrupted"] = True
        if self.scan is not None:  # a model's scan (layercheck scan, check_model)
            data["scan"] = self.scan
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        if data.get("schema") != cls.SCHEMA:
            raise ValueError(f"not a {cls.SCHEMA} report: schema is {data.get('schema')!r}")
        return cls(
            runs=[RunReport.from_dict(r) for r in data["runs"]],
            environment=dict(data.get("environment") or {}),
            version=data.get("layercheck_version", ""),
            seconds=float(data.get("summary", {}).get("seconds", 0.0)),
            interrupted=bool(data.get("interrupted", False)),
            scan=data.get("scan"),
        )

    def render(self, fmt: str) -> str:
        """This report as text in ``fmt``: any registered format (``layercheck.reporting.formats()``)."""
        return reporters.render(self, fmt)

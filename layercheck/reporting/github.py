"""GitHub Actions workflow commands (SPEC section 8): annotations on the run's summary page
and, where the layer's file and line are known, on the file in the pull request: a failure of
a backward check in a layer with a hand-written backward on that backward, the rest on the
layer's definition (details.result_location).

``::error`` for each failed or errored check and each layer that could not be loaded,
``::notice`` for each note. GitHub shows at most ten annotations of a kind per step; the rest
are counted on a plain line. The summary line closes the output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layercheck.parent.result import Report, Status
from layercheck.reporting.details import interpreted_text, label, plural, result_location, summary_line
from layercheck.reporting.registry import reporter

MAX_ANNOTATIONS = 10
"""Annotations of one kind (error, notice) GitHub Actions shows per step."""


@reporter("github", title="GitHub Actions annotations (::error, ::notice)")
def render(report: Report) -> str:
    errors: list[str] = []
    notices: list[str] = []
    for run in report.runs:
        if run.error is not None:
            errors.append(_command("error", run.location, f"{run.target}: could not be checked", run.error))
        interpreted = interpreted_text(run)
        if interpreted is not None:  # passed on CPU: the compiled kernels were not what ran
            notices.append(_command("notice", run.location, f"{run.target}: {interpreted}",
                                    "its Triton kernels ran under Triton's interpreter on CPU tensors; "
                                    "check them compiled with --on cuda on a GPU"))
        for result in run.results:
            name = f"{run.target}: {label(result)}"
            if result.status in (Status.FAILED, Status.ERROR):
                text = result.message
                if "reproduce" in result.details:
                    text += f"\n\nreproduce: {result.details['reproduce']}"
                where = result_location(run, result)
                title = f"{name} {result.status.value}"
                if where is not None and where.get("name"):
                    title += f" (in {where['name']})"
                errors.append(_command("error", where, title, text))
            notices += [_command("notice", run.location, f"{name} note", note) for note in result.notes]
    lines = _capped(errors, "error") + _capped(notices, "notice")
    return "\n".join([*lines, summary_line(report)]) + "\n"


def _capped(commands: list[str], kind: str) -> list[str]:
    """The first annotations GitHub shows, and a plain line counting the ones it would drop."""
    if len(commands) <= MAX_ANNOTATIONS:
        return commands
    more = plural(len(commands) - MAX_ANNOTATIONS, f"more {kind} annotation")
    closing = (f"layercheck: {more} left out (GitHub Actions shows {MAX_ANNOTATIONS} of a kind per step); "
               "the table, JSON and HTML reports list them all")
    return [*commands[:MAX_ANNOTATIONS], closing]


def _command(kind: str, location: Mapping[str, Any] | None, title: str, message: str) -> str:
    properties: list[tuple[str, object]] = []
    if location and location.get("file"):
        properties.append(("file", location["file"]))
        if location.get("line") is not None:
            properties.append(("line", location["line"]))
    properties.append(("title", f"layercheck {title}"))
    props = ",".join(f"{key}={_escape_property(str(value))}" for key, value in properties)
    return f"::{kind} {props}::{_escape_data(message)}"


def _escape_data(text: str) -> str:
    """A message as GitHub's runner reads it: ``%``, CR and LF percent-encoded."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """A property value: a message's escapes, and ``:`` and ``,``, which end a value."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")

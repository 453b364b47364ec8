"""Plain-text pieces shared by the reporters, the pytest plugin and the API."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from layercheck.parent.result import CheckResult, Report, RunReport, Status
from layercheck.parent.result import label as check_label

# The keys printed last, in this order: what a reader needs after the numbers.
_LAST = ("traceback", "reproduce")

# XML 1.0 forbids most control characters, even escaped, and browsers show them as garbage;
# layer messages can hold them (terminal colour codes in an exception text).
_CONTROL = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

# Why a check was skipped (CheckResult.skip): it does not apply, it could not judge, a
# prerequisite failed.
NOT_APPLICABLE, NOT_JUDGED, BLOCKED = "not_applicable", "not_judged", "blocked"

# What the summary calls each status; only "error" takes a plural.
_WORDS = {"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "error"}


def label(result: CheckResult) -> str:
    """``check[variant]``, or ``check`` for a check without variants."""
    return check_label(result.check, result.variant)


def details_text(details: Mapping[str, Any]) -> str:
    """Details as ``key: value`` lines; multi-line values (tracebacks) indented below their key."""
    keys = [k for k in details if k not in _LAST] + [k for k in _LAST if k in details]
    lines: list[str] = []
    for key in keys:
        value = str(details[key])
        if "\n" in value:
            lines.append(f"{key}:")
            lines.extend(f"  {line}" for line in value.splitlines())
        else:
            lines.append(f"{key}: {value}")
    return "\n".join(lines)


def result_text(result: CheckResult) -> str:
    """The whole story of one result: its message, then its details."""
    body = details_text(result.details)
    return f"{result.message}\n\n{body}" if body else result.message


def input_text(record: Mapping[str, Any]) -> str:
    """An input as ``--layout`` reads it: ``4,3:BC dtype=int64 values=0:10 grad=no``, with its
    keyword first where it is one (``mask=4,10:BT dtype=bool``)."""
    text = f"{','.join(map(str, record.get('size', [])))}:{record.get('format', '')}"
    for key, value in record.items():
        if key == "requires_grad":
            text += "" if value else " grad=no"
        elif key not in ("size", "format", "name"):
            text += f" {key}={value}"
    return f"{record['name']}={text}" if record.get("name") else text


def short(message: str, limit: int) -> str:
    """The message itself where it is one line of at most ``limit`` characters; else its first
    line, cut at the last end of a clause (``; ``, ``. ``) that fits, else at the last word."""
    first = message.strip().split("\n", 1)[0]
    if len(first) <= limit and first == message.strip():
        return message
    if len(first) > limit:
        head = first[: limit - 1]
        end = max(head.rfind("; "), head.rfind(". ") + 1)  # a sentence keeps its full stop
        first = head[:end] if end > limit // 3 else head.rsplit(" ", 1)[0].rstrip(" ,;:")
    return first + " …"


def location_text(location: Mapping[str, Any]) -> str:
    """``path/to/file.py:12`` (or the file alone when the line is unknown)."""
    line = location.get("line")
    return f"{location.get('file', '?')}:{line}" if line is not None else str(location.get("file", "?"))


# Checks whose failure, in a layer with a hand-written backward, points at that backward.
BACKWARD_CHECKS = frozenset({"gradients", "backward_runs", "backward_size", "needs_input_grad", "backward_pure",
                             "grad_output", "gradgrad"})


def result_location(run: RunReport, result: CheckResult) -> Mapping[str, Any] | None:
    """Where a result points in the layer's code: the ``location`` its details give (a check
    that knows the line), else, for a backward check of a layer with a hand-written backward,
    that backward (``run.location["backward"]``), else where the layer is defined."""
    own = result.details.get("location")
    if isinstance(own, Mapping) and own.get("file"):
        return own
    backward = (run.location or {}).get("backward")
    if run.custom_backward and result.check in BACKWARD_CHECKS and isinstance(backward, Mapping) \
            and backward.get("file"):
        return backward
    return run.location


def interpreted_text(run: RunReport) -> str | None:
    """What a report says of a target whose Triton kernels ran under Triton's interpreter (not
    compiled: a CI reader must see it), and at which sizes; None where they were compiled."""
    if run.interpreter is None:
        return None
    checked = " ".join(input_text(i) for i in run.interpreter.get("inputs") or [])
    sizes = f" at {checked} (reduced)" if run.interpreter.get("sizes") == "reduced" else ""
    return f"Triton interpreter, kernels not compiled{sizes}"


def printable(text: str) -> str:
    """``text`` with control characters written visibly (``\\x1b``), safe in XML and HTML."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def plural(n: int, word: str) -> str:
    """``1 error``, ``2 errors``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def counts_text(summary: Mapping[str, int], *, notes: int = 0, nonzero: bool = False, not_judged: int = 0) -> str:
    """``12 passed, 0 failed, 3 skipped (1 not judged), 1 error, 2 notes``; notes and the skips
    that could not judge only when there are any, and with ``nonzero`` only the statuses that
    occurred."""
    parts = [plural(n, _WORDS[status]) if status == "error" else f"{n} {_WORDS[status]}"
             for status, n in summary.items() if status in _WORDS and (n or not nonzero)]
    if not_judged:
        parts = [f"{part} ({not_judged} not judged)" if part.endswith(" skipped") else part for part in parts]
    if notes:
        parts.append(plural(notes, "note"))
    return ", ".join(parts)


def labelled_notes(results: Iterable[CheckResult]) -> list[tuple[str, str]]:
    """``(check[variant], note)`` for every note of these results, in order."""
    return [(label(r), note) for r in results for note in r.notes]


def skipped_as(results: Iterable[CheckResult], kind: str) -> list[CheckResult]:
    """The skipped results whose ``skip`` is ``kind`` (``"not_applicable"``, ``"not_judged"``,
    ``"blocked"``)."""
    return [r for r in results if r.status is Status.SKIPPED and r.skip == kind]


def summary_line(report: Report) -> str:
    """``N passed, N failed, N skipped, N errors in T s`` (MATLAB's checkLayer style), with
    ``(N not judged)`` after the skips when checks could not judge, and ``N notes`` before the
    time when results carry notes."""
    notes = len(labelled_notes(report.results))
    not_judged = len(skipped_as(report.results, NOT_JUDGED))
    return f"{counts_text(report.summary, notes=notes, not_judged=not_judged)} in {report.seconds:.2f} s"

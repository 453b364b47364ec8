"""Plain-text pieces shared by the reporters, the pytest plugin and the API."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from layercheck.result import CheckResult, Report
from layercheck.result import label as check_label

# The keys printed last, in this order: what a reader needs after the numbers.
_LAST = ("traceback", "reproduce")

# XML 1.0 forbids most control characters, even escaped, and browsers show them as garbage;
# layer messages can hold them (terminal colour codes in an exception text).
_CONTROL = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

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


def location_text(location: Mapping[str, Any]) -> str:
    """``path/to/file.py:12`` (or the file alone when the line is unknown)."""
    line = location.get("line")
    return f"{location.get('file', '?')}:{line}" if line is not None else str(location.get("file", "?"))


def printable(text: str) -> str:
    """``text`` with control characters written visibly (``\\x1b``), safe in XML and HTML."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def plural(n: int, word: str) -> str:
    """``1 error``, ``2 errors``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def counts_text(summary: Mapping[str, int], *, notes: int = 0, nonzero: bool = False) -> str:
    """``12 passed, 0 failed, 3 skipped, 1 error, 2 notes``; notes only when there are any,
    and with ``nonzero`` only the statuses that occurred."""
    parts = [plural(n, _WORDS[status]) if status == "error" else f"{n} {_WORDS[status]}"
             for status, n in summary.items() if status in _WORDS and (n or not nonzero)]
    if notes:
        parts.append(plural(notes, "note"))
    return ", ".join(parts)


def labelled_notes(results: Iterable[CheckResult]) -> list[tuple[str, str]]:
    """``(check[variant], note)`` for every note of these results, in order."""
    return [(label(r), note) for r in results for note in r.notes]


def summary_line(report: Report) -> str:
    """``N passed, N failed, N skipped, N errors in T s`` (MATLAB's checkLayer style), with
    ``N notes`` before the time when results carry notes."""
    notes = len(labelled_notes(report.results))
    return f"{counts_text(report.summary, notes=notes)} in {report.seconds:.2f} s"

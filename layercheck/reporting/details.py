"""Plain-text pieces shared by the JUnit and Markdown reports, the pytest plugin and the API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layercheck.result import CheckResult

# The keys printed last, in this order: what a reader needs after the numbers.
_LAST = ("traceback", "reproduce")


def label(result: CheckResult) -> str:
    """``check[variant]``, or ``check`` for a check without variants."""
    return f"{result.check}[{result.variant}]" if result.variant else result.check


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

"""The user's frames as text: what the console, the pytest plugin and the API show under an
error. Plain data (the records ``raised.raised_at`` makes), no torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def trace_text(where: Mapping[str, Any] | None, indent: str = "  ") -> str:
    """``File "x.py", line 7, in make_weight`` and its code for every frame of the user's, then
    how many library frames were folded; empty where nothing is known."""
    if not where or not where.get("frames"):
        return ""
    lines: list[str] = []
    for frame in where["frames"]:
        lines.append(f'{indent}File "{frame.get("file")}", line {frame.get("line")}, in {frame.get("name")}')
        if frame.get("code"):
            lines.append(f"{indent}  {frame['code']}")
    folded = int(where.get("folded") or 0)
    if folded:
        lines.append(f"{indent}({folded} library frame{'s' if folded != 1 else ''} folded: torch, layercheck, Python)")
    return "\n".join(lines)

"""The JSON report (SPEC section 8, schema ``layercheck.report/1``)."""

from __future__ import annotations

import json
import math
from typing import Any

from layercheck.parent.result import Report
from layercheck.reporting.registry import reporter


@reporter("json", title="versioned schema layercheck.report/1, for programs", suffix=".json")
def render(report: Report) -> str:
    return json.dumps(_finite(report.to_dict()), indent=2) + "\n"


def load(text: str) -> Report:
    """Read a JSON report back into a Report."""
    return Report.from_dict(json.loads(text))


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: write them as strings rather than emit invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None or isinstance(value, float):
        return value
    return str(value)

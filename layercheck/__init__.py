"""layercheck: validate custom PyTorch layers, like MATLAB's checkLayer and further."""

from __future__ import annotations

__version__ = "0.1.0"

from layercheck.errors import CheckFailed, CheckSkipped, LayoutError, SpecError, UsageError
from layercheck.layout import Layout
from layercheck.registry import CheckInfo, catalogue, check
from layercheck.result import CheckResult, ExitCode, Report, RunReport, Status

__all__ = [
    "CheckFailed",
    "CheckInfo",
    "CheckResult",
    "CheckSkipped",
    "ExitCode",
    "Layout",
    "LayoutError",
    "Report",
    "RunReport",
    "SpecError",
    "Status",
    "UsageError",
    "__version__",
    "catalogue",
    "check",
]

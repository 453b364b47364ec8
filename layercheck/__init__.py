"""layercheck: validate custom PyTorch layers, like MATLAB's checkLayer and further."""

from __future__ import annotations

from typing import TYPE_CHECKING

from layercheck import _moved
from layercheck._version import __version__
from layercheck.parent.errors import (
    CheckFailed,
    CheckSkipped,
    LayoutError,
    SpecError,
    UsageError,
)
from layercheck.parent.layout import Layout
from layercheck.parent.registry import CheckInfo, catalogue, check
from layercheck.parent.result import CheckResult, ExitCode, Report, RunReport, Status
from layercheck.reporting.registry import reporter

if TYPE_CHECKING:
    from layercheck.engine.api import assert_layer_valid, assert_model_valid, check_layer, check_model

_moved.install()  # the old module paths (layercheck.runner, ...) for a release, with a warning; old path: kept

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
    "assert_layer_valid",
    "assert_model_valid",
    "catalogue",
    "check",
    "check_layer",
    "check_model",
    "reporter",
]


def __getattr__(name: str) -> object:
    # The API imports torch; load it on first use so that `import layercheck` (and the
    # pytest plugin, loaded by every pytest run where layercheck is installed) stays light.
    if name in ("check_layer", "assert_layer_valid", "check_model", "assert_model_valid"):
        from layercheck.engine import api

        return getattr(api, name)
    raise AttributeError(f"module 'layercheck' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The public names only: not ``annotations`` or ``TYPE_CHECKING``, nor the submodules that
    # importing these names made attributes of the package (``layercheck.parent.result``, ...).
    return sorted(__all__)

"""The check SDK: everything a check imports, built-in or third-party.

A check is a function decorated with :func:`check` in a module under ``layercheck/checks/``
or in a package registered through the ``layercheck.checks`` entry-point group::

    from layercheck.sdk import FORWARD, CheckFailed, Context, Tolerance, assert_close, check, ...

It receives a :class:`Context` (fresh layers, the shared runs it declared, its tolerances),
returns a message when the layer passes, raises :class:`CheckFailed` when the layer is wrong,
:class:`CheckSkipped` when the check does not apply and :class:`CheckError` when the check
itself cannot complete. Only the runner turns these into results.

What is here is stable: the names in :data:`STABLE` (SDK version :data:`SDK_VERSION`), which
``__all__`` lists. A check written against them keeps working in every later release of the same
SDK version; a change that breaks one raises SDK_VERSION and is said in the CHANGELOG. What the
built-in checks share beyond them (the gradient check's floors and rounding allowances, the shared
runs' internals) is :mod:`layercheck._sdk_internal`, which may change in any release. Imported
from here, one of those still works until the next release, with a DeprecationWarning.
"""

from __future__ import annotations

import warnings
from typing import Any

from layercheck.parent.errors import CheckError, CheckFailed, CheckSkipped, LayerRaised, layer_failure
from layercheck.parent.layout import Layout
from layercheck.parent.registry import SharedRun, Tolerance, check, modules_only, needs_batch
from layercheck.support.accelerators import accelerators
from layercheck.support.compare import (
    DTYPES,
    EXACT,
    Allowance,
    all_finite,
    assert_close,
    dtype_name,
    identical,
    largest,
    mismatch,
    nonfinite,
    relative_difference,
)
from layercheck.support.context import Context
from layercheck.support.runs import FORWARD, PREDICT, forward_run, predict_run, reference_forward, reference_predict
from layercheck.target.seeding import seeded
from layercheck.target.subject import Mode, Subject
from layercheck.target.tensors import Outputs

__all__ = [
    "DTYPES",
    "EXACT",
    "FORWARD",
    "PREDICT",
    "Allowance",
    "CheckError",
    "CheckFailed",
    "CheckSkipped",
    "Context",
    "LayerRaised",
    "Layout",
    "Mode",
    "Outputs",
    "SharedRun",
    "Subject",
    "Tolerance",
    "accelerators",
    "all_finite",
    "assert_close",
    "check",
    "dtype_name",
    "forward_run",
    "identical",
    "largest",
    "layer_failure",
    "mismatch",
    "modules_only",
    "needs_batch",
    "nonfinite",
    "predict_run",
    "reference_forward",
    "reference_predict",
    "relative_difference",
    "seeded",
]

SDK_VERSION = 1

# The stable surface (docs/howto/extending.md lists it; tests/test_sdk.py holds the two equal).
STABLE = frozenset({
    # registering a check
    "check", "Tolerance", "SharedRun", "PREDICT", "FORWARD", "modules_only", "needs_batch",
    # what a check raises
    "CheckFailed", "CheckSkipped", "CheckError", "LayerRaised", "layer_failure",
    # what a check receives and calls
    "Context", "Subject", "Layout", "Mode", "Outputs",
    "predict_run", "forward_run", "reference_predict", "reference_forward", "seeded", "accelerators",
    # comparing tensors
    "assert_close", "mismatch", "Allowance", "EXACT", "relative_difference", "largest", "identical",
    "all_finite", "nonfinite", "dtype_name", "DTYPES",
})


def __getattr__(name: str) -> Any:
    """An internal name asked for here (layercheck.sdk exported them until now): still handed out,
    until the next release, with a DeprecationWarning that says where it lives and that it is not stable."""
    from layercheck import _sdk_internal

    if name not in _sdk_internal.__all__:
        raise AttributeError(f"module 'layercheck.sdk' has no attribute {name!r}")
    warnings.warn(f"layercheck.sdk.{name} is internal, not part of the stable SDK (layercheck.sdk.STABLE, "
                  f"listed in docs/howto/extending.md): importing it from layercheck.sdk is deprecated and stops "
                  f"working in the next release. It lives in layercheck._sdk_internal, which may change in any "
                  f"release (pin layercheck's version if you import it from there).", DeprecationWarning,
                  stacklevel=2)
    return getattr(_sdk_internal, name)

"""The check SDK: everything a check imports, built-in or third-party.

A check is a function decorated with :func:`check` in a module under ``layercheck/checks/``
or in a package registered through the ``layercheck.checks`` entry-point group::

    from layercheck.sdk import FORWARD, CheckFailed, Context, Tolerance, assert_close, check, ...

It receives a :class:`Context` (fresh layers, the shared runs it declared, its tolerances),
returns a message when the layer passes, raises :class:`CheckFailed` when the layer is wrong,
:class:`CheckSkipped` when the check does not apply and :class:`CheckError` when the check
itself cannot complete. Only the runner turns these into results.

What is stable: the names in :data:`STABLE` (SDK version :data:`SDK_VERSION`). A check written
against them keeps working in every later release of the same SDK version; a change that breaks
one raises SDK_VERSION and is said in the CHANGELOG. The other names here serve the built-in
checks (the gradient check's floors and rounding allowances, its shared runs' internals) and may
change in any release: a plug-in that imports them pins layercheck's version.
"""

from __future__ import annotations

from layercheck.accelerators import accelerators, full_float32
from layercheck.calibration import SOURCE as FLOOR_SOURCE
from layercheck.calibration import InputPath, Point, Spread, gradient_norm_floor, path_allowance, run_along, spread
from layercheck.compare import (
    DTYPES,
    EXACT,
    Allowance,
    AllowanceFor,
    all_finite,
    assert_close,
    describe_shapes,
    dtype_name,
    identical,
    largest,
    mismatch,
    nonfinite,
    ratio,
    relative_difference,
    rounding_allowance,
    scaled_allowance,
    shared_nonfinite_zeroed,
)
from layercheck.context import Context
from layercheck.errors import (
    CheckError,
    CheckFailed,
    CheckSkipped,
    LayerRaised,
    failing,
    layer_failure,
)
from layercheck.frames import chain, is_user_file, user_frame, user_trace
from layercheck.layout import Layout
from layercheck.registry import (
    CheckInfo,
    SharedRun,
    Tolerance,
    check,
    modules_only,
    needs_batch,
    selector,
)
from layercheck.result import label
from layercheck.runs import (
    FORWARD,
    PREDICT,
    REQUIRES_GRAD_SWITCHED,
    Run,
    assert_same_unless_random,
    comparable,
    cotangents,
    forward_is_random,
    forward_run,
    input_change,
    layer_is_float32,
    output_names,
    path_tolerances,
    predict_is_random,
    predict_run,
    present_grads,
    reference_forward,
    reference_predict,
    rounding_allowance_of,
    rounding_tolerances,
    share_predict,
)
from layercheck.seeding import seeded
from layercheck.subject import Mode, Subject, Target
from layercheck.tensors import Outputs, custom_functions, tensors_in

__all__ = [
    "DTYPES",
    "EXACT",
    "FLOOR_SOURCE",
    "FORWARD",
    "PREDICT",
    "REQUIRES_GRAD_SWITCHED",
    "Allowance",
    "AllowanceFor",
    "CheckError",
    "CheckFailed",
    "CheckInfo",
    "CheckSkipped",
    "Context",
    "InputPath",
    "LayerRaised",
    "Layout",
    "Mode",
    "Outputs",
    "Point",
    "Run",
    "SharedRun",
    "Spread",
    "Subject",
    "Target",
    "Tolerance",
    "accelerators",
    "all_finite",
    "assert_close",
    "assert_same_unless_random",
    "chain",
    "check",
    "comparable",
    "cotangents",
    "custom_functions",
    "describe_shapes",
    "dtype_name",
    "failing",
    "forward_is_random",
    "forward_run",
    "full_float32",
    "gradient_norm_floor",
    "identical",
    "input_change",
    "is_user_file",
    "label",
    "largest",
    "layer_failure",
    "layer_is_float32",
    "mismatch",
    "modules_only",
    "needs_batch",
    "nonfinite",
    "output_names",
    "path_allowance",
    "path_tolerances",
    "predict_is_random",
    "predict_run",
    "present_grads",
    "ratio",
    "reference_forward",
    "reference_predict",
    "relative_difference",
    "rounding_allowance",
    "rounding_allowance_of",
    "rounding_tolerances",
    "run_along",
    "scaled_allowance",
    "seeded",
    "selector",
    "share_predict",
    "shared_nonfinite_zeroed",
    "spread",
    "tensors_in",
    "user_frame",
    "user_trace",
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

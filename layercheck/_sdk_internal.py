"""What the built-in checks share beyond the stable SDK: the gradient check's rounding floors
and allowances, the internals of the shared runs, the helpers that word a failure.

A built-in check imports the stable names from :mod:`layercheck.sdk` and these from here. They
may change in any release, which is why they sit behind an underscore (pytest's ``_pytest``
behind ``pytest``): a plug-in that imports one pins layercheck's version. Until the next
release ``layercheck.sdk`` still hands them out, with a DeprecationWarning naming this module.

This is a module of its own, not one under ``checks/``: every module there is a check module
(the catalogue imports each one, and no check module imports another), and these names are not
checks; it sits beside :mod:`layercheck.sdk` in the layer of support for checks.
"""

from __future__ import annotations

from layercheck.parent.errors import failing
from layercheck.parent.registry import CheckInfo, selector
from layercheck.parent.result import label
from layercheck.support.accelerators import full_float32
from layercheck.support.calibration import (
    SOURCE as FLOOR_SOURCE,
)
from layercheck.support.calibration import (
    InputPath,
    Point,
    Spread,
    gradient_norm_floor,
    path_allowance,
    run_along,
    spread,
)
from layercheck.support.compare import (
    AllowanceFor,
    describe_shapes,
    ratio,
    rounding_allowance,
    scaled_allowance,
    shared_nonfinite_zeroed,
)
from layercheck.support.runs import (
    FIRST_BATCH,
    REQUIRES_GRAD_SWITCHED,
    FirstBatch,
    Run,
    assert_same_unless_random,
    comparable,
    cotangents,
    first_batch_checkpoint,
    forward_is_random,
    hand_over_first_batch,
    input_change,
    layer_is_float32,
    output_names,
    path_tolerances,
    predict_is_random,
    present_grads,
    rounding_allowance_of,
    rounding_tolerances,
    share_predict,
)
from layercheck.target.building import initialize
from layercheck.target.frames import chain, is_user_file, user_frame, user_trace
from layercheck.target.subject import Checkpoint, Target
from layercheck.target.tensors import custom_functions, tensors_in

__all__ = [
    "FIRST_BATCH",
    "FLOOR_SOURCE",
    "REQUIRES_GRAD_SWITCHED",
    "AllowanceFor",
    "CheckInfo",
    "Checkpoint",
    "FirstBatch",
    "InputPath",
    "Point",
    "Run",
    "Spread",
    "Target",
    "assert_same_unless_random",
    "chain",
    "comparable",
    "cotangents",
    "custom_functions",
    "describe_shapes",
    "failing",
    "first_batch_checkpoint",
    "forward_is_random",
    "full_float32",
    "gradient_norm_floor",
    "hand_over_first_batch",
    "initialize",
    "input_change",
    "is_user_file",
    "label",
    "layer_is_float32",
    "output_names",
    "path_allowance",
    "path_tolerances",
    "predict_is_random",
    "present_grads",
    "ratio",
    "rounding_allowance",
    "rounding_allowance_of",
    "rounding_tolerances",
    "run_along",
    "scaled_allowance",
    "selector",
    "share_predict",
    "shared_nonfinite_zeroed",
    "spread",
    "tensors_in",
    "user_frame",
    "user_trace",
]

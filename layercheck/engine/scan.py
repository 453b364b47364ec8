"""``check_model``: a model scanned in this process (the Python API), each kind of layer checked
as ``check_layer`` checks an instance, on the inputs the model gave it."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from layercheck._version import __version__
from layercheck.engine import runner
from layercheck.parent import limits
from layercheck.parent.inputs import InputSpec, parse_input
from layercheck.parent.layout import Layout
from layercheck.parent.plan import TargetPlan
from layercheck.parent.result import Report
from layercheck.parent.spec import load_spec, parse_tolerance
from layercheck.reporting.scan_tree import arrange
from layercheck.scan.model import drawn_inputs, guessed_labels, model_dims, scan_to_folder
from layercheck.target import prepare


def check_model(model: nn.Module, *inputs: Any, include: Sequence[str] = (), exclude: Sequence[str] = (),
                write_specs: str | Path | None = None, seed: int = 0, checks: Sequence[str] = (),
                skip: Sequence[str] = (), enable: Sequence[str] = (), tolerance: Mapping[str, float] | None = None,
                timeout: float = limits.DEFAULT_TIMEOUT, strict: bool = False, **kw_inputs: Any) -> Report:
    """Check every custom layer of ``model`` at the inputs one sample forward on ``inputs`` (and
    the keyword inputs ``kw_inputs``) gives it; the report has the ``scan`` tree.

    The inputs are tensors (the first dimension of each taken as the batch), or all layouts
    (``"2,16:BT dtype=int64 values=0:100"``, ``Layout``, ``InputSpec``: drawn, and their B and T
    followed). ``include``/``exclude``: class or path patterns (``--include``/``--exclude``);
    ``write_specs``: a folder to keep the specs in (``--write-specs``); ``checks``, ``skip``,
    ``enable``, ``tolerance``, ``timeout``, ``strict`` as for ``check_layer``. The model is
    left as it was (modes, parameters, buffers, hooks). A forward that raises raises
    ``ForwardRaised`` (a LoadError) naming the module path."""
    start = time.perf_counter()
    if not isinstance(model, nn.Module):
        raise TypeError(f"check_model takes an nn.Module instance, not {type(model).__name__}")
    options = runner.Options(seed=seed, only=tuple(checks), skip=tuple(skip), enable=tuple(enable),
                             tolerance=parse_tolerance(dict(tolerance or {}), "tolerance"), timeout=timeout,
                             strict=strict)
    runner.check_options(options)
    values = [*inputs, *kw_inputs.values()]
    specs: list[InputSpec] | None = None
    if values and all(isinstance(v, (str, Layout, InputSpec)) for v in values):
        specs = [_input(v) for v in inputs] + [_input(v, name=k) for k, v in kw_inputs.items()]
        args, kwargs = drawn_inputs(specs, seed)
    elif any(isinstance(v, (str, Layout, InputSpec)) for v in values):
        raise TypeError("check_model takes tensors, or layouts for every input, not both")
    else:
        args, kwargs = list(inputs), dict(kw_inputs)
    dims = model_dims(specs, args, kwargs)
    with contextlib.ExitStack() as stack:
        folder = Path(write_specs) if write_specs is not None else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="layercheck-scan-")))
        survey, entries = scan_to_folder(model, args, kwargs, folder, dims=dims, include=include,
                                         exclude=exclude, guessed=guessed_labels(specs), seed=seed)
        runs = []
        for kind, entry in zip(survey.kinds, entries):
            if entry.spec is None:
                continue
            plan = TargetPlan.of(load_spec(Path(entry.spec)), options)
            target = prepare.target_of(kind.replay, plan)
            resolved = runner.checks_of(plan)
            runs.append(runner.run_target(target, resolved.planned, options=options, tolerances=resolved.tolerances))
    report = Report(runs=runs, environment=runner.environment(), version=__version__,
                    seconds=time.perf_counter() - start)
    return arrange(report, entries)


def _input(value: str | Layout | InputSpec, name: str | None = None) -> InputSpec:
    if isinstance(value, InputSpec):
        spec = value
    elif isinstance(value, Layout):
        spec = InputSpec(value)
    else:
        spec = parse_input(value, where="input")
    return spec if name is None else InputSpec(spec.layout, spec.dtype, spec.values, spec.requires_grad, name)

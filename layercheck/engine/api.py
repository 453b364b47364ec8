"""The Python API (SPEC section 9): check a layer in-process, or assert that it is valid.

    from layercheck import Layout, assert_layer_valid
    assert_layer_valid(MyLayer(), Layout.parse("8,16:BC"))

is a whole test in a layer author's own pytest suite.
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from layercheck._version import __version__
from layercheck.engine import runner
from layercheck.parent import limits
from layercheck.parent.errors import LoadError, UsageError
from layercheck.parent.inputs import InputSpec, looks_like_input, parse_input
from layercheck.parent.invocation import class_reference
from layercheck.parent.layout import Layout
from layercheck.parent.plan import TargetPlan
from layercheck.parent.result import Report, Status
from layercheck.parent.spec import INTERPRET_SIZES, TargetSpec, parse_device, parse_tolerance
from layercheck.parent.traces import trace_text
from layercheck.reporting.details import label
from layercheck.store import keeping
from layercheck.store.settings import DEFAULT_SECONDS as DEFAULT_EXPLORE_SECONDS
from layercheck.target import prepare
from layercheck.target.subject import Target, display_name, kind_of


def check_layer(
    layer: nn.Module | type,
    *layouts: Layout | InputSpec | str,
    seed: int = 0,
    checks: Sequence[str] = (),
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    enable: Sequence[str] = (),
    tolerance: Mapping[str, float] | None = None,
    timeout: float = limits.DEFAULT_TIMEOUT,
    devices: Sequence[str] = (),
    on: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    call_kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
    strict: bool = False,
    interpret: bool | None = None,
    interpret_sizes: str | None = None,
    reference: Any = None,
    reference_args: Sequence[Any] | None = None,
    reference_kwargs: Mapping[str, Any] | None = None,
    reference_map: Mapping[str, str] | None = None,
    explore: int = 0,
    explore_time: float = DEFAULT_EXPLORE_SECONDS,
    store: str | Path | None = None,
    values: Sequence[Any] | None = None,
) -> Report:
    """Run the checks on one layer and return the report (``report.render("junit")`` etc.).

    ``layer`` is an ``nn.Module`` instance (checked on deep copies: the instance itself is
    never called or changed), an ``nn.Module`` class (built with ``args``/``kwargs``) or a
    ``torch.autograd.Function`` subclass. ``layouts`` give one positional input each, as
    ``Layout``, ``InputSpec`` or ``"SIZES:FORMAT"`` with qualifiers (``"8,32:BT dtype=int64
    values=0:1000"``, as ``--layout`` reads them). ``call_kwargs`` are keyword arguments of the
    layer's call: a string that starts with a layout is a generated tensor input, anything else
    is passed as is (``{"key_padding_mask": "4,10:BT dtype=bool", "need_weights": False}``).
    ``checks`` (alias ``only``), ``skip`` and ``enable`` select checks by
    id, as ``--check``, ``--skip`` and ``--enable`` do; ``tolerance`` overrides per dtype
    (``{"float32": 1e-3}``); ``devices`` are the accelerators the ``device`` check compares
    with the CPU (``--device``), ``on`` the device every check runs the layer on (``--on``:
    ``"cuda"`` for a layer that only runs on a GPU); ``strict`` fails a check that applies but
    could not judge the layer (``--strict``). ``interpret``: run the layer's Triton kernels
    under Triton's interpreter, on CPU tensors (``--interpret``); by default (None) they do where
    Triton is imported and there is no GPU, and ``False`` leaves them compiled; ``interpret_sizes``
    ``"full"`` checks interpreted kernels at the layouts given, not reduced ones
    (``--interpret-sizes``). ``reference``: the implementation the
    layer must match (the ``reference`` check, ``--reference``): a class, an instance, an
    ``autograd.Function``, a function, ``"file.py:Class"`` or ``"autograd"``; built with
    ``reference_args``/``reference_kwargs`` (default: the layer's) and given the layer's
    parameter values, renamed by ``reference_map`` (``{"weight": "scale"}``). Invalid arguments
    raise ``TypeError`` or a ``UsageError`` (a ``ValueError``) before anything runs; a layer that
    cannot be constructed, or a reference that cannot take its parameter values, gives a report
    whose run has an ``error``. Failures are shrunk to their smallest failing input
    (the message shows it; ``details["shrunk"]`` holds it); ``explore``: after the default draws pass, up to this many
    more draws searching for a failure (``--explore``), within ``explore_time`` seconds; ``store``:
    a failure store folder (``.layercheck``) to replay saved failures from first and keep new ones
    in (the command line's default; None here: none); ``values``: the inputs' values themselves,
    one nested list or tensor per input at its layout's size, instead of drawn ones (a kept
    failure replayed: the tests ``--emit-test`` writes).
    """
    start = time.perf_counter()
    if isinstance(checks, str) or isinstance(only, str) or isinstance(skip, str) or isinstance(enable, str):
        raise TypeError("checks, only, skip and enable take a sequence of check ids, e.g. checks=['gradients']")
    options = runner.Options(seed=seed, only=tuple(checks) + tuple(only), skip=tuple(skip), enable=tuple(enable),
                             devices=tuple(devices), tolerance=parse_tolerance(dict(tolerance or {}), "tolerance"),
                             timeout=timeout, on=None if on is None else parse_device(on, "on"), strict=strict)
    runner.check_devices(options.devices)
    if options.on is not None:
        runner.check_devices([options.on], "on=")
    if interpret_sizes not in (None, *INTERPRET_SIZES):
        raise UsageError(f"interpret_sizes={interpret_sizes!r}: expected one of {', '.join(INTERPRET_SIZES)}")
    if isinstance(explore, bool) or not isinstance(explore, int) or explore < 0:
        raise TypeError(f"explore must be a number of draws (0 or more), not {explore!r}")
    options = replace(options, interpret=bool(interpret), interpret_sizes=interpret_sizes, exploring=True,
                      explore=explore, explore_time=explore_time, store=store is not None)
    if reference is not None:  # the reference check runs wherever a reference is named
        options = replace(options, enable=(*options.enable, "reference"))
    target, plan = _target(layer, layouts, options=options, args=args, kwargs=kwargs, call_kwargs=call_kwargs,
                           name=name)
    if reference is not None:
        target.reference = _reference(reference, reference_args, reference_kwargs, reference_map)
    elif reference_args is not None or reference_kwargs is not None or reference_map:
        raise TypeError("reference_args, reference_kwargs and reference_map describe a reference: give reference= too")
    if store is not None and plan.exploration is not None:
        plan = replace(plan, exploration=replace(plan.exploration, store=Path(store)))
    (plan,), said = keeping.prepare([plan])
    for line in said:
        warnings.warn(line, stacklevel=2)
    if values is not None:
        target.given_values(_values(values, target))
    resolved = runner.checks_of(plan)
    try:
        with prepare.interpreting(target, interpret, interpret_sizes) as checked:
            run = runner.run_target(checked, resolved.planned, options=options, tolerances=resolved.tolerances,
                                    exploration=plan.exploration)
    except LoadError as exc:  # the interpreter asked for, and Triton cannot be imported
        raise UsageError(f"interpret=True: {exc}") from None
    for line in keeping.keep([plan], [run]):
        warnings.warn(line, stacklevel=2)
    return Report(runs=[run], environment=runner.environment(), version=__version__,
                  seconds=time.perf_counter() - start)


def assert_layer_valid(layer: nn.Module | type, *layouts: Layout | str, **options: Any) -> Report:
    """Like :func:`check_layer`, but raise ``AssertionError`` listing every failed or errored
    check with its message (and how to reproduce it) unless the layer passes; returns the report."""
    __tracebackhide__ = True  # pytest shows the test's line, not this frame
    report = check_layer(layer, *layouts, **options)
    if report.passed:
        return report
    raise AssertionError(failure_message(report))


def check_model(model: nn.Module, *inputs: Any, **options_and_inputs: Any) -> Report:
    """Check every custom layer of a model at the inputs one sample forward gives it: see
    :func:`layercheck.engine.scan.check_model`."""
    from layercheck.engine.scan import check_model as scan

    return scan(model, *inputs, **options_and_inputs)


def assert_model_valid(model: nn.Module, *inputs: Any, **options_and_inputs: Any) -> Report:
    """Like :func:`check_model`, but raise ``AssertionError`` naming every failed layer (its path)
    and check unless every layer passes; returns the report."""
    __tracebackhide__ = True
    report = check_model(model, *inputs, **options_and_inputs)
    if report.passed:
        return report
    from layercheck.reporting.scan_tree import label as layer_label

    failed = [f"{layer_label(row)}: {', '.join(row['failed']) or row['status']}" for row in report.scan or []
              if row["status"] in ("failed", "error")]
    raise AssertionError("layers failed: " + "; ".join(failed) + "\n" + failure_message(report))


def failure_message(report: Report) -> str:
    """What went wrong in a report, one block per problem: for an assertion or a test failure.
    The first line names the checks (pytest's short summary shows only its beginning)."""
    lines: list[str] = []
    for run in report.runs:
        if run.error is not None:
            lines.append(f"{run.target} could not be checked: {run.error}")
            trace = trace_text(run.location)  # where the constructor raised
            if trace:
                lines.append(trace)
    problems = report.failures()
    if problems:
        failed = [label(r) for _, r in problems if r.status is Status.FAILED]
        errored = [label(r) for _, r in problems if r.status is Status.ERROR]
        said = [f"{', '.join(failed)} failed"] if failed else []
        said += [f"{', '.join(errored)} ended in an error"] if errored else []
        whose = f" ({report.runs[0].target} is invalid)" if len(report.runs) == 1 else ""
        lines.insert(0, "; ".join(said) + whose)
    for _, result in problems:
        lines.append(f"  {label(result)} {result.status.value}: {result.message}")
        trace = trace_text(result.details.get("location"), indent="    ")  # where the layer raised
        if trace:
            lines.append(trace)
        if "reproduce" in result.details:
            lines.append(f"    reproduce: {result.details['reproduce']}")
    return "\n".join(lines)


def _target(layer: nn.Module | type, layouts: Sequence[Layout | InputSpec | str], *, options: runner.Options,
            args: Sequence[Any], kwargs: Mapping[str, Any] | None, call_kwargs: Mapping[str, Any] | None,
            name: str | None) -> tuple[Target, TargetPlan]:
    """The layer's target and its plan, as the command line would resolve them."""
    seed = options.seed
    if isinstance(layer, nn.Module):
        if args or kwargs:
            raise TypeError("args and kwargs build a layer from its class; an instance is already built")
    elif kind_of(layer) is None:
        kind = "class" if inspect.isclass(layer) else type(layer).__name__
        raise TypeError(f"check_layer takes an nn.Module instance, an nn.Module or torch.autograd.Function "
                        f"subclass, a custom operator or a function, not {getattr(layer, '__qualname__', layer)!r} "
                        f"({kind})")
    elif kind_of(layer) != "module" and (args or kwargs):
        raise TypeError("args and kwargs are constructor arguments: only a module class is constructed "
                        "(give an operation's other arguments as inputs or call_kwargs)")
    if not layouts:
        raise TypeError("check_layer needs one layout per input, e.g. check_layer(layer, '8,16:BC')")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TypeError(f"seed must be a non-negative integer, not {seed!r}")
    parsed = [_input(item) for item in layouts]
    constants = {}
    for key, value in (call_kwargs or {}).items():
        if isinstance(value, InputSpec) or (isinstance(value, str) and looks_like_input(value)):
            parsed.append(replace(_input(value), name=key))
        else:
            constants[key] = value
    cls = type(layer) if isinstance(layer, nn.Module) else layer
    name = name or display_name(cls)
    # An instance exists only in this process: its failures are reproduced in Python.
    reference = None if isinstance(layer, nn.Module) else class_reference(getattr(cls, "_init_fn", cls))
    # as the command line would name it; the layer itself is given, never imported from this reference
    spec = TargetSpec(layer=reference or name, inputs=tuple(parsed), args=tuple(args), kwargs=dict(kwargs or {}),
                      constants=constants)
    plan = TargetPlan.of(spec, options, name=name, reference=reference)
    try:
        return prepare.target_of(layer, plan), plan
    except LoadError as exc:
        raise UsageError(str(exc)) from None


def _reference(given: Any, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None,
               mapping: Mapping[str, str] | None) -> Any:
    """The reference check_layer was given, resolved (a string from the working folder)."""
    from layercheck.target.reference import reference_of

    if isinstance(given, str) and given.strip() == "autograd" and (args is not None or kwargs is not None or mapping):
        raise TypeError("reference='autograd' differentiates the layer's own forward: it takes no reference_args, "
                        "reference_kwargs or reference_map")
    try:
        return reference_of(given, args=args, kwargs=kwargs, mapping=mapping, base_dir=Path.cwd())
    except LoadError as exc:
        raise UsageError(str(exc)) from None


def _values(values: Sequence[Any], target: Target) -> list[torch.Tensor]:
    """``values=``: one tensor per input, float64 for floating ones, at its layout's size."""
    if isinstance(values, (str, bytes)) or len(values) != len(target.specs):
        raise TypeError(f"values takes one nested list or tensor per input ({len(target.specs)}), "
                        f"not {type(values).__name__}")
    tensors = []
    for spec, value in zip(target.specs, values):
        dtype = torch.float64 if spec.floating else torch.bool if spec.dtype == "bool" else torch.int64
        x = torch.as_tensor(value, dtype=dtype).clone()
        if tuple(x.shape) != spec.layout.size:
            raise UsageError(f"values: an input of size {list(x.shape)} for layout {spec.layout}")
        tensors.append(x)
    return tensors


def _input(item: Layout | InputSpec | str) -> InputSpec:
    if isinstance(item, InputSpec):
        return item
    if isinstance(item, Layout):
        return InputSpec(item)
    return parse_input(item, where="layout")

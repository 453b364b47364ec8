"""The command line: parse, call the runner, pick a reporter, exit. No torch logic here."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib.metadata
import inspect
import json
import os
import platform
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
import yaml
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from layercheck._version import __version__
from layercheck.cli import scaffold
from layercheck.cli.output import check_destination, destinations, report_stream, write_atomically

# Nothing here imports torch (runner, isolation and loading do, inside the commands that need
# them): --help, `layercheck checks` and usage errors answer at once.
from layercheck.parent import limits, listing
from layercheck.parent.errors import SpecError, UsageError
from layercheck.parent.inputs import InputSpec, looks_like_input, parse_input
from layercheck.parent.layout import Layout
from layercheck.parent.result import ExitCode, Report
from layercheck.parent.shards import Shard
from layercheck.parent.sources import check_reference
from layercheck.parent.spec import (
    AUTOGRAD,
    TargetSpec,
    find_specs,
    is_spec_path,
    load_spec,
    parse_device,
    parse_tolerance,
)
from layercheck.reporting import console as console_report
from layercheck.reporting import registry as reporters
from layercheck.store import keeping
from layercheck.store.settings import DEFAULT_SECONDS as DEFAULT_EXPLORE_SECONDS

if TYPE_CHECKING:
    from layercheck.parent.isolation import Ahead
    from layercheck.parent.plan import Options, TargetPlan
    from layercheck.scan.command import Prepared
    from layercheck.scan.modelspec import ModelSpec

# click's exceptions, as the typer installed has them (typer 0.29 carries its own click): found
# from the public typer.BadParameter's ancestors rather than imported from either.
_CLICK_ERRORS = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
_UsageError: type[Exception] = _CLICK_ERRORS["UsageError"]
_ClickException: type[Exception] = _CLICK_ERRORS["ClickException"]
_NoArgsIsHelp: type[Exception] | None = getattr(sys.modules[_UsageError.__module__], "NoArgsIsHelpError", None)


class _OneErrorStyle(TyperGroup):
    """Every usage error in one style, ``layercheck: error: ...`` on stderr and exit status 2:
    the ones click finds (an unknown option, a missing argument, a value out of range) as
    well as layercheck's own."""

    def main(self, args: Any = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            value = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Exception as exc:
            ctx: Any = getattr(exc, "ctx", None)
            if _NoArgsIsHelp is not None and isinstance(exc, _NoArgsIsHelp) and ctx is not None:
                typer.echo(ctx.get_help())  # a bare `layercheck`: the help, as asked for
                sys.exit(0)
            if isinstance(exc, _UsageError):
                where = ctx.command_path if ctx is not None else "layercheck"
                _stderr().print(f"layercheck: error: {exc.format_message()} (see '{where} --help')",  # type: ignore[attr-defined]
                                markup=False)
                sys.exit(ExitCode.USAGE)
            if isinstance(exc, _ClickException):
                _stderr().print(f"layercheck: error: {exc.format_message()}", markup=False)  # type: ignore[attr-defined]
                sys.exit(getattr(exc, "exit_code", 1))
            raise
        except typer.Abort:
            _stderr().print("layercheck: interrupted", markup=False)
            sys.exit(130)
        sys.exit(value if isinstance(value, int) else 0)


app = typer.Typer(
    name="layercheck",
    cls=_OneErrorStyle,
    help="Validate custom PyTorch layers, like MATLAB's checkLayer and further.",
    no_args_is_help=True,
    epilog=f"Report formats (run --format): {', '.join(reporters.known_formats())}.",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        try:
            torch_version = importlib.metadata.version("torch")  # without importing it
        except importlib.metadata.PackageNotFoundError:
            torch_version = "not installed"
        typer.echo(f"layercheck {__version__} (torch {torch_version}, Python {platform.python_version()})")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the versions of layercheck, torch and Python, and exit.")] = False,
) -> None:
    """Validate custom PyTorch layers, like MATLAB's checkLayer and further."""

F = TypeVar("F", bound=Callable[..., Any])


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _usage_errors(fn: F) -> F:
    """Turn UsageError into one line on stderr and exit status 2: no traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UsageError as exc:
            _stderr().print(f"layercheck: error: {exc}", markup=False, soft_wrap=True)
            raise typer.Exit(ExitCode.USAGE) from None

    return wrapper  # type: ignore[return-value]


_FORMAT_HELP = (f"Report format: {', '.join(reporters.known_formats())} (default: table). With one --output: that file's "
                "(default: the one its suffix names); with several, the terminal's (each file takes its suffix's).")
_OUTPUT_HELP = ("Write the report to this file (the table still goes to the terminal). Repeatable: each file in the "
                "format its suffix names (.json, .xml, .md, .html, .txt).")


@app.command()
@_usage_errors
def run(
    targets: Annotated[list[str], typer.Argument(metavar="TARGET", hidden=True, show_default=False)],
    layout: Annotated[list[str] | None, typer.Option("--layout", "-l", metavar="'SIZES:FORMAT [dtype=T] [values=V] [grad=no]'", help="One positional input of a layer target, in call order (repeat per input): its layout, and optionally its dtype (float32, int64, bool, ...; default: the check's floating dtype), how values are drawn (LOW:HIGH, uniform:LOW:HIGH, normal:MEAN:STD, positive, a probability for bool) and grad=no for a constant input.")] = None,
    call_kwarg: Annotated[list[str] | None, typer.Option("--call-kwarg", metavar="NAME=VALUE", help="A keyword argument of the layer's call: NAME='SIZES:FORMAT ...' for a generated tensor (as --layout), else a YAML value passed as is (need_weights=false).")] = None,
    arg: Annotated[list[str] | None, typer.Option("--arg", metavar="VALUE", help="Positional constructor argument for a layer target (YAML value; repeatable).")] = None,
    kwarg: Annotated[list[str] | None, typer.Option("--kwarg", metavar="NAME=VALUE", help="Keyword constructor argument NAME=VALUE for a layer target (repeatable).")] = None,
    check: Annotated[list[str] | None, typer.Option("--check", "-c", metavar="ID[:VARIANT]", help="Run only this check (and what it needs); repeatable.")] = None,
    skip: Annotated[list[str] | None, typer.Option("--skip", "-s", metavar="ID[:VARIANT]", help="Do not run this check (ID or ID:VARIANT); repeatable.")] = None,
    enable: Annotated[list[str] | None, typer.Option("--enable", "-e", metavar="ID[:VARIANT]", help="Also run this opt-in check (ID or ID:VARIANT); repeatable.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", min=0, max=2**32 - 1, metavar="N", help="Seed for generated inputs and random streams (default: the spec's, else 0).")] = None,
    device: Annotated[list[str] | None, typer.Option("--device", metavar="DEVICE", help="Accelerator(s) the device check uses, e.g. cuda:0 (default: every one present).")] = None,
    interpret: Annotated[bool, typer.Option("--interpret", help="Run Triton kernels under Triton's interpreter, on CPU tensors (a spec's interpret: true); on by itself where Triton is installed and there is no GPU. Slow: use small layouts.")] = False,
    interpret_sizes: Annotated[str | None, typer.Option("--interpret-sizes", metavar="reduced|full", show_default=False, help="The sizes Triton kernels run under the interpreter are checked at: reduced (the default: batch, time and spatial dimensions cut to about 4096 elements an input, keeping 32 rows) or full (the layouts as given; a spec's interpret_sizes:).")] = None,
    on: Annotated[str | None, typer.Option("--on", metavar="DEVICE", show_default=False, help="Run every check with the layer and its inputs on this device, e.g. cuda (default: the spec's on:, else the CPU): for layers that only run on a GPU.")] = None,
    tolerance: Annotated[list[str] | None, typer.Option("--tolerance", metavar="CHECK.DTYPE=VALUE", help="Tolerance override CHECK.DTYPE=VALUE, e.g. needs_input_grad.float32=1e-2 (a bare DTYPE=VALUE is the gradient check's); `layercheck checks ID` lists a check's tolerances.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.0, metavar="SECONDS", help="Time limit per check in seconds (0: none).")] = limits.DEFAULT_TIMEOUT,
    timeout_total: Annotated[float, typer.Option("--timeout-total", min=0.0, metavar="SECONDS", help="Time limit for the whole run in seconds (0: none): then the check running is an error and the targets not started are error runs.")] = 0.0,
    max_memory: Annotated[str | None, typer.Option("--max-memory", metavar="SIZE", show_default=False, help="Refuse targets whose layouts need more memory than this, and limit each worker process to it, e.g. 8GB or 512MiB (0: no limit; default: half the available memory).")] = None,
    no_isolate: Annotated[bool, typer.Option("--no-isolate", help="Run the checks in this process, not in worker processes: for debugging with pdb. A layer that exits, crashes or hangs in native code then ends or stalls the run.")] = False,
    format: Annotated[str | None, typer.Option("--format", "-f", metavar="FORMAT", show_default=False, help=_FORMAT_HELP)] = None,
    output: Annotated[list[Path] | None, typer.Option("--output", "-o", metavar="FILE", help=_OUTPUT_HELP, dir_okay=False)] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=0, metavar="N", help="Check this many targets at once, in worker processes (0: one per CPU).")] = 1,
    shard: Annotated[str | None, typer.Option("--shard", metavar="K/N", help="Check only the K-th of N shards of the targets (1-based), for CI matrix jobs: the targets sorted by name (spec path or layer reference), shard K takes the K-th, K+N-th, ... of them.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only failures and the summary line.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print whole messages and tracebacks.")] = False,
    reference: Annotated[str | None, typer.Option("--reference", metavar="TARGET", show_default=False, help="Judge every target against this reference implementation (file.py:Class, module:Class, or autograd: the layer's own forward differentiated by autograd), which receives the layer's parameter values: the reference check, flash-attention's rule in each dtype (default: the spec's reference:).")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Fail a check that applies but could not judge the layer (rounding noise, kinks, a dtype no kernel here supports), not only one that finds it wrong; a check that does not apply (no GPU, no state) is still skipped.")] = False,
    explore: Annotated[int | None, typer.Option("--explore", min=0, metavar="N", show_default=False, help="After the default draws pass, up to N more draws per target (batch sizes, odd and block-boundary lengths, exact zeros, ties, identity and one-hot rows, large and small values) running the checks that can fail on inputs, until one fails (default: the spec's explore:, else 0).")] = None,
    explore_time: Annotated[float, typer.Option("--explore-time", min=0.0, metavar="SECONDS", help="Time limit of one target's explored draws.")] = DEFAULT_EXPLORE_SECONDS,
    emit_test: Annotated[Path | None, typer.Option("--emit-test", metavar="DIR", file_okay=False, show_default=False, help="Write a pytest file per failure into DIR, running that check on its smallest failing input through the Python API: it fails until the layer is fixed.")] = None,
    no_store: Annotated[bool, typer.Option("--no-store", help="Neither replay nor keep failures in the store, .layercheck/ beside the spec (else in the working directory).")] = False,
) -> None:
    """Check layers and exit 0 (all passed or skipped), 1 (a check failed or errored, or a
    layer could not be loaded) or 2 (invalid command line, spec or layout).

    Each TARGET is a spec file, a folder of spec files, or a layer: path/to/file.py[:Name],
    package.module:Name (torch.nn:Conv2d) or torch.ops.NAMESPACE.NAME, checked with the
    --layout, --arg and --kwarg given."""
    fmt, files = destinations(format, output or [])
    part = Shard.parse(shard) if shard is not None else None
    if reference is not None and reference.strip() != AUTOGRAD:
        try:
            check_reference(reference.strip(), base_dir=Path.cwd())  # from source, before torch
        except UsageError as exc:
            raise UsageError(f"--reference {exc}") from None
    inputs = [parse_input(text) for text in layout or []]
    constants: dict[str, Any] = {}
    for text in call_kwarg or []:
        name, sep, value = text.partition("=")
        if not sep or not name.strip().isidentifier():
            raise UsageError(f"--call-kwarg {text!r}: expected NAME=VALUE")
        if looks_like_input(value):
            inputs.append(parse_input(value, name=name.strip(), where=f"--call-kwarg {name.strip()}"))
        else:
            constants[name.strip()] = _yaml_value(value, f"--call-kwarg {name.strip()}")
    args = [_yaml_value(text, "--arg") for text in arg or []]
    kwargs = dict(_keyword(text) for text in kwarg or [])
    if no_isolate and jobs != 1:
        raise UsageError("--no-isolate runs the checks in this process, one target after another: it cannot be combined with --jobs")
    specs = _collect_targets(targets, inputs, constants, args, kwargs, verbose=verbose, import_layers=no_isolate,
                             interpret=interpret)
    memory = limits.memory_limit(max_memory)
    for spec in specs:
        limits.refuse_oversized(spec.name, spec.layouts, memory)
    for option, selectors in (("--check", check), ("--skip", skip), ("--enable", enable)):
        listing.check_selectors(tuple(selectors or ()), option)
    for path, _ in files:
        check_destination(path)
    from layercheck.parent.plan import Options, TargetPlan

    options = Options(
        seed=seed,
        only=tuple(check or ()),
        skip=tuple(skip or ()),
        enable=tuple(enable or ()),
        devices=tuple(device or ()),
        on=None if on is None else parse_device(on, "--on"),
        tolerance=parse_tolerance(dict(_keyword(t) for t in tolerance or []), "--tolerance"),
        timeout=timeout,
        timeout_total=timeout_total or None,
        max_memory=memory.bytes,
        strict=strict,
        interpret=interpret,
        interpret_sizes=_interpret_sizes(interpret_sizes),
        started=_started,
        reference=None if reference is None else reference.strip(),
        exploring=True,
        explore=explore,
        explore_time=explore_time,
        store=not no_store,
    )
    plans = [TargetPlan.of(spec, options) for spec in specs]  # what each target is checked with, once
    _check_interpreter(plans, options)
    for spec in specs:
        for key, spec_selectors in (("skip", spec.skip), ("enable", spec.enable)):
            listing.check_selectors(spec_selectors, f"{spec.name}: checks: {key}:")
    _validate(plans, options, in_process=no_isolate)
    if part is not None:
        everything, plans = len(plans), part.select(plans)
        if not plans:
            _stderr().print(f"shard {part} holds none of the {everything} target{'s' * (everything != 1)}: nothing checked", markup=False)
    plans, said = keeping.prepare(plans)  # the store's failures, replayed first
    for line in said:
        _stderr().print(line, markup=False)
    out = Console(file=report_stream(), highlight=False, soft_wrap=False)  # no padding in a pipe
    with console_report.progress_display(_stderr(), enabled=not quiet) as progress:
        if no_isolate:
            from layercheck.engine import runner

            with contextlib.redirect_stdout(sys.stderr):  # what a layer prints never mixes with the report
                report = runner.run(plans, options, progress=progress)  # type: ignore[arg-type]
        else:
            from layercheck.parent import isolation  # the workers import torch; this process does not

            report = isolation.run(plans, options, jobs=jobs or os.cpu_count() or 1, progress=progress,  # type: ignore[arg-type]
                                   ahead=_ahead.get())
    report = _arranged.get()(report)  # a scan's tree (layercheck scan)
    for line in keeping.keep(plans, report.runs, emit_test):
        _stderr().print(line, markup=False)
    _emit(report, fmt, files, out, quiet=quiet, verbose=verbose)
    if report.interrupted:
        _stderr().print(f"layercheck: interrupted: the report holds the {len(report.runs)} target(s) checked so far", markup=False)
    raise typer.Exit(report.exit_code)


# What `run` does to its report before it is written: `scan` adds its tree of module paths.
_arranged: contextvars.ContextVar[Callable[[Report], Report]] = contextvars.ContextVar("_arranged",
                                                                                   default=lambda report: report)
# The worker `scan` surveyed its model in, for `run` to check the specs in (parent/isolation.py's Ahead).
_ahead: contextvars.ContextVar[Ahead | None] = contextvars.ContextVar("_ahead", default=None)
_RUN_ONLY = ("targets", "layout", "call_kwarg", "shard")  # run's options that scan does not take


def _with_run_options(fn: F) -> F:
    """``fn`` takes run's options besides its own (declared once, on run): its ``**options``."""
    own = inspect.signature(fn, eval_str=True)
    shared = [p for name, p in inspect.signature(run, eval_str=True).parameters.items()
              if name not in _RUN_ONLY and name not in own.parameters]
    mine = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    fn.__signature__ = own.replace(parameters=[*mine, *shared])  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in fn.__signature__.parameters.values()}  # type: ignore[attr-defined]
    return fn


@app.command("scan")
@_usage_errors
@_with_run_options
def scan_command(
    target: Annotated[str, typer.Argument(metavar="MODEL", hidden=True, show_default=False)],
    input: Annotated[list[str] | None, typer.Option("--input", "-i", metavar="'SIZES:FORMAT [dtype=T] [values=V]'", help="One positional sample input of the model, in call order (repeat per input), in --layout's syntax: e.g. --input '2,16:BT dtype=int64 values=0:100'.")] = None,
    inputs: Annotated[Path | None, typer.Option("--inputs", metavar="FILE.pt", help="Saved sample inputs (torch.save): a tensor, a tuple of inputs, or a dict of keyword inputs; the first dimension of each is taken as the batch.")] = None,
    weights: Annotated[Path | None, typer.Option("--weights", metavar="FILE", help="Load this state_dict into the model first, so the verdicts are on trained values.")] = None,
    include: Annotated[list[str] | None, typer.Option("--include", metavar="PATTERN", help="Check the layers of this class or path too (a class name, a module prefix such as torch.nn, or a glob of paths: 'layers.*.mlp'); repeatable.")] = None,
    exclude: Annotated[list[str] | None, typer.Option("--exclude", metavar="PATTERN", help="Do not check the layers of this class or path (as --include); repeatable.")] = None,
    write_specs: Annotated[Path | None, typer.Option("--write-specs", metavar="DIR", file_okay=False, help="Write one spec per layer checked into DIR, with its captured inputs and layer saved beside it: layercheck run DIR/NAME.yaml checks it alone (default: a temporary folder, removed).")] = None,
    **options: Any,
) -> None:
    """Check every custom layer of a model at the inputs one sample forward gives it, and exit
    as run does (0, 1 or 2).

    MODEL is a module class or a factory function (path/to/model.py:Net, package.module:build,
    built with --arg and --kwarg) or a model spec (a YAML file with model:). One forward in
    predict mode records every submodule's call; each distinct layer whose class is defined
    outside torch (and each autograd.Function applied inside) is checked once per kind, as
    run checks a spec, on the inputs the model gave it; the report is a tree of module paths."""
    from layercheck.parent.inputs import parse_input
    from layercheck.scan.command import model_spec

    sample = [parse_input(text, where="--input") for text in input or []]
    spec = model_spec(target, inputs=sample, inputs_file=inputs, weights=weights, include=include or [],
                      exclude=exclude or [], args=[_yaml_value(t, "--arg") for t in options.pop("arg") or []],
                      kwargs=dict(_keyword(t) for t in options.pop("kwarg") or []))
    options["skip"] = [*(options["skip"] or []), *spec.skip] or None
    options["enable"] = [*(options["enable"] or []), *spec.enable] or None
    seed = options["seed"] if options["seed"] is not None else (spec.seed or 0)
    from layercheck.scan.command import Unscannable, prepare

    with contextlib.ExitStack() as stack:
        folder = write_specs or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="layercheck-scan-")))
        try:
            if options["no_isolate"]:
                prepared, ahead = prepare(spec, folder, seed=seed), None
            else:  # Note [a scan surveys its model in the worker that checks it] in parent/isolation.py
                from layercheck.parent.isolation import Ahead
                from layercheck.parent.plan import Options

                ahead = stack.enter_context(Ahead(Options(only=tuple(options["check"] or ()),
                                                          enable=tuple(options["enable"] or ())),
                                                  jobs=options["jobs"] or os.cpu_count() or 1))
                prepared = _survey(ahead, spec, folder, seed=seed, timeout=options["timeout"])
        except Unscannable as exc:  # the model cannot be built, or its forward raises: exit 1
            _stderr().print(str(exc), markup=False)
            raise typer.Exit(ExitCode.INVALID_LAYER) from None
        if not options["quiet"]:
            _stderr().print("\n".join(prepared.lines(folder)), markup=False)
        tokens = _arranged.set(prepared.arrange), _ahead.set(ahead)
        try:
            run(targets=[str(folder)], layout=None, call_kwarg=None, shard=None, arg=None, kwarg=None, **options)
        finally:
            _arranged.reset(tokens[0])
            _ahead.reset(tokens[1])


def _survey(ahead: Ahead, spec: ModelSpec, folder: Path, *, seed: int, timeout: float) -> Prepared:
    """The scan's ``prepare`` in the worker started ahead of its run, within ``timeout`` seconds
    (0: none). Raises as prepare does, and Unscannable where that worker dies or runs past the
    limit."""
    from layercheck.parent.isolation import WorkerLost
    from layercheck.scan.command import Unscannable

    try:
        kind, value = ahead.ask(("survey", (spec, str(folder), seed), None), limit=timeout or None,
                                doing="building the model and running its sample forward")[:2]
    except WorkerLost as exc:
        raise Unscannable(f"layercheck: error: {spec.model}: {exc}") from None
    if kind == "surveyed":
        return value
    if kind == "usage":
        raise UsageError(value)
    if kind == "unscannable":
        raise Unscannable(value)
    raise Unscannable(f"layercheck failed while surveying the model:\n{value}")  # "crash": layercheck's own error


@app.command("report")
@_usage_errors
def report_command(
    path: Annotated[Path, typer.Argument(metavar="REPORT.json", hidden=True, show_default=False)],
    format: Annotated[str | None, typer.Option("--format", "-f", metavar="FORMAT", show_default=False, help=_FORMAT_HELP)] = None,
    output: Annotated[list[Path] | None, typer.Option("--output", "-o", metavar="FILE", help=_OUTPUT_HELP, dir_okay=False)] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="The table with every check and whole messages.")] = False,
) -> None:
    """Render a saved JSON report (layercheck run --output report.json) in another format,
    without running anything again; exit 0 once it is written, whatever the report says."""
    fmt, files = destinations(format, output or [])
    for destination, _ in files:
        check_destination(destination)
    _emit(read_report(path), fmt, files, Console(file=report_stream(), highlight=False, soft_wrap=False), quiet=False,
          verbose=verbose)


def read_report(path: Path) -> Report:
    """A report that ``layercheck run --format json`` wrote; a file that is not one is a UsageError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not a layercheck report: not JSON ({exc})") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema != Report.SCHEMA:
        raise UsageError(f"{path}: not a layercheck report: its schema is {schema!r}, not {Report.SCHEMA!r} "
                         "(write one with layercheck run --format json)")
    try:
        return Report.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{path}: not a layercheck report: {type(exc).__name__} {exc} in its runs") from None


@app.command("checks")
@_usage_errors
def checks_command(
    check_id: Annotated[str | None, typer.Argument(metavar="ID", hidden=True, show_default=False)] = None,
) -> None:
    """List the checks: id, whether it runs by default, what it checks (and the MATLAB
    counterpart, on a wide terminal). With an ID: that check's documentation, MATLAB
    counterpart, variants, prerequisites and tolerances."""
    out = Console(file=report_stream(), highlight=False)  # no padding in a pipe
    if check_id is not None:
        page = listing.page(check_id)  # from the check's source: no torch (a typo answers at once)
        info = page.entry
        out.print(f"{info.id}: {info.title}", markup=False)
        if info.matlab:
            out.print(f"MATLAB: {info.matlab}", markup=False)
        out.print("default" if info.default else f"opt-in: --enable {info.id}", markup=False)
        if info.variants is None:  # the accelerators present: asking torch would take seconds
            out.print("variants: set when the checks run, from the accelerators present", markup=False)
        elif info.variants != ("",) or info.optional_variants:
            out.print(f"variants: {', '.join(info.variants)}"
                      + (f"; opt-in: {', '.join(info.optional_variants)}" if info.optional_variants else ""), markup=False)
        if page.requires:
            out.print(f"needs: {', '.join(page.requires)}", markup=False)
        if page.any_batch:
            out.print(f"inputs of more than {listing.sample_elements():,} elements: runs on a few of the batch's "
                      "observations (docs/explanation/what-checks-see.md, \"Large inputs: a sample of the batch\")",
                      markup=False)
        if page.tolerances:
            out.print("tolerances (override with --tolerance CHECK.DTYPE=VALUE, or tolerance: in a spec):", markup=False)
            for dtype, default, bounds in page.tolerances:
                out.print(Padding(Text(f"{info.id}.{dtype} = {default:g}: {bounds}"), (0, 0, 0, 2)))
        out.print()
        out.print(reflow(listing.as_text(page.doc)), markup=False)
        return
    # Words are never broken: the MATLAB names (up to 52 letters) get a column only where
    # there is room for them, and `layercheck checks ID` names them always.
    matlab = out.width >= 150
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column()
    if matlab:
        table.add_column(no_wrap=True)
    table.add_row(*[Text(h, style="bold") for h in ("id", "runs", "what it checks", "MATLAB")[:3 + matlab]])
    for entry in listing.entries():
        title = entry.title
        if entry.optional_variants:
            title += f" (opt-in variants: {', '.join(entry.optional_variants)})"
        table.add_row(entry.id, "default" if entry.default else "opt-in", title, *([entry.matlab or "-"] if matlab else []))
    out.print(table)
    out.print("layercheck checks ID: what the check does, its MATLAB counterpart, variants and tolerances; "
              "--enable ID runs an opt-in check.", markup=False)


@app.command("plugins")
@_usage_errors
def plugins_command() -> None:
    """List the installed check and reporter plug-ins: name, kind, package and version, and
    whether each loads (importing them: a broken one is listed with its error)."""
    from layercheck.parent import plugins, registry

    registry.load_checks()
    reporters.load_reporters()
    found = [(p, error) for group in (plugins.CHECKS, plugins.REPORTERS) for p, error in plugins.status(group)]
    if not found:
        typer.echo("no plug-ins installed (entry-point groups layercheck.checks, layercheck.reporters)")
        return
    rows = [("name", "kind", "package", "version", "status")]
    rows += [(p.name, p.kind, p.package, p.version, "loaded" if error is None else f"failed: {error}")
             for p, error in found]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:  # one line each, however narrow the terminal: an error is read whole
        typer.echo("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths)), row[4]]))


@app.command("init")
@_usage_errors
def init_command(
    name: Annotated[str, typer.Argument(metavar="NAME", hidden=True, show_default=False)],
    layout: Annotated[str, typer.Option("--layout", "-l", metavar="SIZES:FORMAT", help="Layout of the layer's input, written into the spec.")] = scaffold.DEFAULT_LAYOUT,
    class_name: Annotated[str | None, typer.Option("--class-name", metavar="NAME", help="Name of the layer class (default: NAME in CamelCase).")] = None,
    op: Annotated[bool, typer.Option("--op", help="Write a custom operator (torch.library.custom_op, with a fake kernel and a registered backward) instead of a layer class.")] = False,
) -> None:
    """Write a commented layer template NAME.py and its spec NAME.yaml; never overwrites.
    NAME is the file to write without .py; a path such as layers/mylayer works."""
    layer_file, spec_file = scaffold.write(Path(name), layout=Layout.parse(layout), class_name=class_name,
                                           operator=op)
    out = Console(highlight=False)
    out.print(f"wrote {layer_file} and {spec_file}", markup=False)
    out.print(f"check it: layercheck run {spec_file}", markup=False)


def reflow(doc: str) -> str:
    """A docstring's paragraphs as single lines, for the console to wrap at its width (at word
    boundaries); a line that starts a list item starts a line of its own."""
    paragraphs: list[str] = []
    for block in doc.split("\n\n"):
        lines: list[str] = []
        for line in block.splitlines():
            if lines and line.strip() and not line.lstrip().startswith(("- ", "* ")):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def _interpret_sizes(text: str | None) -> str | None:
    from layercheck.parent.spec import INTERPRET_SIZES

    if text is not None and text not in INTERPRET_SIZES:
        raise UsageError(f"--interpret-sizes {text!r}: expected one of {', '.join(INTERPRET_SIZES)}")
    return text


def _check_interpreter(plans: list[TargetPlan], options: Options) -> None:
    """Triton's interpreter asked for (--interpret, a spec's interpret: true) needs Triton
    installed: a usage error otherwise, found without importing it."""
    import importlib.util

    for target in plans:
        if target.interpret and importlib.util.find_spec("triton") is None:
            where = "--interpret" if options.interpret else f"{target.name}: interpret: true"
            raise UsageError(f"{where}: Triton's interpreter needs Triton, which is not installed (pip install triton)")


def _validate(plans: list[TargetPlan], options: Options, *, in_process: bool) -> None:
    """Every check id, device and tolerance asked for must exist, before anything runs. The
    check ids are read from the catalogue's source (no torch); devices and tolerances need
    torch and the checks (the runner), imported here only when some are given."""
    for target in plans:
        if target.reference is not None and target.reference != AUTOGRAD and options.reference is None:
            try:
                check_reference(target.reference, base_dir=target.reference_dir)  # a spec's reference:, from source
            except UsageError as exc:
                raise UsageError(f"{target.name}: reference: {exc}") from None
    if not (in_process or options.devices or options.on is not None
            or any(target.on is not None or target.tolerances for target in plans)):
        return
    from layercheck.engine import runner

    runner.check_devices(options.devices)
    if options.on is not None:
        runner.check_devices([options.on], "--on")
    runner.check_options(options)
    for target in plans:
        try:
            runner.checks_of(target)
        except UsageError as exc:
            raise UsageError(f"{target.name}: checks: {exc}") from None
        if options.on is None and target.on is not None:
            runner.check_devices([target.on], f"{target.name}: on:")


def _collect_targets(targets: list[str], inputs: list[InputSpec], constants: dict[str, Any], args: list[Any],
                     kwargs: dict[str, Any], *, verbose: bool = False, import_layers: bool = True,
                     interpret: bool = False) -> list[TargetSpec]:
    """Spec files, folders of specs and layer references, validated before anything runs; a
    layer reference is imported here only with ``import_layers`` (else a worker process does),
    its Triton kernels decorated for the interpreter as the run's import would (``interpret``)."""
    specs: list[TargetSpec] = []
    layer_targets = 0
    problems: list[str] = []  # every spec's problems, said together (a folder's too)
    for text in targets:
        path = Path(text)
        if path.is_dir():
            found, others = find_specs(path)
            if not found:
                raise UsageError(f"{text}: folder holds no spec files (*.yaml, *.yml with a layer: key)")
            if others and verbose:
                _stderr().print(f"not specs (no layer: key), left out: {', '.join(map(str, others))}", markup=False)
            specs.extend(_checked_spec(p, problems) for p in found)
        elif is_spec_path(path):
            if not path.is_file():
                raise UsageError(f"{text}: no such spec file")
            specs.append(_checked_spec(path, problems))
        else:
            layer_targets += 1
            if not any(spec.name is None for spec in inputs):
                raise UsageError(f"{text}: a layer target needs --layout SIZES:FORMAT (once per input), e.g. --layout 24,24,20,128:SSCB")
            check_reference(text, base_dir=Path.cwd())  # from source, before torch
            if import_layers:
                from layercheck.target.loading import TargetNotFound, resolve
                from layercheck.target.prepare import prepare_interpreter

                try:
                    prepare_interpreter(interpret)
                    resolve(text, base_dir=Path.cwd())
                except TargetNotFound as exc:
                    raise UsageError(str(exc)) from None
                except Exception:
                    pass  # import errors are the layer's: its run reports them (exit 1)
            specs.append(TargetSpec(layer=text, inputs=tuple(inputs), args=tuple(args), kwargs=dict(kwargs),
                                    constants=dict(constants)))
    if problems:
        raise SpecError("\n".join(problems))
    if (inputs or constants or args or kwargs) and not layer_targets:
        raise UsageError("--layout, --call-kwarg, --arg and --kwarg apply to layer targets (file.py[:Class], "
                         "module:Class), not to spec files")
    return specs


def _checked_spec(path: Path, problems: list[str]) -> TargetSpec:
    """The spec in ``path``, its layer checked from source (a file that is missing, a class it does
    not define: the spec's mistake, exit 2) and its check ids; what is wrong goes into ``problems``."""
    try:
        spec = load_spec(path)
    except SpecError as exc:
        problems.append(str(exc))
        return TargetSpec(layer="", inputs=())
    try:
        check_reference(spec.layer, base_dir=spec.base_dir)
    except UsageError as exc:
        problems.append(f"{path}: layer: {exc}")
    for key, selectors in (("skip", spec.skip), ("enable", spec.enable)):
        try:  # as run checks them once every spec is read: here, said with the spec's other problems
            listing.check_selectors(selectors, f"{spec.name}: checks: {key}:")
        except UsageError as exc:
            problems.append(str(exc))
    return spec


def _emit(report: Report, fmt: str, files: list[tuple[Path, str]], out: Console, *, quiet: bool,
          verbose: bool) -> None:
    report = _with_reporters(report, [fmt, *(file_fmt for _, file_fmt in files)])
    for path, file_fmt in files:
        write_atomically(path, reporters.render(report, file_fmt))
    if fmt == "table":
        console_report.print_report(report, out, verbose=verbose, quiet=quiet)
    else:
        sys.stdout.write(reporters.render(report, fmt))
    for path, _ in files:
        _stderr().print(f"report written to {path}", markup=False)


def _with_reporters(report: Report, formats: list[str]) -> Report:
    """The report with the reporter plug-ins that write it (these ``formats``) beside the check
    plug-ins in its environment's ``plugins``: a report says what made it."""
    used = [plugin.to_dict() for plugin in reporters.plugins_of(formats)]
    if not used:
        return report
    environment = {**report.environment, "plugins": [*report.environment.get("plugins", []), *used]}
    return dataclasses.replace(report, environment=environment)


def _yaml_value(text: str, option: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise UsageError(f"{option} {text!r}: not a valid YAML value") from None


def _keyword(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise UsageError(f"{text!r}: expected NAME=VALUE")
    return name.strip(), _yaml_value(value, name.strip())


_started: float | None = None


def main(*, started: float | None = None) -> None:
    """``started``: time.perf_counter() when the command started (the run's time counts from it)."""
    global _started
    _started = started
    app(prog_name="layercheck")

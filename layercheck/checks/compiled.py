"""Compiled paths (opt-in): ``torch.export`` captures the layer, ``torch.compile`` runs it,
and both compute what eager PyTorch computes."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import logging
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from layercheck._sdk_internal import (
    Run,
    Target,
    assert_same_unless_random,
    chain,
    comparable,
    forward_is_random,
    output_names,
    path_allowance,
    path_tolerances,
    predict_is_random,
    rounding_allowance_of,
    rounding_tolerances,
    user_frame,
)
from layercheck.sdk import (
    FORWARD,
    PREDICT,
    CheckError,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    Outputs,
    Subject,
    check,
    forward_run,
    predict_run,
    reference_forward,
    reference_predict,
    seeded,
)

# How much of torch's own error text and console output a failure keeps in its details.
_LONG_TEXT = 6000


class _Predict(nn.Module):
    """A layer's ``predict`` as a module's forward: torch.export captures modules only."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, *inputs: Any) -> Any:
        predict: Any = self.layer.predict
        return predict(*inputs)


class _Apply(nn.Module):
    """An operation (``Fn.apply``, a custom operator, a function) as a module whose forward calls it."""

    def __init__(self, call: Any) -> None:
        super().__init__()
        self.call = call

    def forward(self, *inputs: Any, **keywords: Any) -> Any:
        return self.call(*inputs, **keywords)


# -- export -----------------------------------------------------------------------------------


def _export_missing(target: Target) -> str | None:
    try:
        export = importlib.import_module("torch.export")
    except ImportError as exc:
        return f"torch {torch.__version__} has no torch.export ({exc})"
    if not callable(getattr(export, "export", None)):
        return f"torch {torch.__version__} has no torch.export.export (it needs torch >= 2.1)"
    return None


@check(
    "export",
    title="torch.export captures predict and the exported program matches eager",
    matlab="code generation compatibility",
    default=False,
    uses=(PREDICT,),
    applies=_export_missing,
    tolerances=rounding_tolerances("relative difference between the exported program's and eager predict's outputs "
                                   "and state"),
)
def export_matches_eager(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Captures the prediction path (eval mode; ``predict`` if the layer defines it; an
    operation's ``Fn.apply``) with ``torch.export.export`` on the generated inputs, runs
    the exported program on them and compares its outputs (and the state it leaves) with
    eager predict within rounding.

    An exported program is what ExecuTorch, AOTInductor and ONNX (dynamo) deploy, and what
    MATLAB's code generation stands for: a layer that cannot be captured cannot be shipped
    that way. Usual causes: Python control flow on tensor values (``if x.max() > t``,
    ``.item()``, ``.tolist()``), NumPy or other non-torch math on tensors, outputs that are
    not tensors or tuples/lists/dicts of them. Fix: ``torch.where`` or ``torch.cond``
    instead of a Python ``if`` on values, torch operations instead of NumPy.
    """
    subject = ctx.fresh()
    module, prefix = _prediction_module(subject)
    module.eval()
    inputs = subject.inputs()
    options, how = _export_options()
    start = time.perf_counter()
    # Captured without grad, as predict runs: a layer may branch on torch.is_grad_enabled().
    with _quiet() as console, seeded(ctx.seed), torch.no_grad():
        try:
            positional, keywords = ctx.target.split(inputs)
            program = torch.export.export(module, tuple(positional), keywords, **options)
        except Exception as exc:
            raise _capture_failed("torch.export could not capture predict", exc, console,
                                  via=f"torch.export ({how})") from exc
    seconds = time.perf_counter() - start
    exported = program.module()
    with _quiet() as console, seeded(ctx.seed), torch.no_grad():
        try:
            outputs = Outputs.of(exported(*positional, **keywords)).tensors
        except Exception as exc:
            raise _capture_failed("the exported program raised on the inputs it was captured with"
                                  + _resized_state(ctx, subject), exc, console, via=f"torch.export ({how})") from exc
    reference = reference_predict(ctx)
    state = {name.removeprefix(prefix): t for name, t in exported.named_buffers()}
    names, expected, actual = output_names(reference.outputs), list(reference.outputs), [t.detach() for t in outputs]
    for name, value in reference.state.items():
        if value is not None and name in state and state[name].shape == value.shape:
            names.append(f"state {name!r}")
            expected.append(value)
            actual.append(state[name].detach())
    compared = assert_same_unless_random(expected, actual, names=names, what="the exported program vs eager predict",
                                         labels=("eager", "exported"), allowance=rounding_allowance_of(ctx),
                                         random=lambda: predict_is_random(ctx))
    nodes = sum(1 for node in program.graph.nodes if node.op == "call_function")
    note = "" if compared else " in size and dtype (predict draws random numbers: values are not compared)"
    return (f"torch.export ({how}) captured predict as {nodes} operation(s) in {seconds:.2g} s; the exported "
            f"program matches eager on {len(names)} tensor(s){note}",
            {"strict": options.get("strict", True), "operations": nodes, "export_seconds": round(seconds, 3)})


def _resized_state(ctx: Context, subject: Subject) -> str:
    """Why an exported program may fail where eager runs: predict gives a buffer a new size
    (a recurrent state that follows the batch), and an exported program's buffers are
    updated in place, at the size they had when captured. Empty when no buffer changes size."""
    after = reference_predict(ctx).state
    for name, before in subject.buffers().items():
        now = after.get(name)
        if before is not None and now is not None and before.shape != now.shape:
            return (f" (predict changes the size of state {name!r} from {tuple(before.shape)} to "
                    f"{tuple(now.shape)}; an exported program updates buffers in place at their captured size)")
    return ""


def _export_options() -> tuple[dict[str, Any], str]:
    """Non-strict export where torch has it (2.2 and later): it runs the layer's real Python
    like eager does, with fake tensors, so any Python that does not read tensor values is
    fine and an error points at the layer's own line. Strict mode traces the bytecode with
    TorchDynamo instead and rejects more Python than deployment needs to (it was the
    default until torch 2.8)."""
    if "strict" in inspect.signature(torch.export.export).parameters:
        return {"strict": False}, "non-strict"
    return {}, "strict"


# -- compile ----------------------------------------------------------------------------------


def _compile_missing(target: Target) -> str | None:
    if not callable(getattr(torch, "compile", None)):
        return f"torch {torch.__version__} has no torch.compile (it needs torch >= 2.0)"
    try:
        from torch._dynamo.eval_frame import check_if_dynamo_supported

        check_if_dynamo_supported()
    except ImportError:
        pass
    except Exception as exc:  # e.g. a Python version this torch's TorchDynamo does not support
        return f"torch.compile is not supported here: {exc}"
    return None


@check(
    "compile",
    title="torch.compile gives eager's outputs, gradients and state in predict and forward",
    matlab="Acceleratable",
    default=False,
    uses=(PREDICT, FORWARD),
    applies=_compile_missing,
    tolerances=path_tolerances("relative difference between compiled and eager outputs, gradients and state "
                               "(fused kernels sum in another order)"),
)
def compile_matches_eager(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Compiles the layer with ``torch.compile`` and its default backend (inductor; on the
    CPU it needs a C++ compiler), runs predict, and the training forward and backward with
    the seeded output gradients, and compares outputs, the gradients of every input and
    learnable parameter, and the state left behind with eager within a tolerance for
    another summation order (fused kernels). Graph breaks are allowed and reported: the
    layer then runs partly in eager, as ``torch.compile`` does for users. A layer that draws
    random numbers (dropout) gets other ones when compiled, so only sizes and dtypes are
    compared then.

    A layer that fails or computes something else under ``torch.compile`` breaks every
    model that compiles it, usually far from the layer. Usual causes: a code path taken
    only when compiling (``torch.compiler.is_compiling()``) that drifted from the eager
    one, Python that TorchDynamo cannot trace and that raises instead of breaking the
    graph, a hand-written backward that is not a pure function of what forward saved.
    Fix: let the compiled path compute what eager computes (one code path, no
    ``is_compiling()`` branch), and keep Python that TorchDynamo cannot trace out of forward.
    """
    with _fresh_dynamo():
        before = _graph_breaks()
        predicted = _compiled_run(ctx, backward=False)
        forwarded = _compiled_run(ctx, backward=True)
        breaks = _graph_breaks() - before
    random = []
    for mode, eager, compiled, is_random in (
        ("predict", reference_predict(ctx), predicted, lambda: predict_is_random(ctx)),
        ("forward", reference_forward(ctx), forwarded, lambda: forward_is_random(ctx)),
    ):
        names, expected, actual = comparable(eager, compiled)
        # Fused kernels sum in another order: the tolerance for the same math along another path.
        if not assert_same_unless_random(expected, actual, names=names, what=f"compiled {mode} vs eager",
                                         labels=("eager", "compiled"), random=is_random,
                                         allowance=path_allowance(ctx, FORWARD if mode == "forward" else PREDICT)):
            random.append(mode)
    counts = {"output(s)": len(predicted.outputs), "gradient(s)": sum(1 for _, g in forwarded.grads if g is not None),
              "state tensor(s)": sum(1 for value in forwarded.state.values() if value is not None)}
    compared = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    message = f"torch.compile (inductor): predict, forward and backward agree with eager on {compared}"
    if random:
        verb = "draws" if len(random) == 1 else "draw"
        message += (f"; {' and '.join(random)} {verb} random numbers, which compiled code draws differently: "
                    "there, sizes and dtypes compared")
    if breaks:
        message += f"; {sum(breaks.values())} graph break(s), those parts run in eager: " + "; ".join(
            f"{reason} ({count})" if count > 1 else reason for reason, count in breaks.most_common(3))
    return message, {"graph_breaks": dict(breaks), "random": random}


def _compiled_run(ctx: Context, *, backward: bool) -> Run:
    """Predict (``backward=False``) or forward and backward of a fresh layer whose entry
    point is compiled, recorded like the eager reference runs."""
    subject = ctx.fresh()
    if subject.module is None:
        subject = Subject(ctx.target, _Apply(ctx.target.call), dtype=subject.dtype, device=subject.device)
    assert subject.module is not None
    # The bound method is compiled, not the module: ``torch.compile(module)`` wraps it and
    # renames its parameters and buffers (``_orig_mod.``), and ``Module.compile()`` compiled
    # nothing for torch.nn.Linear in torch 2.13 (TorchDynamo skips torch's own frames unless
    # a compiled frame calls them). The layer's code is what a compiled model inlines either way.
    entry = "predict" if not backward and subject.has_predict else "forward"
    with _quiet() as console:
        setattr(subject.module, entry, torch.compile(getattr(subject.module, entry)))
        try:
            if backward:
                return forward_run(ctx, subject)
            return predict_run(subject)
        except LayerRaised as exc:
            _skip_if_environment(exc.exc)
            _raise_if_not_importable(exc.exc)
            _raise_if_torch_crashed(exc.exc)
            raise _capture_failed(f"under torch.compile, {exc.phase} raised (eager runs)", exc.exc, console,
                                  via="torch.compile (inductor)") from exc


@contextlib.contextmanager
def _fresh_dynamo() -> Iterator[None]:
    """Empty TorchDynamo's caches before and after: code objects are shared between layers
    (every nn.Linear's forward is one), so guards, recompile counts and compiled code from
    another check or target must not decide this one, and nothing compiled here stays."""
    import torch._dynamo

    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()


def _graph_breaks() -> Counter[str]:
    """TorchDynamo's graph-break reasons so far (first line of each), by count. Its counters
    are process-wide and survive ``reset()``: callers take differences."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return Counter()
    found: Counter[str] = Counter()
    for reason, count in counters["graph_break"].items():
        found[(str(reason).strip().splitlines() or [""])[0][:160]] += count
    return found


def _skip_if_environment(exc: BaseException) -> None:
    """A missing C++ compiler (inductor on the CPU) is the machine's problem, not the layer's."""
    for link in chain(exc):
        text = f"{type(link).__name__}: {link}"
        if "InvalidCxxCompiler" in text or "C++ compiler" in text or "No working C++" in text:
            raise CheckSkipped(f"torch.compile's default backend (inductor) needs a working C++ compiler on the "
                               f"CPU: {_condense(link)}", applies=True) from exc


def _raise_if_not_importable(exc: BaseException) -> None:
    """TorchDynamo imports the modules of the globals it meets (an autograd.Function class)
    by name: a module loaded from a file without registering it in ``sys.modules`` cannot
    be compiled. That is how the layer was loaded, not what it does: an error, not a failure."""
    for link in chain(exc):
        if isinstance(link, ModuleNotFoundError) and link.name and link.name not in sys.modules:
            raise CheckError(
                f"torch.compile imports the layer's module {link.name!r} by name, and it is not in sys.modules "
                "(loaded from a file without registering it); layercheck's loader registers the files it loads"
            ) from exc


def _raise_if_torch_crashed(exc: BaseException) -> None:
    """An error raised where no frame of the layer's own code is involved, neither in the
    traceback nor among the user frames TorchDynamo quotes, is torch's compiler failing on
    its own: an error of the check (a torch bug or a broken install), not a failure of the
    layer. Errors the layer's code raises under compile point at it and stay failures."""
    if user_frame(exc) is None:
        raise CheckError(f"torch.compile failed inside torch, at no line of the layer: {_condense(exc)} "
                           "(a torch bug or a broken install, not the layer's fault; --skip compile "
                           "leaves it out)") from exc


# -- reporting torch's errors -----------------------------------------------------------------


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """Keep what torch prints while capturing (partial graphs, warnings, log records) off
    the user's terminal; a failure puts it in its details instead."""
    console = io.StringIO()
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(console), contextlib.redirect_stderr(console), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield console
    finally:
        logging.disable(disabled)


def _capture_failed(what: str, exc: BaseException, console: io.StringIO, *, via: str) -> CheckFailed:
    """A failure whose message is torch's reason in a line or two plus the layer's line;
    torch's full text (often a hundred lines) goes into the details."""
    frame = user_frame(exc)
    where = f" at {frame}" if frame else ""
    details: dict[str, Any] = {
        "via": via,
        "error": f"{type(exc).__name__}: {exc}"[:_LONG_TEXT],
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8))[-_LONG_TEXT:],
    }
    if console.getvalue().strip():
        details["torch_output"] = console.getvalue()[-_LONG_TEXT:]
    return CheckFailed(f"{what}{where}: {_condense(exc)}", **details)


def _condense(exc: BaseException) -> str:
    """The gist of a torch error: its first line (joined with the next where that line
    only introduces it, "...raised:"), and TorchDynamo's "Explanation:" line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    gist = lines[0]
    if gist.endswith(":") and len(lines) > 1:
        gist = f"{gist} {lines[1]}"
    explanation = next((line for line in lines[1:4] if line.startswith("Explanation:")), None)
    if explanation:
        gist = f"{gist.rstrip('.')}. {explanation.removeprefix('Explanation:').strip()}"
    gist = " ".join(gist.split())
    if len(gist) > 300:
        gist = gist[:297] + "..."
    hint = next((hint for clue, hint in _HINTS if clue in str(exc).lower()), "")
    return f"{type(exc).__name__}: {gist}{hint}"


# Plain words for torch's most common capture errors (matched in the lower-cased error text).
_HINTS = (
    ("data-dependent", " (the layer branches on a tensor's values or turns them into Python numbers). Fix: use "
                       "torch.where or torch.cond, and keep values in tensors"),
)


def _prediction_module(subject: Subject) -> tuple[nn.Module, str]:
    """The subject as a module whose forward is its prediction path (``predict`` when
    defined, ``Fn.apply`` for an operation), and the prefix its buffer names gain."""
    if subject.module is None:
        return _Apply(subject.target.call), ""
    if subject.has_predict:
        return _Predict(subject.module), "layer."
    return subject.module, ""

"""layercheck against PyTorch's own module battery: the modules of
``torch.testing._internal.common_modules.module_db`` (CPU, float32), their samples turned into
layercheck targets and checked with the default suite.

    python benchmarks/module_db.py [--modules NAME ...] [--samples N] [--json]

Every module of that database is meant to be correct, so a failed check is either a false
alarm of layercheck or a property the module genuinely lacks on that sample (some of them true
findings: bugs of PyTorch's). The second kind is listed in EXCEPTIONS, one written reason per
(module, check) and the samples it covers, printed beside the failures it explains; a false
alarm whose fix is pending is listed in FALSE_ALARMS with its cause. Any other failure is
unexplained, and the script exits 1.

How a sample becomes a target (``express``): the module class and the sample's constructor
arguments; one layout per tensor argument of the forward call, with its size, a format whose B
is the batch dimension where the module's documentation names one (batch-first for most,
sequence-first for RNNs and Transformers without ``batch_first``, none in an unbatched sample;
U for the rest), its dtype (integers drawn in the sample's [min, max], bool masks with the
sample's frequency of True), floats kept in the sample's domain (all >= 0, or within [0, 1]) and
``grad=no`` for tensors the sample does not differentiate (PyTorch's samples make loss targets
without grad). Non-tensor arguments become constant keyword arguments of the call; a positional
argument after one is passed by keyword too. Samples that cannot be written this way are
counted as not expressible, with the reason.

Checking every expressible sample (``--all``) takes about 4 minutes on two cores; by default
``--samples`` (2) samples of each module are checked, spread over its list: the first and the
last, from the plainest to the most elaborate (masks, options).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import layercheck  # noqa: E402

# Where a sample's own values do not show the input's domain: (module, argument) -> values.
DOMAINS: dict[tuple[str, int | str], str] = {
    # The samples take the log of uniform [-9, 9] values (NaN where negative): the input is a
    # log-probability, the target a probability unless log_target=True.
    ("nn.KLDivLoss", 1): "positive",
    # A variance, whatever the sample's few values show.
    ("nn.GaussianNLLLoss", 2): "positive",
}
_DOMAIN_EVIDENCE = 10  # values a sample needs before its signs tell a domain

_CLASS_LOSSES = {"CrossEntropyLoss", "NLLLoss", "MultiMarginLoss", "MultiLabelMarginLoss",
                 "MultiLabelSoftMarginLoss"}
_FEATURE_LAST = {"Linear", "Bilinear", "RNNCell", "GRUCell", "LSTMCell", "LinearCrossEntropyLoss"}
_RECURRENT = {"RNN", "GRU", "LSTM"}
_ATTENTION = {"MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerEncoderLayer",
              "TransformerDecoderLayer"}
_INDEX_TARGETS = {"CrossEntropyLoss", "NLLLoss", "LinearCrossEntropyLoss"}
_SELECTOR_TARGETS = {"CosineEmbeddingLoss", "HingeEmbeddingLoss"}
_ATTENTION_MASKS = {"attn_mask", "mask", "src_mask", "tgt_mask", "memory_mask"}
_SPATIAL_PREFIXES = ("Conv", "ConvTranspose", "LazyConv", "LazyConvTranspose", "MaxPool", "AvgPool",
                     "AdaptiveAvgPool", "AdaptiveMaxPool", "LPPool", "FractionalMaxPool", "InstanceNorm",
                     "BatchNorm", "ReflectionPad", "ReplicationPad", "ZeroPad", "CircularPad", "ConstantPad")


class NotExpressible(Exception):
    """A sample that cannot be written as a layercheck target; the message says why."""


@dataclass
class Case:
    """One sample as a layercheck target."""

    module: str
    cls: type
    desc: str
    layouts: list[str]
    call_kwargs: dict[str, Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.module}[{self.desc}]"


@dataclass
class Outcome:
    """What the default suite made of one case."""

    case: Case
    seconds: float
    error: str | None = None  # the layer could not be built
    failed: dict[str, str] = field(default_factory=dict)  # check[variant] -> message
    errors: dict[str, str] = field(default_factory=dict)
    reproduce: dict[str, str] = field(default_factory=dict)  # check[variant] -> a layercheck command


@dataclass(frozen=True)
class Known:
    """Why a module fails a check on some samples (``when``: which ones, as a sentence and a test)."""

    reason: str
    when: str = ""
    applies: Callable[[Case], bool] = lambda case: True


def _has_mask(case: Case) -> bool:
    return any("dtype=bool" in str(text) for text in [*case.layouts, *case.call_kwargs.values()])


_MASKED = ("with a bool mask among the inputs", _has_mask)
_FULLY_MASKED = ("layercheck draws each mask element True with the sample's frequency (1/3), so some query can have "
                 "every key masked (the samples mask the last key only)")
_FAST_PATH = (_FULLY_MASKED + "; there the eval fast path (torch._transformer_encoder_layer_fwd, "
              "no grad) returns NaN while the training path returns finite values: the two paths of the module "
              "disagree on a fully masked query")

# (module, check) -> a property the module genuinely lacks on these samples: not a false alarm.
EXCEPTIONS: dict[tuple[str, str], Known] = {
    ("nn.BatchNorm1d", "observations"): Known(
        "track_running_stats=False normalises with the batch's own statistics in eval mode too (documented): an "
        "observation's output depends on the rest of its batch, and a batch of one has no variance",
        "with track_running_stats=False", lambda case: "not_tracking_stats" in case.desc),
    ("nn.CTCLoss", "gradients"): Known(
        "a true finding, known upstream (pytorch/pytorch#52241, #181534): CTCLoss's backward returns the gradient "
        "for log_probs that come out of log_softmax (it adds exp(log_probs), which log_softmax's backward cancels), "
        "not the derivative of the loss; gradcheck disagrees too unless log_softmax is in the graph"),
    ("nn.CTCLoss", "noncontiguous"): Known(
        "a true finding: on the CPU, ctc_loss reads 1-D concatenated targets as if they were contiguous, so a "
        "strided view (targets[::2]) gives another loss than its .contiguous() copy (3.934 vs 3.974 on one draw)",
        "with 1-D concatenated targets", lambda case: case.layouts[1].split(":")[0].count(",") == 0),
    ("nn.FractionalMaxPool2d", "observations"): Known(
        "the samples fix the pooling regions with _random_samples of shape (N, C, 2), one row per observation of a "
        "batch of N: observation i alone is pooled with row 0's regions, and a batch larger than N is refused",
        "with _random_samples", lambda case: "_random_samples" in case.kwargs),
    ("nn.LPPool1d", "finite"): Known(
        "norm_type 1.5 raises negative inputs to a non-integer power: NaN, as on the sample's own values "
        "(uniform in [-9, 9])", "with a non-integer norm_type", lambda case: float(case.args[0]) % 1 != 0),
    ("nn.NLLLoss", "noncontiguous"): Known(
        "a true finding: nll_loss2d's backward raises 'grad_input must be contiguous' for a channels-last input "
        "(module_db skips the loss modules' memory-format test: 'No channels_last support for loss functions')",
        "with a 4-d input", lambda case: case.layouts[0].split(":")[0].count(",") == 3),
    ("nn.CrossEntropyLoss", "finite"): Known(
        "reduction='mean' averages over the targets that are not ignore_index: a draw whose every target is "
        "ignore_index (the samples' ignore_index lies inside the class range) gives 0/0 = NaN, as PyTorch returns "
        "for an all-ignored batch", "with ignore_index and reduction='mean'",
        lambda case: "ignore_index" in case.kwargs and case.kwargs.get("reduction", "mean") == "mean"),
    ("nn.MultiheadAttention", "finite"): Known(
        _FULLY_MASKED + "; attention over no key is NaN (softmax of -inf only)", *_MASKED),
}
EXCEPTIONS[("nn.NLLLoss", "finite")] = EXCEPTIONS[("nn.CrossEntropyLoss", "finite")]
for _n in ("2d", "3d"):
    EXCEPTIONS[(f"nn.BatchNorm{_n}", "observations")] = EXCEPTIONS[("nn.BatchNorm1d", "observations")]
    EXCEPTIONS[(f"nn.LPPool{_n}", "finite")] = EXCEPTIONS[("nn.LPPool1d", "finite")]
EXCEPTIONS[("nn.FractionalMaxPool3d", "observations")] = EXCEPTIONS[("nn.FractionalMaxPool2d", "observations")]
for _module in ("nn.Transformer", "nn.TransformerEncoder", "nn.TransformerEncoderLayer", "nn.TransformerDecoderLayer"):
    EXCEPTIONS[(_module, "finite")] = Known(_FAST_PATH, *_MASKED)
    EXCEPTIONS[(_module, "forward_predict_agree")] = Known(_FAST_PATH, *_MASKED)

# (module, check) -> a false alarm of layercheck whose fix is pending: the cause and the fix.
# (needs_input_grad on MultiheadAttention with a fully masked query was one: NaN compared with
# the same NaN; fixed in checks/gradients.py, which compares the finite entries.)
FALSE_ALARMS: dict[tuple[str, str], Known] = {}


# -- a sample as a target ------------------------------------------------------------------------

def _label(sample: Any, index: int) -> str:
    """The sample's place in its module's list and its description (not unique on its own)."""
    return f"#{index} {sample.desc}" if sample.desc else f"#{index}"


def express(info: Any, sample: Any, index: int) -> Case:
    """The target checking ``sample`` of ``info``; raises NotExpressible with the reason."""
    cls = info.module_cls
    name = info.name
    desc = _label(sample, index)
    if sample.forward_input is None:
        raise NotExpressible("no forward input")
    positional = list(sample.forward_input.args)
    keywords = dict(sample.forward_input.kwargs)
    parameters = [p for p in inspect.signature(cls.forward).parameters.values() if p.name != "self"]
    arguments: list[tuple[int | str, Any]] = []  # position (still positional) or name (by keyword)
    by_keyword = False
    for i, value in enumerate(positional):
        if not isinstance(value, torch.Tensor):
            by_keyword = True
        if by_keyword:
            if i >= len(parameters) or parameters[i].kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                                  inspect.Parameter.KEYWORD_ONLY):
                raise NotExpressible(f"a non-tensor positional argument ({type(value).__name__}) that cannot "
                                     "be passed by keyword")
            arguments.append((parameters[i].name, value))
        else:
            arguments.append((i, value))
    for key, value in keywords.items():
        # A keyword for the next positional parameter is passed by position (Linear(input=x)).
        k = len(arguments)
        if (not by_keyword and isinstance(value, torch.Tensor) and k < len(parameters)
                and parameters[k].name == key and parameters[k].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD):
            arguments.append((k, value))
        else:
            by_keyword = True
            arguments.append((key, value))
    tensors = [(key, value) for key, value in arguments if isinstance(value, torch.Tensor)]
    for _, value in arguments:
        if isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
            raise NotExpressible("a tuple of tensors as one argument (an LSTM's (h, c)): a layercheck input is "
                                 "one tensor")
    for _, tensor in tensors:
        if tensor.dim() == 0:
            raise NotExpressible("a 0-d (scalar) tensor: a layout has at least one dimension")
        if tensor.numel() == 0:
            raise NotExpressible("an empty tensor (a zero-size dimension): layout sizes are positive")
        if tensor.dtype not in (torch.float32, torch.float64, torch.int64, torch.int32, torch.bool):
            raise NotExpressible(f"a {tensor.dtype} tensor")
    # Each tensor's parameter name tells its role (a mask passed by position is still a mask).
    roles = [parameters[k].name if isinstance(k, int) and k < len(parameters) else str(k) for k, _ in tensors]
    named = [(role, t) for role, (_, t) in zip(roles, tensors)]
    _check_values_free(info, sample, named)
    formats = _formats(info, sample, named)
    layouts: list[str] = []
    call_kwargs: dict[str, Any] = {}
    for (key, tensor), fmt in zip(tensors, formats):
        text = _layout(name, key, tensor, fmt, sample)
        if isinstance(key, int):
            layouts.append(text)
        else:
            call_kwargs[key] = text
    for key, value in arguments:
        if not isinstance(value, torch.Tensor):
            assert isinstance(key, str)
            call_kwargs[key] = value
    if not layouts:
        raise NotExpressible("no positional tensor input")
    # A floating tensor among the constructor's arguments takes the inputs' dtype: the samples make
    # FractionalMaxPool's _random_samples float64, which its float32 forward refuses.
    kwargs = {k: v.to(torch.float32) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
              for k, v in sample.constructor_input.kwargs.items()}
    return Case(name, cls, desc, layouts, call_kwargs, tuple(sample.constructor_input.args), kwargs)


def _check_values_free(info: Any, sample: Any, tensors: list[tuple[str, torch.Tensor]]) -> None:
    """Samples whose forward needs exactly the values it was given, not values drawn like them."""
    cls = info.module_cls.__name__
    if cls == "CTCLoss":
        targets = tensors[1][1]
        lengths = dict(tensors).get("target_lengths")
        if targets.dim() == 1 and lengths is not None:
            raise NotExpressible("CTCLoss's 1-D concatenated targets must be exactly as long as the sum of the "
                                 "target lengths: lengths drawn at random are not")
    if cls in _INDEX_TARGETS:
        ignore = sample.constructor_input.kwargs.get("ignore_index")
        ignore = -100 if ignore is None else ignore  # the modules' default
        for role, tensor in tensors:
            values = set(tensor.unique().tolist()) if role == "target" and not tensor.is_floating_point() else set()
            others = values - {ignore}
            if ignore in values and others and not min(others) - 1 <= ignore <= max(others) + 1:
                raise NotExpressible(f"class-index targets mixed with ignore_index entries ({ignore}) outside "
                                     "their range: integers drawn from [min, max] would be invalid classes")
    if cls in _SELECTOR_TARGETS:
        raise NotExpressible("a float target of 1 and -1 that selects a branch (target == 1, target == -1): "
                             "drawn floats equal neither, so the loss would be 0 on every input layercheck draws")


def _layout(module: str, key: int | str, tensor: torch.Tensor, fmt: str, sample: Any) -> str:
    words = [f"{','.join(map(str, tensor.shape))}:{fmt}"]
    if tensor.dtype == torch.bool:
        words += ["dtype=bool", f"values={tensor.float().mean().item():.3g}"]
    elif not tensor.is_floating_point():
        low, high = int(tensor.min()), int(tensor.max()) + 1
        words += [f"dtype={str(tensor.dtype).removeprefix('torch.')}", f"values={low}:{high}"]
    else:
        if tensor.dtype != torch.float32:
            words.append(f"dtype={str(tensor.dtype).removeprefix('torch.')}")
        log_target = bool(sample.constructor_input.kwargs.get("log_target", False))
        domain = None if log_target else DOMAINS.get((module, key))
        finite = tensor.detach()[torch.isfinite(tensor.detach())]
        # A few values of either sign all >= 0 by chance (one in 2**n) must not narrow the domain.
        if domain is None and finite.numel() >= _DOMAIN_EVIDENCE and bool((finite >= 0).all()):
            domain = "uniform:0:1" if bool((finite <= 1).all()) else "positive"
        if domain is not None:
            words.append(f"values={domain}")
        if not tensor.requires_grad:
            words.append("grad=no")
    return " ".join(words)


# -- where the batch is ----------------------------------------------------------------------------

def _formats(info: Any, sample: Any, tensors: list[tuple[str, torch.Tensor]]) -> list[str]:
    """A format per tensor: B where the module's documentation puts the batch dimension of this
    sample, C/S/T where it names them, U elsewhere. A sample whose batch cannot be told for every
    tensor that carries it gets no B at all (then layercheck skips ``observations``)."""
    cls = info.module_cls.__name__
    ckw = dict(sample.constructor_input.kwargs)
    cargs = list(sample.constructor_input.args)
    unbatched = "no_batch_dim" in sample.desc
    first = tensors[0][1]
    formats: list[str] = []
    batch: list[int | None] = []  # the batch dim of each tensor, None where it has none
    if cls in _RECURRENT:
        batch_first = bool(ckw.get("batch_first", False))
        batched = first.dim() == 3
        for key, _ in tensors:
            if key == "input":
                formats.append(("BTC" if batch_first else "TBC") if batched else "TC")
                batch.append((0 if batch_first else 1) if batched else None)
            else:  # h0: (layers * directions, N, H) whatever batch_first says
                formats.append("UBC" if batched else "UC")
                batch.append(1 if batched else None)
    elif cls in _ATTENTION:
        batch_first = _batch_first(cls, cargs, ckw)
        batched = first.dim() == 3
        for key, t in tensors:
            if key in _ATTENTION_MASKS:
                if t.dim() == 3:  # (N * heads, L, S): an observation's rows are not one slice
                    return ["U" * t.dim() for _, t in tensors]
                formats.append("U" * t.dim())
                batch.append(None)
            elif key.endswith("key_padding_mask"):
                formats.append("BT" if t.dim() == 2 else "T")
                batch.append(0 if t.dim() == 2 else None)
            else:
                formats.append(("BTC" if batch_first else "TBC") if batched else "TC")
                batch.append((0 if batch_first else 1) if batched else None)
    elif cls == "CTCLoss":
        batched = first.dim() == 3
        for key, t in tensors:
            if key == "log_probs":
                formats.append("TBC" if batched else "TC")
                batch.append(1 if batched else None)
            elif batched and not any(isinstance(v, (list, tuple)) for v in sample.forward_input.args):
                formats.append("B" + "U" * (t.dim() - 1))
                batch.append(0)
            else:
                return ["U" * t.dim() for _, t in tensors]
    else:
        dim = _batch_dim_batch_first(cls, first, cargs, ckw, unbatched)
        for k, (_, t) in enumerate(tensors):
            batched = dim is not None and t.shape[0] == first.shape[0]
            formats.append(_labels(cls, t, batched) if k == 0 else ("B" if batched else "U") + "U" * (t.dim() - 1))
            batch.append(0 if batched else None)
    sizes = {t.shape[d] for (_, t), d in zip(tensors, batch) if d is not None}
    if len(sizes) > 1:
        return ["U" * t.dim() for _, t in tensors]
    return [fmt if d is not None else fmt.replace("B", "U") for fmt, d in zip(formats, batch)]


def _batch_first(cls: str, cargs: list[Any], ckw: dict[str, Any]) -> bool:
    if cls == "TransformerEncoder":
        layer = ckw.get("encoder_layer", cargs[0] if cargs else None)
        return bool(getattr(getattr(layer, "self_attn", None), "batch_first", False))
    return bool(ckw.get("batch_first", False))


def _batch_dim_batch_first(cls: str, x: torch.Tensor, cargs: list[Any], ckw: dict[str, Any],
                           unbatched: bool) -> int | None:
    """0 when this batch-first module's first input carries a batch, else None."""
    if unbatched:
        return None
    spatial = _spatial_dims(cls)
    if spatial is not None:
        if cls.startswith("BatchNorm"):
            return 0
        return 0 if x.dim() == spatial + 2 else None
    if cls == "Softmax2d":
        return 0 if x.dim() == 4 else None
    if cls in _FEATURE_LAST or cls in _CLASS_LOSSES:
        return 0 if x.dim() >= 2 else None
    if cls in ("LayerNorm", "RMSNorm"):
        shape = ckw.get("normalized_shape", cargs[0] if cargs else None)
        k = 1 if isinstance(shape, int) else len(shape or ())
        return 0 if x.dim() > k else None
    if cls in ("Softmax", "LogSoftmax", "Softmin", "GLU"):
        along = ckw.get("dim", cargs[0] if cargs else (-1 if cls == "GLU" else None))
        if along is None or x.dim() < 2:
            return None  # Softmax without dim picks one from the input's rank
        return 0 if along % x.dim() != 0 else None
    return 0 if x.dim() >= 1 else None  # elementwise layers and losses, normalisations over (N, C, *)


def _spatial_dims(cls: str) -> int | None:
    """N for an N-d convolution, pooling, padding or per-channel normalisation; None otherwise."""
    for prefix in _SPATIAL_PREFIXES:
        if cls.startswith(prefix) and cls[len(prefix):] in ("1d", "2d", "3d"):
            return int(cls[len(prefix)])
    return None


def _labels(cls: str, t: torch.Tensor, batched: bool) -> str:
    """The main input's format: channel and spatial dimensions where the module names them."""
    spatial = _spatial_dims(cls)
    first = "B" if batched else ""
    if spatial is not None and t.dim() == len(first) + 1 + spatial:
        return first + "C" + "S" * spatial
    if cls == "BatchNorm1d" and t.dim() == 2:
        return first + "C"
    if cls in _FEATURE_LAST:
        return first + "U" * (t.dim() - len(first) - 1) + "C"
    return first + "U" * (t.dim() - len(first))


# -- running -----------------------------------------------------------------------------------------

def run(case: Case) -> Outcome:
    start = time.perf_counter()
    try:
        report = layercheck.check_layer(case.cls, *case.layouts, args=case.args, kwargs=case.kwargs,
                                        call_kwargs=case.call_kwargs, name=case.name)
    except (TypeError, ValueError) as exc:  # this script wrote a bad target
        return Outcome(case, time.perf_counter() - start, error=f"check_layer refused the target: {exc}")
    outcome = Outcome(case, time.perf_counter() - start, error=report.runs[0].error)
    for r in report.results:
        label = f"{r.check}[{r.variant}]" if r.variant else r.check
        if r.status.value == "failed":
            outcome.failed[label] = r.message
        elif r.status.value == "error":
            outcome.errors[label] = r.message
        if r.status.value in ("failed", "error") and "reproduce" in r.details:
            outcome.reproduce[label] = str(r.details["reproduce"])
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", nargs="+", metavar="NAME", help="only these modules (nn.Linear or Linear)")
    parser.add_argument("--samples", type=int, default=SAMPLES,
                        help=f"expressible samples checked per module, spread over its list (default {SAMPLES})")
    parser.add_argument("--all", action="store_true", help="check every expressible sample (about 4 minutes)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    options = parser.parse_args(argv)
    if options.samples < 1:
        parser.error("--samples takes a positive number")
    warnings.filterwarnings("ignore")
    # needs expecttest; torch 2.6 prints to stdout when hypothesis is missing, which --json owns
    with contextlib.redirect_stdout(sys.stderr):
        from torch.testing._internal.common_modules import module_db

    wanted = {n if n.startswith("nn.") else f"nn.{n}" for n in options.modules or ()}
    infos = [info for info in module_db if not wanted or info.name in wanted]
    if wanted - {info.name for info in infos}:
        parser.error(f"not in module_db: {', '.join(sorted(wanted - {info.name for info in infos}))}")
    torch.manual_seed(0)  # the samples draw their values from torch's global generator
    start = time.perf_counter()
    samples = 0
    expressible: list[Case] = []
    refused: dict[str, list[str]] = defaultdict(list)  # reason -> sample names
    checked: list[Outcome] = []
    for info in infos:
        # requires_grad=True marks the tensors a module is differentiated with respect to: PyTorch makes
        # loss targets without grad (the samples are the same as with requires_grad=False otherwise).
        generated = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                            training=True)
        samples += len(generated)
        mine: list[Case] = []
        for index, sample in enumerate(generated):
            try:
                mine.append(express(info, sample, index))
            except NotExpressible as exc:
                refused[str(exc)].append(f"{info.name}[{_label(sample, index)}]")
        expressible += mine
        checked += [run(case) for case in (mine if options.all else spread(mine, options.samples))]
    seconds = time.perf_counter() - start
    figures = _figures(infos, samples, expressible, refused, checked, seconds, options)
    print(json.dumps(figures, indent=1) if options.json else _text(figures))
    return 1 if figures["unexplained"] else 0


SAMPLES = 2


def spread(cases: list[Case], n: int) -> list[Case]:
    """``n`` of ``cases`` evenly spread over the list (its first and last among them): a module's
    samples go from the plain to the elaborate (masks, options), so the first few would see one end."""
    if len(cases) <= n:
        return cases
    if n == 1:
        return cases[:1]
    return [cases[round(k * (len(cases) - 1) / (n - 1))] for k in range(n)]


def _figures(infos: list[Any], samples: int, expressible: list[Case], refused: dict[str, list[str]],
             checked: list[Outcome], seconds: float, options: argparse.Namespace) -> dict[str, Any]:
    failures: list[dict[str, Any]] = []
    for outcome in checked:
        problems = [("error", "build", outcome.error)] if outcome.error else []
        problems += [("failed", label, message) for label, message in outcome.failed.items()]
        problems += [("error", label, message) for label, message in outcome.errors.items()]
        for status, label, message in problems:
            check = label.split("[")[0]
            kind, known = "unexplained", None
            for table, name in ((EXCEPTIONS, "exception"), (FALSE_ALARMS, "false alarm")):
                entry = table.get((outcome.case.module, check))
                if entry is not None and entry.applies(outcome.case):
                    kind, known = name, entry
            failures.append({"sample": outcome.case.name, "check": label, "status": status, "kind": kind,
                             "reason": known.reason if known else None, "when": known.when if known else None,
                             "message": message, "reproduce": outcome.reproduce.get(label),
                             "layouts": outcome.case.layouts,
                             "call_kwargs": {k: repr(v) for k, v in outcome.case.call_kwargs.items()}})
    bad = {f["sample"] for f in failures}
    return {
        "torch": torch.__version__,
        "layercheck": layercheck.__version__,
        "modules": len(infos),
        "samples": samples,
        "expressible": len(expressible),
        "not_expressible": dict(sorted(refused.items(), key=lambda kv: -len(kv[1]))),
        "selection": "every expressible sample" if options.all else
                     f"up to {options.samples} expressible samples per module, spread over its list",
        "checked": len(checked),
        "modules_checked": len({o.case.module for o in checked}),
        "passed": sum(o.case.name not in bad for o in checked),
        "failed_samples": len(bad),
        "failed_by_check": _count(f for f in failures if f["status"] == "failed"),
        "errors_by_check": _count(f for f in failures if f["status"] == "error"),
        "exceptions": sum(f["kind"] == "exception" for f in failures),
        "false_alarms": sum(f["kind"] == "false alarm" for f in failures),
        "unexplained": sum(f["kind"] == "unexplained" for f in failures),
        "failures": failures,
        "seconds": round(seconds, 1),
        "slowest": sorted(((o.case.name, round(o.seconds, 2)) for o in checked), key=lambda x: -x[1])[:5],
    }


def _count(failures: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """check id -> how many failures of each kind (exception, false alarm, unexplained)."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for f in failures:
        counts[f["check"].split("[")[0]][f["kind"]] += 1
    return {check: dict(kinds) for check, kinds in sorted(counts.items(), key=lambda kv: -sum(kv[1].values()))}


def _text(f: dict[str, Any]) -> str:
    refused = sum(len(v) for v in f["not_expressible"].values())

    def counts(table: dict[str, dict[str, int]]) -> str:
        return ", ".join(f"{check} {sum(kinds.values())} ({', '.join(f'{n} {k}' for k, n in kinds.items())})"
                         for check, kinds in table.items()) or "none"

    lines = [
        f"layercheck {f['layercheck']} against torch {f['torch']}'s module_db (CPU, float32, default checks)",
        f"modules tried:   {f['modules']}",
        f"samples:         {f['samples']}",
        f"expressible:     {f['expressible']} (not expressible: {refused})",
        f"checked:         {f['checked']} samples of {f['modules_checked']} modules ({f['selection']})",
        f"passed:          {f['passed']}",
        f"failed:          {f['failed_samples']} samples; failed checks: {f['exceptions']} justified exceptions, "
        f"{f['false_alarms']} false alarms (fix pending), {f['unexplained']} unexplained",
        f"failed by check: {counts(f['failed_by_check'])}",
        f"errors by check: {counts(f['errors_by_check'])}",
        f"time:            {f['seconds']} s",
        "",
        "not expressible:",
    ]
    for reason, names in f["not_expressible"].items():
        modules = sorted({n.split("[")[0] for n in names})
        lines.append(f"  {len(names):4d}  {reason} ({', '.join(modules)})")
    for title, kind in (("justified exceptions (a property the module lacks):", "exception"),
                        ("false alarms of layercheck (fix pending):", "false alarm"),
                        ("UNEXPLAINED failures:", "unexplained")):
        chosen = [x for x in f["failures"] if x["kind"] == kind]
        if not chosen:
            continue
        lines += ["", title]
        if kind == "unexplained":
            for x in chosen:
                lines.append(f"  {x['sample']} {x['check']} {x['status']}: {x['message'][:400]}".replace("\n", " "))
                lines.append(f"      layouts {x['layouts']} call_kwargs {x['call_kwargs']}")
                if x["reproduce"]:
                    lines.append(f"      reproduce: {x['reproduce']}")
            continue
        grouped: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        for x in chosen:
            grouped[(x["sample"].split("[")[0], x["check"].split("[")[0], x["reason"])].append(x["sample"])
        for (module, check, reason), names in grouped.items():
            lines.append(f"  {module} {check} ({len(names)} sample(s)): {reason}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

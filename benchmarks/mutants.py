"""Mutation benchmark: one-edit mutants of the repository's own hand-written backward passes,
judged side by side by layercheck's default suite and by ``torch.autograd.gradcheck``.

The originals are every correct hand-written backward here: layers/prelu.py, layers/srelu.py
(its backward is layers/srelu_function.py's), layers/srelu_function.py and each
tests/zoo/good_*.py that defines a ``backward`` static- or classmethod, but for one that says
``MUTANTS = False`` (a surrogate gradient by design, which no mutant of can be judged against
its forward). A mutant changes one expression of a ``backward`` (or ``vjp``) body; forward is
never touched. It is written next to copies of the original's files and loaded with
layercheck's loader, as a user's file is.

A mutant is equivalent when, on random inputs (and random parameters) at several seeds and
with only one tensor requiring grad, its gradients, the gradients of a second backward over
the same graph, and the caller's tensors after backward (inputs, outputs, grad_output,
parameters) equal the original's within 1e-12 relative (within 1e-5 in float32, for an
original that cannot run in float64). One that differs only on boundary inputs (zeros, large
values, elements equal to the other tensors' values: the thresholds) differs only in the
subgradient it picks exactly at a kink (``x > 0`` -> ``x >= 0``), which is as right as the
original's: it is equivalent too, counted in its own column. Equivalent mutants are left out
of the rates (what the tools say of them is listed: a failure there is a false alarm).
On every mutant it runs layercheck's default suite (caught: a check ``failed`` or ``error``
that passed or was skipped on the original) and gradcheck in fast and slow mode (float64, every
parameter and every input not declared constant, ``grad=no``; caught: it returns False or
raises), then lists every mutant each of them misses.

    python benchmarks/mutants.py [--only NAME ...] [--max N] [--seed 0] [--threads 1] [--all] [--third-party]

``--third-party`` mutates the hand-written backward passes of installed libraries nobody on the
team wrote instead (THIRD_PARTY: entmax's sparsemax, entmax and bisection Functions,
memory-efficient-attention-pytorch's flash attention, pytorch_wavelets' 1-D and 2-D analysis
filter banks, mambapy's parallel scan, MONAI's and timm's memory-efficient activations,
linear_operator's (gpytorch's) solve and inverse quadratic form, revtorch's and reformer-pytorch's
reversible stacks, roma's special Procrustes by SVD and by Horn's quaternion eigenvector,
torch_struct's checkpointing semiring, torchdiffeq's adjoint ODE solve, the sparsemax package's
sparsemax, pytorch_tabnet's sparsemax and entmax-1.5, gpytorch's RBF and Matern covariances and
log normal CDF, e3nn's soft unit step, torch_einops_utils' soft-target cross entropies and
categorical KL, memcnn's additive and affine couplings, pytorch_wavelets' dual-tree complex
wavelet transform (forward and inverse), Hugging Face transformers' and diffsort's, PyPose's Lie
group Functions, qpth's quadratic program and SpeechBrain's quaternion linear layer), each
through a small layer of ours that loads the mutated copy of the module.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import random
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from layercheck.engine.runner import Options, run_target  # noqa: E402
from layercheck.parent.errors import LayerRaised, LoadError  # noqa: E402
from layercheck.parent.inputs import InputSpec, parse_input  # noqa: E402
from layercheck.parent.layout import Layout  # noqa: E402
from layercheck.parent.registry import select  # noqa: E402
from layercheck.parent.result import Status, label  # noqa: E402
from layercheck.target.loading import resolve  # noqa: E402
from layercheck.target.subject import Target  # noqa: E402
from layercheck.target.tensors import tensors_in  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the mutator and the catalogue beside

from catalogue.mutants import THIRD_PARTY  # noqa: E402
from mutation import (  # noqa: E402
    OPERATORS,
    Mutant,
    _flat,
    _shown,
    backward_functions,
    mutants_of,
)

TOLERANCE = 1e-12
FLOAT32_TOLERANCE = 1e-5  # an original that cannot run in float64 is compared in float32
LARGE = 1e6
SEEDS = 4  # random cases per original: the inputs, and for modules the parameters too
CAUGHT = (Status.FAILED, Status.ERROR)


# -- the originals ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Original:
    """A correct hand-written backward and the layer it is checked through."""

    name: str
    files: tuple[Path, ...]  # copied next to each mutant; the first one is loaded
    attribute: str  # the class to load from the first file (a zoo file's LAYER)
    mutated: Path  # the file whose backward is mutated, one of ``files``
    layouts: tuple[str, ...]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    classes: tuple[str, ...] = ()  # the classes whose backward is mutated (a module of many): all when empty


def originals() -> list[Original]:
    """The bundled layers at small layouts, then each correct zoo layer with a backward."""
    layers = ROOT / "layers"
    prelu, srelu, function = layers / "prelu.py", layers / "srelu.py", layers / "srelu_function.py"
    found = [
        Original("layers/prelu.py:PReLU", (prelu,), "PReLU", prelu, ("2,3,4,4:BCSS",)),
        Original("layers/srelu.py:SReLU", (srelu, function), "SReLU", function, ("2,3,4,4:BCSS",)),
        # specs/srelu_function.yaml's layouts (24,24,20,128:SSCB and 1,1,20,1:UUCU x4), shrunk
        Original("layers/srelu_function.py:SReLUFunction", (function,), "SReLUFunction", function,
                 ("4,4,3,2:SSCB",) + ("1,1,3,1:UUCU",) * 4),
    ]
    for path in sorted((ROOT / "tests" / "zoo").glob("good_*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        values = _literals(tree, ("LAYOUTS", "ARGS", "KWARGS", "MUTANTS"))
        if backward_functions(tree) and values.get("MUTANTS", True):
            found.append(Original(_shown(path), (path,), "LAYER", path, tuple(values["LAYOUTS"]),
                                  tuple(values.get("ARGS", ())), dict(values.get("KWARGS", {}))))
    return found


SIBLING = """import importlib.util
import sys
from pathlib import Path

import torch
from torch import nn

_path = Path(__file__).with_name({file!r})
{shadowed}_spec = importlib.util.spec_from_file_location(f"{package}layercheck_mutant_{{abs(hash(str(_path)))}}", _path)
M = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = M
_spec.loader.exec_module(M)


"""


def third_party(folder: Path) -> list[Original]:
    """THIRD_PARTY's originals whose library is installed, their layer files written into
    ``folder``; a note on stderr names the libraries left out."""
    found, missing = [], []
    for index, (name, module, layer, layouts, *classes) in enumerate(THIRD_PARTY):
        mutated = _source_of(module)
        if mutated is None:
            missing.append(module.split(".")[0])
            continue
        wrapper = folder / f"layer{index}.py"
        # A module with relative imports (torchdiffeq's adjoint.py: from .odeint import ...) is
        # loaded as a module of its own package, so that they find the library's modules; the
        # others under a top-level name of their own.
        tree = ast.parse(mutated.read_text())
        relative = any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))
        package = module.rpartition(".")[0] + "." if relative else ""
        # A copy named as its library (sparsemax/sparsemax.py) would stand in for the library
        # where the copy imports it (from sparsemax.utils import ...), its folder being on
        # sys.path: the library is imported first, from the other folders.
        top = module.split(".")[0]
        shadowed = (f"sys.path.remove(str(_path.parent))\nimport {top}\nsys.path.insert(0, str(_path.parent))\n"
                    if mutated.stem == top else "")
        wrapper.write_text(SIBLING.format(file=mutated.name, package=package, shadowed=shadowed) + layer + "\n")
        found.append(Original(name, (wrapper, mutated), "LAYER", mutated, layouts,
                              classes=tuple(classes[0]) if classes else ()))
    if missing:
        print(f"not installed, left out: {', '.join(dict.fromkeys(missing))} (pip install --no-deps entmax "
              "memory-efficient-attention-pytorch einops timm monai pytorch_wavelets PyWavelets mambapy revtorch "
              "reformer-pytorch axial-positional-embedding linear_operator jaxtyping wadler_lindig roma torch-struct "
              "torchdiffeq scipy sparsemax pytorch-tabnet gpytorch e3nn torch-einops-utils memcnn pypose qpth "
              "speechbrain; qpth imports cvxpy)",
              file=sys.stderr)
    return found


def _source_of(module: str) -> Path | None:
    """The file of a dotted module, found from its top-level package without importing the
    package (timm's imports torchvision, which its activations_me.py does not need); None when
    it is not installed."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *rest[:-1], f"{rest[-1]}.py")
    return path if path.is_file() else None


def _literals(tree: ast.Module, names: Sequence[str]) -> dict[str, Any]:
    """Module-level ``NAME = literal`` values (a zoo file's LAYOUTS, ARGS, KWARGS), read without importing it."""
    found = {}
    for node in tree.body:
        target: ast.expr
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in names:
            found[target.id] = ast.literal_eval(value)
    return found


def load(original: Original, source: str, folder: Path) -> type:
    """Write the original's files with ``source`` as the mutated one into ``folder`` and load the
    layer through layercheck's loader. Raises LoadError."""
    folder.mkdir(parents=True)
    for file in original.files:
        (folder / file.name).write_text(source if file == original.mutated else file.read_text())
    try:
        return resolve(f"{folder / original.files[0].name}:{original.attribute}")
    finally:
        # The loader puts the file's folder on sys.path for its sibling imports; hundreds of
        # mutant folders left there would slow every later import down.
        while str(folder) in sys.path:
            sys.path.remove(str(folder))


# -- judging a mutant -------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One input on which a mutant must behave as the original does to be equivalent."""

    description: str
    kind: str  # "random", "boundary" or "partial"
    inputs: tuple[torch.Tensor, ...]
    parameters: dict[str, torch.Tensor] | None = None  # None: the layer's own
    requiring: frozenset[str] | None = None  # the only tensors that require grad; None: all

    def requires(self, name: str) -> bool:
        return self.requiring is None or name in self.requiring


def _normal(shape: Sequence[int], seed: int) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def cases_for(target: Target, seed: int, dtype: torch.dtype = torch.float64) -> list[Case]:
    """Random inputs and parameters at several seeds, boundary inputs, and one tensor requiring grad at a time."""
    own = {name: p.detach().clone() for name, p in target.build(dtype).parameters()}

    def inputs(s: int) -> tuple[torch.Tensor, ...]:
        # drawn as each input is declared (integer indices, positive values, ...)
        return tuple(target.inputs(dtype, seed=s * 100))

    def parameters(s: int) -> dict[str, torch.Tensor]:
        return {name: _normal(p.shape, s * 100 + 50 + k).to(dtype) for k, (name, p) in enumerate(own.items())}

    first = seed * 1000
    found = []
    for s in range(first, first + SEEDS):
        found.append(Case(f"random inputs (seed {s})", "random", inputs(s)))
        if own:
            found.append(Case(f"random inputs and parameters (seed {s})", "random", inputs(s), parameters(s)))
    for values, tail in [(None, "")] + ([(parameters(first), ", random parameters")] if own else []):
        for changed, description in _boundary(inputs(first), values or own, target.specs):
            found.append(Case(description + tail, "boundary", changed, values))
    names = [f"input {i}" for i, spec in enumerate(target.specs) if spec.takes_grad] + list(own)
    if len(names) > 1:
        found += [Case(f"only {name} requires grad", "partial", inputs(first), requiring=frozenset({name}))
                  for name in names]
    return found


def _boundary(inputs: tuple[torch.Tensor, ...], parameters: dict[str, torch.Tensor],
              specs: Sequence[InputSpec]) -> Iterator[tuple[tuple[torch.Tensor, ...], str]]:
    """Zeros, large values, and every other element of an input set to another tensor's values
    (broadcast): the kinks of thresholds and of comparisons between inputs. Inputs declared on a
    domain or of another dtype than floats keep their values (a zero is outside (0, inf))."""
    if not all(spec.plain for spec in specs):
        return
    layouts = [spec.layout for spec in specs]
    yield tuple(torch.zeros_like(x) for x in inputs), "zero inputs"
    yield tuple(x * LARGE for x in inputs), f"inputs x {LARGE:g}"
    others = {f"input {i}": x for i, x in enumerate(inputs)} | parameters
    for i, (x, layout) in enumerate(zip(inputs, layouts)):
        if len(inputs) > 1:
            yield (*inputs[:i], torch.zeros_like(x), *inputs[i + 1:]), f"input {i} zero"
            yield (*inputs[:i], x * LARGE, *inputs[i + 1:]), f"input {i} x {LARGE:g}"
        every_other = (torch.arange(x.numel()) % 2 == 0).view(x.shape)
        for name, value in others.items():
            spread = _spread(value, x, layout) if name != f"input {i}" else None
            if spread is not None:
                yield (*inputs[:i], torch.where(every_other, spread, x), *inputs[i + 1:]), f"input {i} at {name}"


def _spread(value: torch.Tensor, x: torch.Tensor, layout: Layout) -> torch.Tensor | None:
    """``value`` broadcast to ``x``'s shape; a per-channel vector along the layout's C dimension."""
    channel = layout.finddim("C")
    if value.ndim == 1 and channel and value.numel() == x.shape[channel[0]] and x.ndim > 1:
        shape = [1] * x.ndim
        shape[channel[0]] = -1
        value = value.view(shape)
    try:
        return torch.broadcast_to(value, x.shape)
    except RuntimeError:
        return None


def observe(target: Target, case: Case, dtype: torch.dtype = torch.float64) -> dict[str, Any]:
    """What a caller sees of one forward and two backwards over the same graph: the gradients
    in ``.grad``, and its tensors afterwards. An exception is recorded by its type."""
    subject = target.build(dtype)
    parameters = dict(subject.parameters())
    if case.parameters is not None:
        with torch.no_grad():
            for name, value in case.parameters.items():
                parameters[name].copy_(value)
    inputs = [x.clone().requires_grad_(spec.takes_grad and case.requires(f"input {i}"))  # grad=no: a constant
              for i, (x, spec) in enumerate(zip(case.inputs, target.specs))]
    for name, p in parameters.items():
        p.requires_grad_(case.requires(name))
    leaves = [(f"input {i}", x) for i, x in enumerate(inputs)] + list(parameters.items())
    seen: dict[str, Any] = {}
    try:
        outputs = [o for o in tensors_in(subject.forward(inputs)) if o.requires_grad]
    except LayerRaised as exc:
        return {"forward": type(exc.exc).__name__}
    grads = [_normal(o.shape, 7 + j).to(o.dtype) for j, o in enumerate(outputs)]
    for prefix in ("gradient", "second gradient"):
        try:
            torch.autograd.backward(outputs, grads, retain_graph=True)
        except Exception as exc:
            seen[f"{prefix}: backward"] = type(exc).__name__
            continue
        for name, t in leaves:
            seen[f"{prefix} of {name}"] = t.grad
            t.grad = None
    seen |= {f"{name} after backward": t.detach().clone() for name, t in leaves}
    seen |= {f"output {j} after backward": o.detach().clone() for j, o in enumerate(outputs)}
    seen |= {f"grad_output {j} after backward": g for j, g in enumerate(grads)}
    # an input requiring grad reaches the layer as a copy computed from it, as the layer before's
    # output would (Subject.call): a backward that detach_()es it cuts the caller's tensor from its graph
    seen |= {f"input {i} as the layer got it, still on its graph": x.grad_fn is not None
             for i, x in enumerate(subject.fed) if isinstance(x, torch.Tensor) and x.requires_grad}
    return seen


def _same(a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a == b if type(a) is type(b) else False
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not (a.is_floating_point() or a.is_complex()):  # a mask input (XSoftmax's) after backward
        return torch.equal(a, b)
    finite = a[a.isfinite()]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    tolerance = TOLERANCE if a.dtype == torch.float64 else FLOAT32_TOLERANCE
    return torch.allclose(b, a, rtol=tolerance, atol=tolerance * scale, equal_nan=True)


_SLOW_JACOBIAN = 2**25  # entries (256 MiB of float64 each way): 2048,8:BC's 16,384 squared took 13 GB


def gradcheck_verdict(target: Target, *, fast: bool, seed: int) -> str:
    """``passed``, ``failed`` (gradcheck returned False) or ``raised Type: message``: gradcheck,
    float64, on layercheck's generated inputs and every parameter (through functional_call)."""
    subject = target.build(torch.float64)
    inputs = subject.inputs(requires_grad=True)  # those declared grad=no stay constant
    names = [name for name, _ in subject.parameters()]
    parameters = [p.detach().clone().requires_grad_() for _, p in subject.parameters()]
    module = subject.module
    function: Callable[..., Any]
    if module is None:
        function = target.cls.apply  # type: ignore[attr-defined]
    else:
        module.train()

        def function(*tensors: torch.Tensor) -> Any:
            return torch.func.functional_call(module, dict(zip(names, tensors[len(inputs):])),
                                              tuple(tensors[:len(inputs)]))

    if not fast:  # slow mode builds the whole Jacobian, float64, twice (analytical and numerical)
        try:  # a layer that cannot run in float64 raises here as gradcheck would
            with torch.no_grad():
                outputs = function(*inputs, *parameters)
        except Exception as exc:
            return f"raised {type(exc).__name__}: {_flat(str(exc))[:160]}"
        size = sum(t.numel() for t in (*inputs, *parameters))
        size *= sum(t.numel() for t in (outputs if isinstance(outputs, (tuple, list)) else (outputs,))
                    if isinstance(t, torch.Tensor))
        if size > _SLOW_JACOBIAN:
            return f"not run: a Jacobian of {size:,} entries (over {_SLOW_JACOBIAN:,})"
    torch.manual_seed(seed)  # fast mode's random directions
    try:
        passed = torch.autograd.gradcheck(function, (*inputs, *parameters), fast_mode=fast, raise_exception=False)
    except Exception as exc:
        return f"raised {type(exc).__name__}: {_flat(str(exc))[:160]}"
    return "passed" if passed else "failed"


@dataclass(frozen=True)
class Difference:
    """One thing a caller sees differently from the original, on one case."""

    what: str  # "gradient of input 0", "grad_output 0 after backward", "second gradient: backward" (raised)
    case: str
    kind: str


@dataclass(frozen=True)
class Verdict:
    """What became of one mutant."""

    mutant: Mutant
    original: str
    differences: tuple[Difference, ...]  # empty: equivalent
    cases: int
    caught_by: tuple[str, ...] = ()  # layercheck's check[variant]s that failed or errored where the original's did not
    changed: tuple[str, ...] = ()  # other statuses unlike the original's ("gradients[float32]: passed -> skipped")
    fast: str = ""  # gradcheck's verdicts: "passed", "failed", "raised ..."
    slow: str = ""

    @property
    def equivalent(self) -> bool:
        """No difference, or one on boundary inputs only: exactly at a kink (x == 0 for
        ``x > 0`` -> ``x >= 0``), where either one-sided derivative is a valid subgradient."""
        return all(d.kind == "boundary" for d in self.differences)

    @property
    def subgradient(self) -> bool:
        """Equivalent but for the subgradient chosen at a kink (differs on boundary inputs only)."""
        return self.equivalent and bool(self.differences)

    @property
    def on_random(self) -> bool:
        """Whether it differs from the original on random inputs (not only on boundary or partial cases)."""
        return any(d.kind == "random" for d in self.differences)

    def how_it_differs(self) -> str:
        """On which kinds of case, on how many, and in what."""
        kinds = {d.kind for d in self.differences}
        where = "random inputs" if self.on_random else " and ".join(sorted(kinds)) + " cases only"
        cases = len({d.case for d in self.differences})
        what = list(dict.fromkeys(d.what for d in self.differences))
        shown = ", ".join(what[:4]) + (f" and {len(what) - 4} more" if len(what) > 4 else "")
        # An in-place edit can leave the gradients right and corrupt only what the caller holds
        same = "" if any(w.startswith("gradient") for w in what) else " (the first backward's gradients are right)"
        return (f"differs on {where} ({cases} of {self.cases} cases, first: {self.differences[0].case}): "
                f"{shown}{same}")


class Bench:
    """One original: its layer, the cases equivalence is judged on, and its own results, which a
    mutant's are compared with."""

    def __init__(self, original: Original, workdir: Path, seed: int) -> None:
        self.original = original
        self.workdir = workdir
        self.seed = seed
        self.cls = load(original, original.mutated.read_text(), workdir / "original")
        target = self.target(self.cls)
        # in float64, or in float32 for a layer that cannot run in float64 (a buffer filled
        # with float64's largest value in the default dtype)
        self.dtype, self.cases = torch.float64, cases_for(target, seed)
        if "forward" in observe(target, self.cases[0]):
            self.dtype, self.cases = torch.float32, cases_for(target, seed, torch.float32)
        self.reference = [observe(target, case, self.dtype) for case in self.cases]
        self.statuses, self.run_error = self.layercheck(self.cls)
        self.fast = gradcheck_verdict(target, fast=True, seed=seed)
        self.slow = gradcheck_verdict(target, fast=False, seed=seed)
        self.count = 0

    def target(self, cls: type) -> Target:
        return Target(cls, [parse_input(text) for text in self.original.layouts], args=self.original.args,
                      kwargs=self.original.kwargs, seed=self.seed, name=self.original.name)

    def layercheck(self, cls: type) -> tuple[dict[str, Status], str | None]:
        report = run_target(self.target(cls), select(), options=Options(seed=self.seed))
        return {label(r.check, r.variant): r.status for r in report.results}, report.error

    def judge(self, mutant: Mutant) -> Verdict:
        self.count += 1
        try:
            cls = load(self.original, mutant.source, self.workdir / f"mutant{self.count:04d}")
        except LoadError as exc:  # counts as caught by both, as a forward that raises does
            return Verdict(mutant, self.original.name, (Difference(f"load: {exc}", "loading", "random"),),
                           len(self.cases), ("load error",), (), "load error", "load error")
        target = self.target(cls)
        differences = tuple(Difference(what, case.description, case.kind)
                            for case, reference in zip(self.cases, self.reference)
                            for what in _differences(reference, observe(target, case, self.dtype)))
        # An equivalent mutant is judged too: what either tool reports on it is a false alarm.
        statuses, error = self.layercheck(cls)
        if error is not None and self.run_error is None:
            caught: tuple[str, ...] = (f"run error: {error}",)
        else:
            caught = tuple(name for name, status in statuses.items()
                           if status in CAUGHT and self.statuses.get(name) not in CAUGHT)
        changed = tuple(f"{name}: {self.statuses.get(name, 'absent')} -> {status}"
                        for name, status in statuses.items()
                        if status is not self.statuses.get(name) and name not in caught)
        if any(d.what == "forward" for d in differences):  # caught by both, whatever gradcheck would say
            fast = slow = "forward raised"
        else:
            fast = gradcheck_verdict(target, fast=True, seed=self.seed)
            slow = gradcheck_verdict(target, fast=False, seed=self.seed)
        return Verdict(mutant, self.original.name, differences, len(self.cases), caught, changed, fast, slow)


def _differences(reference: dict[str, Any], seen: dict[str, Any]) -> list[str]:
    return [key for key in sorted(set(reference) | set(seen)) if not _same(reference.get(key), seen.get(key))]


# -- the report -------------------------------------------------------------------------------

def _rate(caught: int, total: int) -> str:
    return f"{caught}/{total}" + (f" ({100 * caught / total:.0f}%)" if total else "")


def _row(name: str, verdicts: Sequence[Verdict], gradcheck_applies: Callable[[Verdict], bool]) -> str:
    judged = [v for v in verdicts if not v.equivalent]
    applies = [v for v in judged if gradcheck_applies(v)]
    return (f"{name:44} {len(verdicts):>7} {len(verdicts) - len(judged):>10} "
            f"{sum(v.subgradient for v in verdicts):>13} "
            f"{_rate(sum(bool(v.caught_by) for v in judged), len(judged)):>14} "
            f"{_rate(sum(v.fast != 'passed' for v in applies), len(applies)):>16} "
            f"{_rate(sum(v.slow != 'passed' for v in applies), len(applies)):>16}")


def report(benches: Sequence[Bench], verdicts: Sequence[Verdict], *, every: bool = False) -> None:
    """Print the tables, the lists of misses and the equivalent mutants (with ``every``, every verdict)."""
    clean = {b.original.name for b in benches if b.fast == b.slow == "passed"}

    def applies(v: Verdict) -> bool:
        return v.original in clean

    header = (f"{'original':44} {'mutants':>7} {'equivalent':>10} {'of which kink':>13} {'layercheck':>14} "
              f"{'gradcheck fast':>16} {'gradcheck slow':>16}")
    print(header)
    print("-" * len(header))
    for bench in benches:
        mine = [v for v in verdicts if v.original == bench.original.name]
        print(_row(bench.original.name + ("" if bench.original.name in clean else " *"), mine, applies))
    print("-" * len(header))
    print(_row("all", verdicts, applies))
    comparable = [v for v in verdicts if applies(v)]
    if len(comparable) < len(verdicts):
        print(_row("all where gradcheck passes the original", comparable, applies))
    print(_row("  the same, those differing on random inputs", [v for v in comparable if v.on_random], applies))
    for bench in benches:
        if bench.original.name not in clean:
            print("* gradcheck does not pass the original, or was not run on it "
                  f"(fast: {bench.fast}; slow: {bench.slow}); its mutants are left out of gradcheck's columns")
        broken = [name for name, status in bench.statuses.items() if status in CAUGHT]
        if broken or bench.run_error:
            print(f"! layercheck does not pass {bench.original.name}: {bench.run_error or ', '.join(broken)}")
    print("of which kink: equivalent but for the subgradient picked exactly at a kink (differs only on boundary "
          "inputs: zeros, large values, values at another tensor's)")
    print()
    print("by operator")
    for operator in OPERATORS:
        print(_row(f"  {operator}", [v for v in verdicts if v.mutant.operator == operator], applies))
    print()

    print("layercheck's default suite on each original:")
    for bench in benches:
        by_status: dict[str, list[str]] = {}
        for name, status in bench.statuses.items():
            by_status.setdefault(status.value, []).append(name)
        print(f"  {bench.original.name}: " + "; ".join(f"{status} {', '.join(names)}"
                                                       for status, names in by_status.items()))
    print()

    judged = [v for v in verdicts if not v.equivalent]
    missed = [v for v in judged if not v.caught_by]
    print(f"missed by layercheck ({len(missed)} of {len(judged)}):")
    for v in missed:
        _describe(v, f"gradcheck fast: {v.fast}; slow: {v.slow}"
                     + ("" if applies(v) else " (gradcheck does not pass the original either)"))
        print(f"      layercheck: {'; '.join(v.changed) or 'every check as on the original'}")
    gradcheck_missed = [v for v in judged if applies(v) and "passed" in (v.fast, v.slow)]
    print()
    print(f"missed by gradcheck in fast or slow mode ({len(gradcheck_missed)} of {sum(map(applies, judged))}):")
    for v in gradcheck_missed:
        if v.fast == v.slow:
            said = "gradcheck passes it in fast and slow mode"
        else:
            mode, other, verdict = ("fast", "slow", v.slow) if v.fast == "passed" else ("slow", "fast", v.fast)
            said = f"gradcheck passes it in {mode} mode ({other}: {verdict})"
        _describe(v, f"{said}; layercheck: {', '.join(v.caught_by) or 'missed too'}")
    equivalent = [v for v in verdicts if v.equivalent]
    print()
    print(f"equivalent ({len(equivalent)}; a tool that fails one raises a false alarm):")
    for v in equivalent:
        print(f"  {_mutant_line(v)}")
        print(f"      layercheck: {', '.join(v.caught_by) or 'passes'}; gradcheck fast: {v.fast}; slow: {v.slow}")
    if every:
        print()
        print("every mutant:")
        for v in verdicts:
            said = (("equivalent; " if v.equivalent else "")
                    + f"layercheck: {', '.join(v.caught_by) or 'passes'}; gradcheck fast: {v.fast}; slow: {v.slow}")
            print(f"  {_mutant_line(v)}\n      {said}")


def _mutant_line(v: Verdict) -> str:
    return f"{v.mutant.where():40} {v.mutant.operator:16} {v.mutant.before}  ->  {v.mutant.after}   [{v.original}]"


def _describe(v: Verdict, verdicts: str) -> None:
    print(f"  {_mutant_line(v)}")
    print(f"      {v.how_it_differs()}")
    print(f"      {verdicts}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[],
                        help="one original: its name or a part of it (prelu.py, good_grad_swish); repeated, several")
    parser.add_argument("--max", type=int, default=None, help="at most N mutants per original, drawn with the seed")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs, of the checks and of --max")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the layers are tiny)")
    parser.add_argument("--all", action="store_true", help="list every mutant with its verdicts")
    parser.add_argument("--third-party", action="store_true",
                        help="mutate installed libraries' backward passes instead (THIRD_PARTY: entmax, timm, "
                             "monai, gpytorch, memcnn, ...)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    benches, verdicts = [], []
    with tempfile.TemporaryDirectory(prefix="layercheck_mutants_") as workdir, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mutants make torch warn (in-place, shapes); the figures are the output
        if args.third_party:  # transformers' modules import torchvision, whose wheel may not load here
            sys.path.insert(0, str(Path(__file__).parent))
            from third_party import torchvision_importable
            torchvision_importable()
        every = third_party(Path(workdir)) if args.third_party else originals()
        chosen = every if not args.only else []
        for only in args.only:
            named = [o for o in every if only == o.name] or [o for o in every if only in o.name]
            if len(named) != 1:
                parser.error(f"--only {only} names {len(named)} originals; they are: "
                             + ", ".join(o.name for o in every))
            chosen += [o for o in named if o not in chosen]
        for index, original in enumerate(chosen):
            began = time.perf_counter()
            bench = Bench(original, Path(workdir) / f"original{index}", args.seed)
            mutants = mutants_of(original.mutated.read_text(), original.mutated, original.classes)
            if args.max is not None and len(mutants) > args.max:
                keep = set(random.Random(args.seed).sample(range(len(mutants)), args.max))
                mutants = [m for i, m in enumerate(mutants) if i in keep]
            verdicts += [bench.judge(mutant) for mutant in mutants]
            benches.append(bench)
            print(f"{original.name}: {len(mutants)} mutants, {time.perf_counter() - began:.1f} s", file=sys.stderr)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), seed {args.seed}; "
          f"{len(verdicts)} mutants of {len(benches)} hand-written backward passes\n")
    report(benches, verdicts, every=args.all)
    print()
    print(f"wall time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()

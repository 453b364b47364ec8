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
import itertools
import random
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

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

MUTATED = ("backward", "vjp")
BLOCK_MUTATED = ("backward_pass",)  # a reversible block's hand-written backward, an instance method
OPERATORS = ("sign", "drop_term", "scale", "dims", "compare", "swap_return", "drop_grad_output", "inplace")
REDUCTIONS = ("sum", "mean", "amax", "amin")
COMPARE_SWAPS = {">": (">=", "<"), ">=": (">", "<="), "<": ("<=", ">"), "<=": ("<", ">=")}
INPLACE_BINOPS = {ast.Mult: "mul_", ast.Add: "add_", ast.Sub: "sub_", ast.Div: "div_"}
TOLERANCE = 1e-12
FLOAT32_TOLERANCE = 1e-5  # an original that cannot run in float64 is compared in float32
LARGE = 1e6
SEEDS = 4  # random cases per original: the inputs, and for modules the parameters too
CAUGHT = (Status.FAILED, Status.ERROR)


# -- the mutator ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mutant:
    """One edit of a backward body: what was changed, where, and the whole edited file."""

    operator: str
    file: Path
    line: int
    column: int  # 1-based, in characters
    before: str
    after: str
    source: str

    def where(self) -> str:
        return f"{_shown(self.file)}:{self.line}:{self.column}"


Edit = tuple[int, int, str]  # bytes [start, end) of the original file and the text put there


class Site(NamedTuple):
    """One edit an operator makes: the expression shown before/after, and the byte edits."""

    operator: str
    focus: ast.AST
    edits: list[Edit]
    shown: tuple[str, str] | None = None  # before/after text where the focus's own would be too long


_ATOMIC = (ast.Name, ast.Constant, ast.Call, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Dict, ast.Set)
# Python's operator precedence, as far as backward bodies use it (higher binds tighter).
_BINARY = {ast.Add: 11, ast.Sub: 11, ast.Mult: 12, ast.Div: 12, ast.FloorDiv: 12, ast.Mod: 12, ast.MatMult: 12,
           ast.Pow: 14, ast.BitOr: 8, ast.BitXor: 9, ast.BitAnd: 10, ast.LShift: 10.5, ast.RShift: 10.5}
_UNARY, _ATOM = 13, 100


def _binding(node: ast.AST) -> float:
    """How tightly an expression binds."""
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)]
    if isinstance(node, ast.UnaryOp):
        return 6 if isinstance(node.op, ast.Not) else _UNARY
    if isinstance(node, ast.Compare):
        return 7
    if isinstance(node, ast.BoolOp):
        return 5
    return _ATOM if isinstance(node, _ATOMIC) else 0


def _required(parent: ast.AST | None, node: ast.AST) -> float:
    """How tightly an expression must bind to stand, unparenthesized, where ``node`` stands in ``parent``."""
    if isinstance(parent, ast.BinOp):
        level = _BINARY[type(parent.op)]
        if isinstance(parent.op, ast.Pow):
            return _ATOM if node is parent.left else _UNARY
        return level + 0.5 if node is parent.right else level  # a - (b + c): the right side is strict
    if isinstance(parent, ast.UnaryOp):
        return _UNARY
    if isinstance(parent, (ast.Compare, ast.BoolOp)):
        return _binding(parent) + 0.5
    if isinstance(parent, ast.IfExp):
        return 4
    if isinstance(parent, (ast.Attribute, ast.Subscript, ast.Starred, ast.Await)) \
            or (isinstance(parent, ast.Call) and node is parent.func):
        return _ATOM
    return 0


class _Text:
    """A module's source with byte offsets: ast positions count UTF-8 bytes, not characters."""

    def __init__(self, source: str) -> None:
        self.data = source.encode()
        self.starts = [0]
        for line in source.encode().splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.starts[node.lineno - 1] + node.col_offset,  # type: ignore[attr-defined]
                self.starts[node.end_lineno - 1] + node.end_col_offset)  # type: ignore[attr-defined]

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode()

    def operand(self, node: ast.AST) -> str:
        """The node's text, in parentheses unless it is atomic (a name, call, attribute...): ready
        for ``-`` or ``2 *`` in front."""
        text = self.segment(node)
        return text if isinstance(node, _ATOMIC) else f"({text})"

    def enclosed(self, node: ast.AST) -> bool:
        """Whether the node's text stands directly between ``(`` and ``)``."""
        start, end = self.span(node)
        before = self.data[:start].rstrip()
        return before.endswith(b"(") and self.data[end:].lstrip().startswith(b")")

    def apply(self, edits: Sequence[Edit]) -> str:
        data = self.data
        for start, end, text in sorted(edits, reverse=True):
            data = data[:start] + text.encode() + data[end:]
        return data.decode()


def backward_functions(tree: ast.AST, classes: Sequence[str] = ()) -> list[ast.FunctionDef]:
    """The ``backward`` and ``vjp`` static- and classmethods of every class in a module (and
    undecorated ones whose first parameter is ``ctx``: diffsort's Function is written so, which
    ``Function.apply`` calls through the class all the same), and its reversible blocks'
    ``backward_pass`` methods; of the named ``classes`` only, when some are named."""
    return [item for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) and (not classes or cls.name in classes)
            for item in cls.body
            if isinstance(item, ast.FunctionDef) and ((item.name in MUTATED and (
                _bound(item) is not None or (item.args.args and item.args.args[0].arg == "ctx")))
                or item.name in BLOCK_MUTATED)]


def _bound(fn: ast.FunctionDef) -> str | None:
    """``staticmethod`` or ``classmethod``, as ``fn`` is decorated; None for neither."""
    names = {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}
    return next((name for name in ("staticmethod", "classmethod") if name in names), None)


def mutants_of(source: str, file: Path, classes: Sequence[str] = ()) -> list[Mutant]:
    """Every one-edit mutant of the backward bodies in ``source`` (of the named ``classes``
    only, when some are named), in source order; an edit that gives a file another edit gave
    already is left out."""
    text = _Text(source)
    sites = [site for fn in backward_functions(ast.parse(source), classes) for site in _Sites(fn, text).all()]
    sites.sort(key=lambda site: (text.span(site.focus)[0], OPERATORS.index(site.operator)))
    seen, found = {source}, []
    for site in sites:
        mutated = text.apply(site.edits)
        if mutated in seen:
            continue
        seen.add(mutated)
        start, end = text.span(site.focus)
        if site.shown is not None:
            before, after = site.shown
        else:
            end += sum(len(new.encode()) - (stop - begin) for begin, stop, new in site.edits)
            before, after = text.segment(site.focus), mutated.encode()[start:end].decode()
        line = site.focus.lineno  # type: ignore[attr-defined]
        column = len(text.data[text.starts[line - 1]:start].decode()) + 1
        found.append(Mutant(site.operator, file, line, column, _flat(before), _flat(after), mutated))
    return found


class _Sites:
    """The edits each operator makes in one backward function."""

    def __init__(self, fn: ast.FunctionDef, text: _Text) -> None:
        self.fn = fn
        self.text = text
        skipped = 2 if _bound(fn) == "classmethod" else 1  # ``(cls,) ctx``, then the incoming gradients
        self.grads = {a.arg for a in fn.args.args[skipped:]} | ({fn.args.vararg.arg} if fn.args.vararg else set())
        self.tracked = self.grads | _saved_names(fn)  # tensors an in-place edit would corrupt for the caller
        self.parents = {child: parent for parent in ast.walk(fn) for child in ast.iter_child_nodes(parent)}

    def all(self) -> Iterator[Site]:
        for node in ast.walk(self.fn):
            if isinstance(node, ast.Return) and node.value is not None:
                yield from self.returned(node.value)
        for node in (n for statement in self.fn.body for n in ast.walk(statement)):
            if _is_tuple(node):  # ``(grad_x, None) + (None,) * n`` builds the returned tuple: not arithmetic
                continue
            yield from self.sign(node)
            yield from self.drop_term(node)
            yield from self.scale(node)
            yield from self.dims(node)
            yield from self.compare(node)
            yield from self.swap_return(node)
            yield from self.drop_grad_output(node)
            yield from self.inplace(node)

    def returned(self, value: ast.expr) -> Iterator[Site]:
        """A returned gradient negated, or halved."""
        elements = _tuple_elements(value) if _is_tuple(value) else [value]
        for node in (n for element in elements for n in _gradient_values(element)):
            yield Site("sign", node, [self.replace(node, f"-{self.text.operand(node)}")])
            yield Site("scale", node, [self.replace(node, f"0.5 * {self.text.operand(node)}")])

    def replace(self, node: ast.AST, new: str) -> Edit:
        """Put ``new`` where ``node`` is, in parentheses where the context needs them."""
        parent = self.parents.get(node)
        if _binding(ast.parse(new, mode="eval").body) < _required(parent, node) and not self.text.enclosed(node):
            new = f"({new})"
        return (*self.text.span(node), new)

    def operator_token(self, left: ast.AST, right: ast.AST, token: str, new: str) -> Edit:
        """Replace the operator ``token`` written between two operands (their parentheses kept)."""
        start, end = self.text.span(left)[1], self.text.span(right)[0]
        offset = self.text.data[start:end].index(token.encode())
        return (start + offset, start + offset + len(token), new)

    def terms(self, node: ast.AST) -> list[ast.AST]:
        """The terms of a sum, and the value branches of ``torch.where`` (a sum of masked terms);
        constants excluded."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            found = [node.left, node.right]
        elif isinstance(node, ast.Call) and _is_torch_call(node, "where") and len(node.args) == 3:
            found = list(node.args[1:])
        else:
            return []
        return [term for term in found if not isinstance(term, ast.Constant)]

    def sign(self, node: ast.AST) -> Iterator[Site]:
        """``-e`` -> ``e``; ``a + b`` <-> ``a - b``; a term negated (the left one of a sum: the
        right one's negation is the operator flipped)."""
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and not _is_int(node.operand):
            yield Site("sign", node, [self.replace(node, self.text.segment(node.operand))])  # -1 is a dim, not a value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            token, new = ("+", "-") if isinstance(node.op, ast.Add) else ("-", "+")
            yield Site("sign", node, [self.operator_token(node.left, node.right, token, new)])
        for term in self.terms(node):
            if not (isinstance(node, ast.BinOp) and term is node.right):
                yield Site("sign", term, [self.replace(term, f"-{self.text.operand(term)}")])

    def drop_term(self, node: ast.AST) -> Iterator[Site]:
        """``a + b`` -> ``a`` and -> ``b``; ``a - b`` -> ``a`` and -> ``-b``."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            yield Site("drop_term", node, [self.replace(node, self.text.segment(node.left))])
            if isinstance(node.op, ast.Add):
                yield Site("drop_term", node, [self.replace(node, self.text.segment(node.right))])
            else:
                yield Site("drop_term", node, [self.replace(node, f"-{self.text.operand(node.right)}")])

    def scale(self, node: ast.AST) -> Iterator[Site]:
        for term in self.terms(node):
            yield Site("scale", term, [self.replace(term, f"2 * {self.text.operand(term)}")])

    def dims(self, node: ast.AST) -> Iterator[Site]:
        """Another dim (positional or ``dim=``), ``keepdim`` flipped or added, a dim given to a full reduction."""
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) \
                or node.func.attr not in REDUCTIONS:
            return
        method = not _is_torch_call(node, node.func.attr)
        first = 0 if method else 1
        keywords = {k.arg: k.value for k in node.keywords}
        dim = node.args[first] if len(node.args) > first else keywords.get("dim")
        end = self.text.span(node)[1] - 1  # the closing parenthesis
        if dim is None:
            if len(node.args) == first and not node.keywords:
                yield Site("dims", node, [(end, end, "0" if method else ", 0")])
            return
        for other in _other_dims(dim):
            yield Site("dims", node, [(*self.text.span(dim), other)])
        keepdim = keywords.get("keepdim")
        if isinstance(keepdim, ast.Constant) and isinstance(keepdim.value, bool):
            yield Site("dims", node, [(*self.text.span(keepdim), str(not keepdim.value))])
        elif keepdim is None:
            yield Site("dims", node, [(end, end, ", keepdim=True")])

    def compare(self, node: ast.AST) -> Iterator[Site]:
        """``>`` -> ``>=`` and -> ``<``, ``<`` -> ``<=`` and -> ``>``, and the same from ``>=``, ``<=``."""
        if not isinstance(node, ast.Compare):
            return
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            token = _COMPARE_TOKENS.get(type(op))
            if token is not None:
                for new in COMPARE_SWAPS[token]:
                    yield Site("compare", node, [self.operator_token(operands[i], operands[i + 1], token, new)])

    def swap_return(self, node: ast.AST) -> Iterator[Site]:
        """Two returned gradients (not None) trade places."""
        if not isinstance(node, ast.Return) or not isinstance(node.value, ast.Tuple):
            return
        gradients = [e for e in node.value.elts if not (isinstance(e, ast.Constant) and e.value is None)]
        for a, b in itertools.combinations(gradients, 2):
            i, j = node.value.elts.index(a), node.value.elts.index(b)
            a_text, b_text = self.text.segment(a), self.text.segment(b)
            shown = (f"return[{i}] = {a_text}; return[{j}] = {b_text}",
                     f"return[{i}] = {b_text}; return[{j}] = {a_text}")
            yield Site("swap_return", node.value, [(*self.text.span(a), b_text), (*self.text.span(b), a_text)],
                       shown)

    def drop_grad_output(self, node: ast.AST) -> Iterator[Site]:
        """The incoming gradient replaced by ones, or a multiplication by it dropped."""
        if isinstance(node, ast.Name) and node.id in self.grads and isinstance(node.ctx, ast.Load):
            yield Site("drop_grad_output", node, [self.replace(node, f"torch.ones_like({node.id})")])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for mine, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(mine, ast.Name) and mine.id in self.grads:
                    yield Site("drop_grad_output", node, [self.replace(node, self.text.segment(other))])

    def inplace(self, node: ast.AST) -> Iterator[Site]:
        """An in-place update of grad_output or a saved tensor (``g * m`` -> ``g.mul_(m)``,
        ``x.clamp(...)`` -> ``x.clamp_(...)``, ``torch.sqrt(y)`` -> ``y.sqrt_()``), or a
        ``.clone()`` dropped (``g = grad.clone(); g[mask] = 0`` then writes into grad)."""
        if isinstance(node, ast.BinOp) and type(node.op) in INPLACE_BINOPS and isinstance(node.left, ast.Name) \
                and node.left.id in self.tracked:
            method = f"{node.left.id}.{INPLACE_BINOPS[type(node.op)]}({self.text.segment(node.right)})"
            yield Site("inplace", node, [self.replace(node, method)])
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            return
        func, name = node.func, node.func.attr
        if name == "clone":
            yield Site("inplace", node, [self.replace(node, self.text.segment(func.value))])
        elif not hasattr(torch.Tensor, f"{name}_") or name.endswith("_"):
            return
        elif isinstance(func.value, ast.Name) and func.value.id in self.tracked:
            end = self.text.span(func)[1]
            yield Site("inplace", node, [(end, end, "_")])
        elif _is_torch_call(node, name) and node.args and isinstance(node.args[0], ast.Name) \
                and node.args[0].id in self.tracked:
            rest = [self.text.segment(a) for a in node.args[1:]]
            rest += [f"{k.arg}={self.text.segment(k.value)}" if k.arg else f"**{self.text.segment(k.value)}"
                     for k in node.keywords]
            method = f"{node.args[0].id}.{name}_({', '.join(rest)})"
            yield Site("inplace", node, [self.replace(node, method)])


_COMPARE_TOKENS = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<="}


def _saved_names(fn: ast.FunctionDef) -> set[str]:
    """Names bound from ``ctx.saved_tensors`` (unpacked, or one element of it)."""
    found: set[str] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Assign):
            continue
        value = node.value.value if isinstance(node.value, ast.Subscript) else node.value
        if isinstance(value, ast.Attribute) and value.attr == "saved_tensors":
            for target in node.targets:
                found |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return found


def _gradient_values(node: ast.AST) -> list[ast.AST]:
    """The gradient expressions of one returned element: both sides of ``g if need else None``;
    none in a starred one (torchdiffeq's ``*adj_params``: several gradients, which no edit of
    the expression can negate or halve)."""
    if (isinstance(node, ast.Constant) and node.value is None) or isinstance(node, ast.Starred):
        return []
    if isinstance(node, ast.IfExp):
        return _gradient_values(node.body) + _gradient_values(node.orelse)
    return [node]


def _is_tuple(node: ast.AST) -> bool:
    """A tuple literal, or tuples concatenated or repeated: ``(g, None) + (None,) * n``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        return _is_tuple(node.left) or _is_tuple(node.right)
    return isinstance(node, ast.Tuple)


def _tuple_elements(node: ast.AST) -> list[ast.AST]:
    """The elements of a returned tuple (see _is_tuple), not the tuples inside them: the slice of
    ``grad[:, :n]`` is no gradient."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        return _tuple_elements(node.left) + _tuple_elements(node.right)
    if isinstance(node, ast.Tuple):
        return [e for element in node.elts for e in (_tuple_elements(element) if isinstance(element, ast.Tuple)
                                                     else [element])]
    return []


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _is_torch_call(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch")


def _other_dims(node: ast.AST) -> list[str]:
    """Wrong dims for a reduction: an int shifted by one; a tuple with one dim left out or shifted."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return []
    if isinstance(value, int):
        return [str(value + 1)] + ([str(value - 1)] if value > 0 else [])
    if not isinstance(value, tuple) or not all(isinstance(d, int) for d in value):
        return []
    others = [value[:i] + value[i + 1:] for i in range(len(value))] if len(value) > 1 else []
    others += [(*value[:i], d + 1, *value[i + 1:]) for i, d in enumerate(value) if d + 1 not in value]
    return [str(o[0]) if len(o) == 1 else str(o) for o in others]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


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


# Hand-written backward passes of libraries nobody on the team wrote (``--third-party``): the
# module whose backward is mutated, and the layer built on it, as (name, module, layer source,
# layouts). The layer source is ours: it loads the copy of the module beside it (``SIBLING``),
# so each mutant's copy is the one used.
THIRD_PARTY = [
    ("entmax sparsemax", "entmax.activations", "class LAYER(M.Sparsemax):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)", ("3,5:BC",)),
    ("entmax entmax15", "entmax.activations", "class LAYER(M.Entmax15):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)", ("3,5:BC",)),
    ("entmax bisect, learned alpha", "entmax.root_finding",
     "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.alpha = nn.Parameter(torch.tensor(1.3))\n\n    def forward(self, x):\n"
     "        return M.entmax_bisect(x, self.alpha, dim=-1)", ("3,5:BC",)),
    ("entmax sparsemax_bisect", "entmax.root_finding", "class LAYER(M.SparsemaxBisect):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)", ("3,5:BC",)),
    ("entmax normmax_bisect", "entmax.root_finding", "class LAYER(M.NormmaxBisect):\n    def __init__(self):\n"
     "        super().__init__(alpha=2, dim=-1)", ("3,5:BC",)),
    ("entmax budget_bisect", "entmax.root_finding", "class LAYER(M.BudgetBisect):\n    def __init__(self):\n"
     "        super().__init__(budget=2, dim=-1)", ("3,5:BC",)),
    *[(f"memory-efficient-attention flash{', causal' if causal else ''}",
       "memory_efficient_attention_pytorch.flash_attention",
       "class LAYER(M.FlashAttention):\n    def __init__(self):\n        super().__init__(dim=6, heads=2, "
       f"dim_head=3, causal={causal}, q_bucket_size=2, k_bucket_size=3)", ("2,5,6:BTC",))
      for causal in (False, True)],
    # one key bucket and scale 8: with several buckets, or at its default scale 16, the
    # original's gradient is wrong (gradcheck in float64 agrees), and no mutant could be judged
    ("memory-efficient-attention cosine flash", "memory_efficient_attention_pytorch.cosine_sim_flash_attention",
     "class LAYER(M.FlashAttention):\n    def __init__(self):\n        super().__init__(dim=6, scale=8, heads=2, "
     "dim_head=3, q_bucket_size=2, k_bucket_size=8)", ("2,5,6:BTC",)),
    # zero padding: with "symmetric" or "reflect" the original's gradient is wrong (gradcheck agrees)
    ("pytorch_wavelets AFB1D (zero padding)", "pytorch_wavelets.dwt.lowlevel",
     "import pywt\n\n\nclass LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        wavelet = pywt.Wavelet('db2')\n        h0, h1 = M.prep_filt_afb1d(wavelet.dec_lo, wavelet.dec_hi)\n"
     "        self.register_buffer('h0', h0)\n        self.register_buffer('h1', h1)\n\n"
     "    def forward(self, x):\n        return M.AFB1D.apply(x, self.h0, self.h1, M.mode_to_int('zero'))",
     ("2,3,12:BCT",)),
    ("pytorch_wavelets AFB2D (zero padding)", "pytorch_wavelets.dwt.lowlevel",
     "import pywt\n\n\nclass LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        wavelet = pywt.Wavelet('db2')\n"
     "        filters = M.prep_filt_afb2d(wavelet.dec_lo, wavelet.dec_hi, wavelet.dec_lo, wavelet.dec_hi)\n"
     "        for name, value in zip(('h0_col', 'h1_col', 'h0_row', 'h1_row'), filters):\n"
     "            self.register_buffer(name, value)\n\n"
     "    def forward(self, x):\n        return M.AFB2D.apply(x, self.h0_col, self.h1_col, self.h0_row, self.h1_row, "
     "M.mode_to_int('zero'))", ("2,2,6,6:BCSS",)),
    # a sequence length that is not a power of two: the padded path
    ("mambapy PScan (parallel scan)", "mambapy.pscan",
     "class LAYER(nn.Module):\n    def forward(self, a, x):\n        return M.PScan.apply(a, x)",
     ("2,5,3,2:BTCU values=0:1", "2,5,3,2:BTCU")),
    ("monai MemoryEfficientSwish", "monai.networks.blocks.activation", "LAYER = M.MemoryEfficientSwish",
     ("2,3,4,4:BCSS",)),
    # GP linear algebra: a solve and an inverse quadratic form with a positive definite matrix,
    # through the library's operator with the mutated Function in place of its own for the call
    # (its InvQuadLogdet is left out: below 800 rows it takes a Cholesky path that never calls it)
    *[(f"linear_operator {name}", f"linear_operator.functions._{module}",
       "import linear_operator.operators._linear_operator as _base\n"
       "from linear_operator.operators import DenseLinearOperator\n\n\n"
       "class LAYER(nn.Module):\n    def forward(self, a, b):\n"
       f"        original, _base.{name} = _base.{name}, M.{name}\n        try:\n"
       "            k = DenseLinearOperator(a @ a.mT + torch.eye(a.shape[-1], dtype=a.dtype, device=a.device))\n"
       f"            return {call}\n        finally:\n            _base.{name} = original",
       ("5,5:UU", "5,2:UU"))
      for name, module, call in (("Solve", "solve", "k.solve(b)"), ("InvQuad", "inv_quad", "k.inv_quad(b)"))],
    # reversible stacks: the Function's backward and each block's backward_pass, which rebuilds
    # the block's input from its output and sets its parameters' gradients by side effect
    ("revtorch ReversibleSequence", "revtorch.revtorch",
     "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.blocks = M.ReversibleSequence(nn.ModuleList([M.ReversibleBlock(nn.Linear(3, 3), nn.Sequential(\n"
     "            nn.Linear(3, 3), nn.Tanh())) for _ in range(2)]))\n\n"
     "    def forward(self, x):\n        return self.blocks(x)", ("3,6:BC",)),
    ("reformer-pytorch ReversibleSequence", "reformer_pytorch.reversible",
     "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.blocks = M.ReversibleSequence(nn.ModuleList([nn.ModuleList([nn.Linear(3, 3), nn.Sequential(\n"
     "            nn.Linear(3, 3), nn.Tanh())]) for _ in range(2)]))\n\n"
     "    def forward(self, x):\n        return self.blocks(x)", ("2,4,6:BTC",)),
    *[(f"timm {name}", "timm.layers.activations_me", f"LAYER = M.{name}", ("2,3,4,4:BCSS",))
      for name in ("SwishMe", "MishMe", "HardSigmoidMe", "HardSwishMe", "HardMishMe")],
    # the nearest rotation to a 3x3 matrix, by SVD and by Horn's quaternion eigenvector (each
    # path calls one of the module's Functions; without regularization, whose backward adds a
    # term that is by design no gradient)
    *[(f"roma special_procrustes ({method})", "roma.mappings",
       f"class LAYER(nn.Module):\n    def forward(self, m):\n        return M.special_procrustes(m, method={method!r})",
       ("2,3,3:BUU",))
      for method in ("svd", "horn")],
    # a linear-chain CRF's log partition under the checkpointing semiring, built at each call
    # (the semiring is a local class, which a layer holding it could not be pickled with), of a
    # copy of the input: torch_struct calls requires_grad_() on the log-potentials it is given,
    # which layercheck's input_unchanged reports on the caller's tensor
    ("torch_struct CheckpointSemiring(LogSemiring)", "torch_struct.semirings.checkpoint",
     "import torch_struct\n\n\nclass LAYER(nn.Module):\n    def forward(self, log_potentials):\n"
     "        chain = torch_struct.LinearChain(M.CheckpointSemiring(torch_struct.LogSemiring))\n"
     "        return chain.sum(log_potentials.clone())", ("2,3,2,2:BUUU",)),
    # a neural ODE block through the adjoint method, fixed-step rk4, with time-dependent dynamics,
    # returning the states at two times (its backward solves the adjoint ODE on the same grid,
    # interval by interval, adding each time's incoming gradient; the module's relative imports
    # find torchdiffeq's own, see third_party). The dynamics hold the parameters of the call: the
    # backward calls them after the call has returned, when torch.func.functional_call
    # (gradcheck's, here) has put the layer's own back, and a dynamics module reading its own
    # would give zero parameter gradients.
    ("torchdiffeq odeint_adjoint (rk4)", "torchdiffeq._impl.adjoint",
     "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.hidden = nn.Linear(3, 4)\n        self.out = nn.Linear(4, 3)\n\n"
     "    def forward(self, x):\n"
     "        params = (self.hidden.weight, self.hidden.bias, self.out.weight, self.out.bias)\n\n"
     "        def dynamics(t, y):\n"
     "            return nn.functional.linear(torch.tanh(nn.functional.linear(y, *params[:2]) + t), *params[2:])\n\n"
     "        t = torch.tensor([0.0, 0.5, 1.0], dtype=x.dtype, device=x.device)\n"
     "        states = M.odeint_adjoint(dynamics, x, t, method='rk4', options={'step_size': 0.25}, "
     "adjoint_params=params)\n"
     "        return torch.cat((states[1], states[2]), dim=-1)", ("2,3:BC",)),
    # three dimensions: the backward flattens all but the last, as the forward does
    ("sparsemax Sparsemax", "sparsemax.sparsemax", "class LAYER(M.Sparsemax):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)", ("2,3,5:BTC",)),
    # on a copy of the input: tabnet's sparsemax subtracts the row maxima in place from the tensor
    # it is given, the caller's (input_unchanged fails the original on it, and gradcheck's slow
    # mode, whose finite differences it shifts)
    ("pytorch_tabnet Sparsemax", "pytorch_tabnet.sparsemax", "class LAYER(M.Sparsemax):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)\n\n    def forward(self, x):\n        return super().forward(x.clone())",
     ("3,5:BC",)),
    ("pytorch_tabnet Entmax15", "pytorch_tabnet.sparsemax", "class LAYER(M.Entmax15):\n    def __init__(self):\n"
     "        super().__init__(dim=-1)", ("3,5:BC",)),
    # GP covariances as gpytorch's RBFKernel and MaternKernel call them where the points take no
    # gradient (the Functions refuse points that do): a gradient for the lengthscale only, kept
    # positive by softplus
    ("gpytorch RBFCovariance", "gpytorch.functions.rbf_covariance",
     "from gpytorch.kernels.kernel import sq_dist\n\n\nclass LAYER(nn.Module):\n    def __init__(self):\n"
     "        super().__init__()\n        self.raw_lengthscale = nn.Parameter(torch.tensor([[0.5]]))\n\n"
     "    def forward(self, x1, x2):\n"
     "        return M.RBFCovariance.apply(x1, x2, nn.functional.softplus(self.raw_lengthscale), sq_dist)",
     ("4,2:UU grad=no", "3,2:UU grad=no")),
    *[(f"gpytorch MaternCovariance (nu={nu})", "gpytorch.functions.matern_covariance",
       "from gpytorch.kernels.kernel import dist\n\n\nclass LAYER(nn.Module):\n    def __init__(self):\n"
       "        super().__init__()\n        self.raw_lengthscale = nn.Parameter(torch.tensor([[0.5]]))\n\n"
       "    def forward(self, x1, x2):\n"
       f"        return M.MaternCovariance.apply(x1, x2, nn.functional.softplus(self.raw_lengthscale), {nu}, dist)",
       ("4,2:UU grad=no", "3,2:UU grad=no"))
      for nu in (0.5, 1.5, 2.5)],
    # z in [-1, 2): below -1 the forward is a rational approximation whose own derivative differs
    # from the backward's by 0.05-0.7% (on normal inputs gradcheck's slow mode and layercheck's
    # gradient check fail the original)
    ("gpytorch LogNormalCDF", "gpytorch.functions._log_normal_cdf",
     "class LAYER(nn.Module):\n    def forward(self, z):\n        return M.LogNormalCDF.apply(z)",
     ("4,6:BC values=uniform:-1:2",)),
    ("e3nn soft_unit_step", "e3nn.math._soft_unit_step",
     "class LAYER(nn.Module):\n    def forward(self, x):\n        return M.soft_unit_step(x)", ("2,3,4:BCT",)),
    # losses whose backward gives no gradient for the target: the target is declared grad=no
    ("torch_einops_utils soft-target CE", "torch_einops_utils.stable_softmax",
     "class LAYER(nn.Module):\n    def forward(self, logits, target_logits):\n"
     "        return M.soft_target_cross_entropy_from_logits(logits, target_logits)", ("3,5:BC", "3,5:BC grad=no")),
    ("torch_einops_utils categorical_kl", "torch_einops_utils.stable_softmax",
     "class LAYER(nn.Module):\n    def forward(self, p, q):\n        return M.categorical_kl(p, q)",
     ("3,5:BC", "3,5:BC")),
    ("torch_einops_utils soft-target binary CE", "torch_einops_utils.stable_softmax",
     "class LAYER(nn.Module):\n    def forward(self, logits, target_logits):\n"
     "        return M.soft_target_binary_cross_entropy(logits, target_logits)", ("3,4:BC", "3,4:BC grad=no")),
    # memcnn's reversible couplings through their memory-saving Functions (implementation 0 keeps
    # the input, 1 rebuilds it from the output; the backward recomputes Fm and Gm). Fm and Gm hold
    # fixed weights in buffers: with one of their parameters frozen the backward raises
    # (torch.autograd.grad over every parameter; needs_input_grad fails the original). Left out,
    # their input gradients wrong (layercheck and gradcheck agree): the additive and affine
    # inverses of implementation 0 (the halves of the gradient swapped: grad of (y2, y1)
    # concatenated for y = (y1, y2)) and the affine coupling of implementation 1, forward and
    # inverse (x2's gradient through y2 = s2 * x2 + t2 taken as if s2 were 1)
    *[(f"memcnn {kind}Coupling{' inverse' if inverse else ''} (impl. {impl})",
       f"memcnn.models.{kind.lower()}",
       "class Fixed(nn.Module):\n    def __init__(self, seed):\n        super().__init__()\n"
       "        generator = torch.Generator().manual_seed(seed)\n"
       "        self.register_buffer('weight', torch.randn(2, 2, generator=generator))\n"
       "        self.register_buffer('bias', torch.randn(2, generator=generator))\n\n"
       "    def forward(self, x):\n        return torch.tanh(nn.functional.linear(x, self.weight, self.bias))\n\n\n"
       "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
       f"        self.coupling = M.{kind}Coupling({module.format('Fixed(1)')}, {module.format('Fixed(2)')}, "
       f"implementation_fwd={impl}, implementation_bwd={impl})\n\n"
       f"    def forward(self, x):\n        return self.coupling.{'inverse' if inverse else 'forward'}(x)",
       ("3,4:BC",))
      for kind, module, impl, inverse in (("Additive", "{}", 0, False), ("Additive", "{}", 1, False),
                                          ("Additive", "{}", 1, True),
                                          ("Affine", "M.AffineAdapterNaive({})", 0, False))],
    # the dual-tree complex wavelet transform's Functions (pytorch_wavelets' DTCWTForward and
    # DTCWTInverse, level 1 and the levels after it) at the library's default symmetric padding,
    # called as those modules call them, with their default filters (biorthogonal near_sym_a,
    # q-shift qshift_a) and orientations in dim 2, real and imaginary parts last
    *[(f"pytorch_wavelets DTCWT {name}", "pytorch_wavelets.dtcwt.transform_funcs",
       "from pytorch_wavelets.dtcwt.coeffs import biort, qshift\n"
       "from pytorch_wavelets.dtcwt.lowlevel import prep_filt\n"
       "from pytorch_wavelets.dwt.lowlevel import mode_to_int\n\n\n"
       "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
       f"        for i, h in enumerate({filters}):\n"
       "            self.register_buffer(f'h{i}', prep_filt(h, 1))\n\n"
       f"    def forward(self, {arguments}):\n"
       f"        return M.{name}.apply({arguments}, *self.buffers(), {flags}2, -1, mode_to_int('symmetric'))",
       layouts)
      for name, filters, arguments, flags, layouts in (
          ("FWD_J1", "[biort('near_sym_a')[i] for i in (0, 2)]", "x", "False, ", ("2,1,4,4:BCSS",)),
          ("FWD_J2PLUS", "[qshift('qshift_a')[i] for i in (0, 4, 1, 5)]", "x", "False, ", ("2,1,4,4:BCSS",)),
          ("INV_J1", "[biort('near_sym_a')[i] for i in (1, 3)]", "lows, highs", "",
           ("2,1,4,4:BCSS", "2,1,6,2,2,2:BCUSSU")),
          ("INV_J2PLUS", "[qshift('qshift_a')[i] for i in (2, 6, 3, 7)]", "lows, highs", "",
           ("2,1,4,4:BCSS", "2,1,6,2,2,2:BCUSSU")))],
    # diffsort's normal CDF (a Function written without @staticmethod), through a differentiable
    # sorting network with the Gaussian relaxation
    ("diffsort NormalCDF (DiffSortNet, gaussian)", "diffsort.functional",
     "import diffsort.diffsort as _net\n\n\nclass LAYER(nn.Module):\n    def __init__(self):\n"
     "        super().__init__()\n        self.net = _net.DiffSortNet('odd_even', 4, steepness=10, "
     "distribution='gaussian')\n\n    def forward(self, x):\n        original, _net.sort = "
     "_net.sort, M.sort\n        try:\n            return self.net(x)\n        finally:\n"
     "            _net.sort = original", ("3,4:BC",)),
    # Hugging Face transformers' hand-written backward passes: SEW-D's (DeBERTa's) masked softmax
    # and dropout, BLOOM's GELU (its backward calls the module's bloom_gelu_back), RecurrentGemma's
    # square root whose derivative is clipped (at 1000, beyond these inputs)
    ("transformers SEW-D XSoftmax", "transformers.models.sew_d.modeling_sew_d",
     "class LAYER(nn.Module):\n    def forward(self, x, mask):\n        return M.XSoftmax.apply(x, mask, -1)",
     ("2,4,6:BTC", "2,4,6:BTC dtype=bool values=0.8")),
    ("transformers SEW-D XDropout (StableDropout)", "transformers.models.sew_d.modeling_sew_d",
     "class LAYER(M.StableDropout):\n    def __init__(self):\n        super().__init__(0.25)", ("2,4,6:BTC",)),
    ("transformers BLOOM GeLUFunction", "transformers.models.bloom.modeling_bloom", "LAYER = M.BloomGelu",
     ("2,4,6:BTC",)),
    ("transformers RecurrentGemma SqrtBoundDerivative", "transformers.models.recurrent_gemma.modeling_recurrent_gemma",
     "class LAYER(nn.Module):\n    def forward(self, x):\n        return M.SqrtBoundDerivative.apply(x)",
     ("2,4,6:BTC values=0.1:1",)),
    # PyPose's Lie group operations: each group's exponential, product, inverse, action on points
    # (3- and 4-vectors), logarithm and adjoint, chained from Lie algebra vectors to points and
    # algebra vectors. Its gradient with respect to a group element is a Lie algebra (tangent)
    # one, so a group element alone as an input or output disagrees with finite differences by
    # design (third_party.py); chained so, every gradient is the ordinary one. Sim(3)'s Jacobians
    # are Taylor series cut after a few terms: exact for small algebra vectors only.
    *[(f"pypose {group} chain (Exp, Mul, Inv, Act, Act4, Log, AdjXa)", "pypose.lietensor.operation",
       "class LAYER(nn.Module):\n    def forward(self, r1, r2, p):\n"
       f"        X = M.{group}_Mul.apply(M.{algebra}_Exp.apply(r1), M.{group}_Inv.apply(M.{algebra}_Exp.apply(r2)))\n"
       f"        return (M.{group}_Act.apply(X, p), M.{group}_Log.apply(X), M.{group}_AdjXa.apply(X, r2),\n"
       f"                M.{group}_Act4.apply(X, torch.cat([p, torch.ones_like(p[..., :1])], -1)))",
       (f"3,{size}:BC{values}", f"3,{size}:BC{values}", "3,3:BC"),
       [f"{algebra}_Exp", *(f"{group}_{op}" for op in ("Mul", "Inv", "Act", "Log", "AdjXa", "Act4"))])
      for group, algebra, size, values in (("SO3", "so3", 3, ""), ("SE3", "se3", 6, ""), ("RxSO3", "rxso3", 4, ""),
                                           ("Sim3", "sim3", 7, " values=-0.05:0.05"))],
    # qpth's quadratic program (OptNet): argmin 1/2 z'Qz + p'z subject to Gz <= h, every tensor
    # batched (an unbatched one gets the mean of its gradients over the batch: third_party.py)
    ("qpth QPFunction (batched, inequalities)", "qpth.qp",
     "class LAYER(nn.Module):\n    def forward(self, p, m, g, z):\n"
     "        q = m @ m.transpose(-1, -2) + torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)\n"
     "        e = torch.empty(0, dtype=p.dtype, device=p.device)\n"
     "        return M.QPFunction(verbose=-1)(q, p, g, (g @ z.unsqueeze(-1)).squeeze(-1) + 1, e, e)",
     ("3,4:BC", "3,4,4:BCU", "3,2,4:BUC", "3,4:BC"), ["QPFunctionFn"]),
    # SpeechBrain's quaternion linear layer with its hand-written backward (Parcollet's thesis):
    # the input's and the four weight components' gradients through the Hamilton product, and
    # the bias's (its original fails needs_input_grad: third_party.py)
    ("speechbrain QuaternionLinearCustomBackward", "speechbrain.nnet.quaternion_networks.q_ops",
     "class LAYER(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        g = torch.Generator().manual_seed(0)\n"
     "        self.r, self.i, self.j, self.k = (nn.Parameter(0.5 * torch.randn(2, 3, generator=g)) for _ in range(4))\n"
     "        self.bias = nn.Parameter(0.1 * torch.randn(12, generator=g))\n\n"
     "    def forward(self, x):\n"
     "        return M.QuaternionLinearCustomBackward.apply(x, self.r, self.i, self.j, self.k, self.bias)",
     ("5,8:BC",), ["QuaternionLinearCustomBackward"]),
]
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
            print(f"* gradcheck does not pass the original (fast: {bench.fast}; slow: {bench.slow}); "
                  "its mutants are left out of gradcheck's columns")
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

"""The mutation operators of benchmarks/mutants.py: one-edit mutants of a hand-written backward
pass (sign, dropped or scaled term, reduction dims, comparison, swapped returns, dropped
grad_output, in place), found in its source by ast and written back as text."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

ROOT = Path(__file__).resolve().parent.parent
MUTATED = ("backward", "vjp")
BLOCK_MUTATED = ("backward_pass",)  # a reversible block's hand-written backward, an instance method
OPERATORS = ("sign", "drop_term", "scale", "dims", "compare", "swap_return", "drop_grad_output", "inplace")
REDUCTIONS = ("sum", "mean", "amax", "amin")
COMPARE_SWAPS = {">": (">=", "<"), ">=": (">", "<="), "<": ("<=", ">"), "<=": ("<", ">=")}
INPLACE_BINOPS = {ast.Mult: "mul_", ast.Add: "add_", ast.Sub: "sub_", ast.Div: "div_"}


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

"""The explored draws: inputs the fixed draws never make, within what the layouts declare.

A draw varies the sizes of the B, S and T dimensions (batch sizes 1, 3 and other odd and prime
ones; odd lengths, powers of two plus or minus one, across the 16/32/64/128 block boundaries) and
the values of the standard-normal floating inputs (exact zeros, ties, repeated and constant rows,
large (×10) and small (×0.001) magnitudes, identity matrices where two dimensions are square, one-hot rows).
C and U dimensions, inputs drawn from another distribution (their domain) and sizes the layer
fixes (:class:`Dims`, probed by the engine) stay as declared. Everything is seeded: the same seed
gives the same draws.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from layercheck.parent.inputs import InputSpec, Values
from layercheck.target.subject import draw

VARIED = "BST"
"""The labels of the dimensions whose sizes a draw varies."""

BATCH_SIZES = (3, 1, 5, 2, 7, 13)
LENGTHS = (1, 3, 5, 7, 17, 15, 33, 31, 65, 63, 129, 127, 9, 11, 13, 2)
KINDS = ("zeros", "identity", "ties", "one-hot", "repeated rows", "constant rows", "zero rows", "large", "small")
"""The special values, in the order the first draws try them at the declared sizes."""

MAX_ELEMENTS = 1 << 18  # a draw's floating inputs together, at most


@dataclass(frozen=True)
class Group:
    """Dimensions that share a label and a declared size across the inputs: they vary together
    (a batch, a sequence length the query and its mask share, a square image's sides)."""

    label: str
    size: int
    where: tuple[tuple[int, int], ...]  # (input index, dimension)

    @property
    def name(self) -> str:
        return f"{self.label}={self.size}"


def groups(specs: Sequence[InputSpec]) -> list[Group]:
    """Every dimension of the inputs, grouped by label and declared size."""
    found: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for index, spec in enumerate(specs):
        for dim, (label, size) in enumerate(zip(spec.layout.format, spec.layout.size)):
            found.setdefault((label, size), []).append((index, dim))
    return [Group(label, size, tuple(where)) for (label, size), where in found.items()]


def resized(specs: Sequence[InputSpec], sizes: dict[Group, int]) -> tuple[InputSpec, ...]:
    """The inputs with each group's dimensions at its new size."""
    result = []
    for index, spec in enumerate(specs):
        size = list(spec.layout.size)
        for group, value in sizes.items():
            for i, dim in group.where:
                if i == index:
                    size[dim] = value
        layout = dataclasses.replace(spec.layout, size=tuple(size))
        result.append(dataclasses.replace(spec, layout=layout))
    return tuple(result)


@dataclass(frozen=True)
class Draw:
    """One explored draw: the inputs' layouts, the special values (or "normal"), the seed."""

    index: int
    specs: tuple[InputSpec, ...]
    kind: str
    seed: int

    def describe(self) -> str:
        layouts = " ".join(str(spec.layout) for spec in self.specs)
        values = "" if self.kind == "normal" else f", {self.kind}"
        return f"{layouts}{values}, seed {self.seed}"

    def tensors(self) -> list[torch.Tensor]:
        """The draw's inputs (float64 for floating ones, as Target.base_inputs holds them)."""
        return [values(spec, self.kind, self.seed * 7919 + i) for i, spec in enumerate(self.specs)]


def plan(specs: Sequence[InputSpec], count: int, seed: int, varied: Sequence[Group]) -> Iterator[Draw]:
    """``count`` draws, deterministic for ``seed``: first every special value at the declared sizes,
    then one size changed at a time (each group through its sizes), then sizes and values mixed."""
    rng = random.Random(seed * 1_000_033 + 50)
    declared = _elements(specs)
    budget = max(declared, min(MAX_ELEMENTS, max(4 * declared, 1 << 12)))  # never less than declared
    made: list[tuple[tuple[InputSpec, ...], str]] = []
    kinds = [kind for kind in KINDS if any(applies(spec, kind) for spec in specs)]
    for kind in kinds:
        made.append((tuple(specs), kind))
    options = {group: [n for n in (BATCH_SIZES if group.label == "B" else LENGTHS) if n != group.size]
               for group in varied}
    single = [(group, n) for k in range(max((len(v) for v in options.values()), default=0))
              for group, sizes in options.items() for n in sizes[k:k + 1]]
    for group, n in single:
        made.append((resized(specs, {group: n}), "normal"))
    made = [(chosen, kind) for chosen, kind in made if _elements(chosen) <= budget]
    index = tries = 0
    while index < count and tries < 20 * count:
        tries += 1
        if index < len(made):
            chosen, kind = made[index]
        else:
            sizes = {group: rng.choice(options[group]) for group in varied if rng.random() < 0.6}
            chosen, kind = resized(specs, sizes), rng.choice(["normal", "normal", *kinds])
            if _elements(chosen) > budget:
                continue
        yield Draw(index, chosen, kind, seed + 1 + index)
        index += 1


def applies(spec: InputSpec, kind: str) -> bool:
    """Whether special values ``kind`` can be given to this input: a floating, standard-normal
    one (another distribution declares a domain), with the dimensions the kind needs."""
    if not spec.floating or spec.values != Values():
        return False
    if kind == "identity":
        return _square(spec) is not None
    if kind in ("repeated rows", "constant rows", "one-hot", "zero rows"):
        return len(spec.layout.size) >= 2 and spec.layout.size[-1] > 1
    return True


def _square(spec: InputSpec) -> tuple[int, int] | None:
    """The last two dimensions that are not the batch and have one size, if any."""
    dims = [d for d in range(len(spec.layout.size)) if d != spec.layout.batch_dim]
    for a in reversed(range(len(dims))):
        for b in reversed(range(a)):
            if spec.layout.size[dims[a]] == spec.layout.size[dims[b]] > 1:
                return dims[b], dims[a]
    return None


def values(spec: InputSpec, kind: str, seed: int) -> torch.Tensor:
    """An input's values for a draw: ``draw`` as the spec says, then ``kind``'s special values
    where they apply to it."""
    x = draw(spec, seed)
    if kind == "normal" or not applies(spec, kind):
        return x
    gen = torch.Generator().manual_seed(seed + 17)
    if kind == "zeros":  # about half the elements, never all of them
        zeros = torch.rand(x.shape, generator=gen, dtype=torch.float64) < 0.5
        zeros.view(-1)[0] = False
        return torch.where(zeros, 0.0, x)
    if kind == "ties":
        return torch.round(x * 2) / 2
    if kind == "large":
        return x * 10
    if kind == "small":
        return x * 1e-3
    if kind == "identity":
        square = _square(spec)
        assert square is not None
        a, b = square
        n = spec.layout.size[a]
        shape = [1] * x.dim()
        shape[a] = shape[b] = n
        eye = torch.eye(n, dtype=torch.float64).reshape(shape)
        return eye.expand(x.shape).clone()
    if kind == "one-hot":
        hot = torch.randint(0, x.shape[-1], x.shape[:-1], generator=gen)
        scale = torch.where(torch.rand(x.shape[:-1], generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0)
        return torch.nn.functional.one_hot(hot, x.shape[-1]).to(torch.float64) * scale.unsqueeze(-1)
    if kind == "constant rows":
        return x[..., :1].expand(x.shape).clone()
    if kind == "zero rows":
        rows = torch.rand(x.shape[:-1], generator=gen, dtype=torch.float64) < 0.5
        rows.view(-1)[0] = False  # never every row
        return torch.where(rows.unsqueeze(-1), 0.0, x)
    # repeated rows: every observation (or every slice along the first dimension) equals the first
    dim = spec.layout.batch_dim if spec.layout.batch_dim is not None else 0
    first = x.narrow(dim, 0, 1)
    return first.expand(x.shape).clone()


def _elements(specs: Sequence[InputSpec]) -> int:
    """The floating inputs' elements, together."""
    return sum(math.prod(spec.layout.size) for spec in specs if spec.floating)

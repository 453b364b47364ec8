"""A layer, and its first gradient, as fixed functions of their floating tensors: what the
engine (``engine.py``) differences and what the checks take analytic gradients of."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from layercheck.numerics.engine import NotDifferentiable
from layercheck.numerics.probes import Moved, chunk_sums, materialized
from layercheck.parent.errors import LayerRaised
from layercheck.support.compare import real_view
from layercheck.target.calling import backpropagate
from layercheck.target.frames import user_trace
from layercheck.target.seeding import seeded
from layercheck.target.subject import Mode, Subject
from layercheck.target.tensors import Outputs, backward_nodes

# Note [widened islands]
#     Differencing a float32 island at float32's step (Note [float32 islands] in trace.py)
#     crosses a kink wherever one lies within that step of an element. A layer that takes a
#     statistic in float32 and an elementwise maximum beside it (timm's EvoNorm2dB0: x.float().var()
#     and left.max(right)) has a kink on every element, and its right gradient then disagrees with
#     the differences by a percent. So when the differences disagree with a layer that computes in
#     a lower precision inside, the reference is taken again with the layer's casts to a lower
#     floating dtype kept in float64 (``LayerFunction.widen``): the same operations, so the same
#     derivative formulas (autograd's and a hand-written backward's), without the rounding, and
#     differenced at the float64 step where kinks are rarely crossed. Its verdict is used only
#     when it agrees (reference.py, _widened): a backward wrong in its formulas is wrong in
#     float64 too, so this clears failures the step made, not ones the backward made. A cast it
#     cannot widen (a copy into a float32 buffer) leaves an island, and the first verdict stands.
#     Tensors the layer allocates in the default dtype (``torch.zeros(shape)`` for running sums:
#     lucidrains' cosine-similarity flash attention) are made in float64 too. Where the island's
#     rounding noise swamps the derivative at every usable step, so that the differences give
#     no verdict at all, the widened reference's verdict is the check's, whichever it is.
_LOWER_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


class _Widening(TorchDispatchMode):
    """Turns an operation's ``dtype=`` of a lower floating precision into float64 where it is
    given float64 tensors (``x.float()``, ``x.to(torch.bfloat16)``, ``sum(dtype=...)``), or
    tensors of no floating dtype (``(x > 0).float()``: a spike that multiplies a float64
    threshold in float32)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if kwargs.get("dtype") in _LOWER_FLOATS:
            tensors = [t for t in tree_leaves(args) if isinstance(t, torch.Tensor)]
            if any(t.dtype == torch.float64 for t in tensors) or (
                    tensors and not any(t.is_floating_point() or t.is_complex() for t in tensors)):
                kwargs = {**kwargs, "dtype": torch.float64}
        return func(*args, **kwargs)


class _Holding(TorchDispatchMode):
    """Note [straight-through estimators] in trace.py: records, in order, the values the layer
    detaches with gradients on (``held`` None), or hands the recorded ones back in their place
    (``held`` given); :meth:`matched` is False when the call detached other values than were
    recorded (another number, size or dtype), and the values were then the layer's own."""

    def __init__(self, held: list[torch.Tensor] | None) -> None:
        super().__init__()
        self.recorded: list[torch.Tensor] = []
        self.held = held
        self.mismatch = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is not torch.ops.aten.detach.default or not torch.is_grad_enabled() \
                or not isinstance(out, torch.Tensor) or not out.is_floating_point():
            return out
        if self.held is None:
            self.recorded.append(out.clone())
            return out
        k = len(self.recorded)
        self.recorded.append(out)
        if k >= len(self.held) or self.held[k].shape != out.shape or self.held[k].dtype != out.dtype:
            self.mismatch = True
            return out
        return self.held[k].clone()  # a layer may write into what it detached

    def matched(self) -> bool:
        """Whether the call detached, one for one, the values held."""
        return not self.mismatch and len(self.recorded) == len(self.held or ())


@contextmanager
def _widened() -> Iterator[None]:
    """Lower-precision ``dtype=`` of operations on float64 tensors kept in float64, and tensors
    allocated in the default dtype (``torch.zeros(shape)`` for running sums) made in float64."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with _Widening():
            yield
    finally:
        torch.set_default_dtype(default)


class LayerFunction:
    """A layer as a fixed function of its floating inputs and learnable parameters.

    Every evaluation starts from the same state (buffers and attributes rewound) and the same random
    stream (the subject reseeds each call), so dropout, running statistics and recurrent
    state do not change the function between evaluations.
    """

    def __init__(self, subject: Subject, inputs: Sequence[torch.Tensor], *, mode: Mode = Mode.FORWARD) -> None:
        """``mode``: the training forward, or (Mode.EVAL) the forward in eval mode."""
        self.subject = subject
        self.mode = mode
        self.inputs = [x.detach() for x in inputs]
        self.parameters = subject.parameters()
        specs = subject.target.specs
        # the inputs that take a gradient: floating ones not declared constant (not masks or indices)
        self.input_slots = [i for i, x in enumerate(self.inputs) if x.is_floating_point()
                            and (i >= len(specs) or specs[i].takes_grad)]
        self.names = [f"input {i}" for i in self.input_slots] + [f"parameter {n!r}" for n, _ in self.parameters]
        # a complex parameter (a Fourier layer's weights) is differenced as its real and imaginary
        # parts: its real view, and its gradient's (PyTorch's .grad of z is dL/dRe z + i dL/dIm z)
        self.point = [self.inputs[i] for i in self.input_slots] + [real_view(p).detach().clone()
                                                                    for _, p in self.parameters]
        # the interval each slot must stay in when differenced (Note [domains] in engine.py)
        self.domains = [specs[i].values.domain if i < len(specs) else None for i in self.input_slots]
        self.domains += [None] * len(self.parameters)
        self.state = subject.checkpoint()
        self.positions: list[int] = []  # where the last call's floating outputs sit among its tensor outputs
        self.widen = False  # Note [widened islands]: the layer's casts to a lower precision kept in float64
        # Note [straight-through estimators] in trace.py: the values the layer detaches at the
        # point, handed back in their place at every point it is called at; None: its own
        self.held: list[torch.Tensor] | None = None
        self.held_matched = True  # False once a call detached other values than those held
        # Note [surrogate gradients] in reference.py: the Functions whose gradient the
        # analytic gradients take as zero, the derivative of their piecewise-constant forward
        self.cut: tuple[type, ...] = ()

    def __len__(self) -> int:
        return len(self.point)

    def call(self, values: Sequence[torch.Tensor | Moved] | None = None, *, requires: Sequence[bool] | None = None,
             around: Callable[[list[torch.Tensor]], AbstractContextManager[Any]] | None = None,
             returned: list[Any] | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Run the training forward at ``values`` (the point by default), tensors flagged in
        ``requires`` requiring grad (all by default); ``around(slots)`` is entered around the
        layer's own call only (not around setting its inputs and parameters), given the tensors
        that stand for the slots. Returns the floating outputs and those tensors (input leaves,
        then the parameters); ``returned`` receives what the layer returned, as it is."""
        values = self.point if values is None else values
        requires = [True] * len(self) if requires is None else list(requires)
        self.subject.rewind(self.state)
        inputs: list[torch.Tensor] = list(self.inputs)
        leaves = []
        for slot, index in enumerate(self.input_slots):
            # A layer that writes into its input (or a backward into a saved input) must not move
            # the point every later evaluation starts from (backward_pure reports it). An input
            # that requires grad reaches the layer as a copy already (Subject.call), or as the
            # moved point computed from it (a new tensor: the step is the copy); one that does
            # not is copied here.
            value = values[slot]
            if isinstance(value, Moved) and requires[slot] and _addable(value):
                leaf = value.value.detach().requires_grad_(True)
                inputs[index] = torch.add(leaf, value.direction, alpha=value.step)
            else:
                leaf = (value.tensor() if isinstance(value, Moved) else value).detach()
                leaf = (leaf if requires[slot] else leaf.clone()).requires_grad_(requires[slot])
                inputs[index] = leaf
            leaves.append(leaf)
        offset = len(self.input_slots)
        flags = [p.requires_grad for _, p in self.parameters]
        try:
            with torch.no_grad():
                for (_, p), value in zip(self.parameters, values[offset:]):
                    if isinstance(value, Moved) and _addable(value):
                        torch.add(value.value, value.direction, alpha=value.step, out=real_view(p))
                    else:
                        real_view(p).copy_(value.tensor() if isinstance(value, Moved) else value)
            for (_, p), flag in zip(self.parameters, requires[offset:]):
                p.requires_grad_(flag)
            slots = leaves + [p for _, p in self.parameters]
            holding = _Holding(self.held) if self.held is not None else nullcontext()
            with around(slots) if around is not None else nullcontext(), self._widening(), holding:
                raw = self.subject.call(self.mode, inputs)
            if returned is not None:
                returned.append(raw)
            if isinstance(holding, _Holding) and not holding.matched():
                self.held_matched = False
            tensors = Outputs.of(raw).tensors
            self.positions = [i for i, t in enumerate(tensors) if t.is_floating_point()]
        finally:
            # what the layer got (input copies) is no one's here: held, it would keep a
            # full-size copy alive as long as the function (the shared gradient references)
            self.subject.fed = []
            for (_, p), flag in zip(self.parameters, flags):
                p.requires_grad_(flag)
        return [tensors[i] for i in self.positions], leaves + [p for _, p in self.parameters]

    def hold(self) -> int:
        """Record the values the layer detaches at the point and hand them back in their place
        from now on (Note [straight-through estimators] in trace.py); returns how many. Raises
        LayerRaised."""
        recording = _Holding(None)
        self.release()
        try:
            self.call(around=lambda slots: recording)
        finally:
            self.reset()
        self.held, self.held_matched = recording.recorded, True
        return len(self.held)

    def release(self) -> None:
        """The layer's detached values are its own again."""
        self.held, self.held_matched = None, True

    def _widening(self) -> AbstractContextManager[Any]:
        return _widened() if self.widen else nullcontext()

    def reset(self) -> None:
        """Put the parameters and the state back at the point."""
        with torch.no_grad():
            for (_, p), value in zip(self.parameters, self.point[len(self.input_slots):]):
                real_view(p).copy_(value)
        self.subject.rewind(self.state)

    def gradient(self, cotangents: Sequence[torch.Tensor | None] | Callable[[list[torch.Tensor]], list[torch.Tensor]],
                 *, requires: Sequence[bool] | None = None,
                 watch: Callable[[list[torch.Tensor]], AbstractContextManager[Any]] | None = None,
                 around: Callable[[list[torch.Tensor]], AbstractContextManager[Any]] | None = None,
                 called: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None) -> Backprop:
        """One forward and backward at the point: the analytic gradient of sum_k <w_k, y_k> for
        every slot flagged in ``requires`` (None where autograd gives none, and for slots not
        flagged). ``cotangents`` has one entry per floating output (None leaves an output out),
        or makes them from the outputs. ``around(slots)`` is entered around the layer's call
        (see :meth:`call`), ``watch(outputs)`` around the backward. Raises LayerRaised (phase
        "forward" or "backward"). ``called``: what :meth:`call` returned at the point with every
        slot requiring grad, when that forward was made already (its backward is taken here)."""
        requires = [True] * len(self) if requires is None else list(requires)
        # a frozen parameter stays frozen through backward, as in training: a non-reentrant
        # checkpoint recomputes the forward there and refuses a graph that differs from its own
        frozen = [p.requires_grad for _, p in self.parameters]
        for (_, p), flag in zip(self.parameters, requires[len(self.input_slots):]):
            p.requires_grad_(flag)
        try:
            outputs, leaves = self.call(requires=requires, around=around) if called is None else called
            if self.cut:
                _cut(outputs, self.cut)
            given = list(cotangents(outputs) if callable(cotangents) else cotangents)
            if len(given) != len(outputs):
                raise ValueError(f"{len(given)} cotangents for {len(outputs)} floating outputs")
            # a copy of each cotangent: a backward that writes into grad_output must not change ours
            pairs = [(y, w.to(y.dtype, copy=True)) for y, w in zip(outputs, given)
                     if w is not None and y.requires_grad]
            values = [y.detach().clone() for y in outputs]  # before backward, which may write into a saved output
            grads: list[torch.Tensor | None] = [None] * len(self)
            if pairs and any(requires):
                with seeded(self.subject.target.seed, self.subject.device), (watch or _no_watch)(outputs), \
                        self._widening():
                    grads = [None if g is None else real_view(g) for g in backpropagate(pairs, leaves)]
        finally:
            for (_, p), flag in zip(self.parameters, frozen):
                p.requires_grad_(flag)
        return Backprop(grads, values, [y.requires_grad for y in outputs], given, list(self.positions))

    def terms(self, values: Sequence[torch.Tensor | Moved], cotangents: Sequence[torch.Tensor]) -> torch.Tensor:
        """Partial sums of <w_k, y_k> in float64, ``CHUNKS`` per output: shape (outputs, CHUNKS).
        Raises NotDifferentiable when the floating outputs change in number or size."""
        outputs, _ = self.call(values)
        _check_sizes(outputs, cotangents)
        return torch.stack([chunk_sums(y, w) for y, w in zip(outputs, cotangents)])


@dataclass(frozen=True)
class Backprop:
    """The result of :meth:`LayerFunction.gradient`."""

    grads: list[torch.Tensor | None]  # per slot
    outputs: list[torch.Tensor]  # floating outputs, detached
    differentiable: list[bool]  # per floating output: did it require grad
    cotangents: list[torch.Tensor | None]
    positions: list[int] = field(default_factory=list)  # of the outputs among the call's tensor outputs


class GradientFunction:
    """A layer's first gradient as a function one derivative up: F(θ, w) = <∇_θ <w, y(θ)>, u>,
    of the inputs and parameters θ and the output cotangents w, for a fixed contraction u over
    θ (see ``layercheck/checks/higher_order.py``, Note [second derivatives]).

    ``FiniteDifferences`` differences it exactly as it does a :class:`LayerFunction` (both are
    a ``DifferentiableFunction``); its analytic gradient, which those differences judge, is the
    double backward (:meth:`gradient`). F is one row of partial sums over every tensor's
    elements together, so that a jump of the first gradient where a step crosses a kink lands
    in one or two of the CHUNKS and leaves the median of the noise estimate alone (a tensor of
    its own, e.g. a per-channel threshold, would be all its row)."""

    def __init__(self, fn: LayerFunction, cotangents: Sequence[torch.Tensor | None],
                 contraction: Sequence[torch.Tensor]) -> None:
        """``cotangents``: one per floating output (None leaves one out); ``contraction``: u, one
        per slot of ``fn``."""
        self.fn = fn
        # copies: they are handed to the first backward at the point, which may change them
        self.cotangents = [None if w is None else w.detach().clone() for w in cotangents]
        self.outputs = [k for k, w in enumerate(self.cotangents) if w is not None]
        # on the layer's device (--on), where the first gradient it contracts is
        self.contraction = torch.cat([u.detach().to(torch.float64).reshape(-1)
                                      for u in contraction]).to(fn.subject.device)
        self.point = list(fn.point) + [self.cotangents[k].detach() for k in self.outputs]  # type: ignore[union-attr]
        self.names = list(fn.names) + [f"grad_output {k}" for k in self.outputs]
        self.domains = list(fn.domains) + [None] * len(self.outputs)
        self.detached = False  # set by gradient(): no slot of the first gradient required grad
        self.delayed = False  # set by gradient(): the first gradient's graph holds a node that raises

    def __len__(self) -> int:
        return len(self.point)

    def first(self, values: Sequence[torch.Tensor], *,
              create_graph: bool = False) -> tuple[list[torch.Tensor | None], list[torch.Tensor]]:
        """The first gradient at ``values`` (θ, then one cotangent per kept output) and the
        tensors that stand for θ. Raises LayerRaised("backward"), and NotDifferentiable when
        the floating outputs change in number or size."""
        count = len(self.fn)
        outputs, leaves = self.fn.call(values[:count])
        given = list(self.cotangents)
        for k, w in zip(self.outputs, values[count:]):
            given[k] = w
        _check_sizes(outputs, given)
        pairs = [(y, w) for y, w in zip(outputs, given) if w is not None and y.requires_grad]
        if not pairs:
            return [None] * count, leaves
        with seeded(self.fn.subject.target.seed, self.fn.subject.device):
            try:
                found = torch.autograd.grad([y for y, _ in pairs], leaves, [w.to(y.dtype) for y, w in pairs],
                                            allow_unused=True, create_graph=create_graph)
            except Exception as exc:
                raise LayerRaised("backward", exc, user_trace(exc)) from exc
        return list(found), leaves

    def reset(self) -> None:
        self.fn.reset()

    def terms(self, values: Sequence[torch.Tensor | Moved], cotangents: Sequence[torch.Tensor]) -> torch.Tensor:
        """Partial sums of <first gradient, u> in float64: shape (1, CHUNKS)."""
        grads, _ = self.first(materialized(values))
        flat = torch.cat([(torch.zeros_like(v) if g is None else real_view(g.detach())).to(torch.float64).reshape(-1)
                          for g, v in zip(grads, self.fn.point)])
        return chunk_sums(flat, cotangents[0]).unsqueeze(0)

    def gradient(self) -> list[torch.Tensor | None]:
        """The double backward at the point: the gradient of F over θ and the cotangents (None
        where F does not depend on a tensor through autograd). Raises LayerRaised: phase
        "backward" (the first one, with ``create_graph=True``) or "double backward"."""
        count = len(self.fn)
        ws = [w.clone().requires_grad_(True) for w in self.point[count:]]
        try:
            grads, leaves = self.first(self.fn.point[:count] + ws, create_graph=True)
            pieces = [(real_view(g).reshape(-1) * u).sum() for g, u in zip(grads, self._split(self.contraction))
                      if g is not None and g.requires_grad]
            self.detached = not pieces
            if self.detached:
                return [None] * len(self)
            # @once_differentiable (and a missing double-backward formula) gives the first gradient
            # a node that raises when reached; a gradient over the layer's tensors never reaches
            # the once_differentiable one (it hangs off stand-in leaves), so it would pass for a
            # zero second derivative: look for such nodes instead.
            self.delayed = any(type(node).__name__ in ("DelayedError", "Error") for node in backward_nodes(pieces))
            with seeded(self.fn.subject.target.seed, self.fn.subject.device):
                try:
                    found = torch.autograd.grad(sum(pieces[1:], pieces[0]), leaves + ws, allow_unused=True)
                except Exception as exc:
                    raise LayerRaised("double backward", exc, user_trace(exc)) from exc
        finally:
            self.fn.reset()
        return [None if g is None else real_view(g.detach()) for g in found]

    def _split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return list(flat.split([v.numel() for v in self.fn.point]))


def _cut(outputs: Sequence[torch.Tensor], functions: tuple[type, ...]) -> None:
    """Make the backward of every node of ``functions`` in the outputs' graph pass zeros on."""
    for node in backward_nodes(outputs):
        if getattr(node, "_forward_cls", None) in functions:
            node.register_hook(_zeros)


def _zeros(grad_inputs: tuple[torch.Tensor | None, ...], grad_outputs: Any) -> tuple[torch.Tensor | None, ...]:
    return tuple(None if g is None else torch.zeros_like(g) for g in grad_inputs)


def _addable(moved: Moved) -> bool:
    """Whether value + step·direction can be computed in one addition in the value's dtype."""
    return moved.direction.dtype == moved.value.dtype and moved.direction.device == moved.value.device


def _no_watch(outputs: list[torch.Tensor]) -> AbstractContextManager[Any]:
    return nullcontext()


def _check_sizes(outputs: Sequence[torch.Tensor], cotangents: Sequence[torch.Tensor | None]) -> None:
    """Raises NotDifferentiable unless the outputs match the cotangents in number and size
    (None matches any size)."""
    if len(outputs) != len(cotangents) or any(w is not None and y.shape != w.shape
                                               for y, w in zip(outputs, cotangents)):
        raise NotDifferentiable("the number or sizes of the floating outputs change when the inputs move by "
                                "a relative 1e-8: finite differences do not apply to this layer")


# Note [padding rows]
#     nn.Embedding(padding_idx=i) (and nn.EmbeddingBag) reads row i like any other, yet PyTorch
#     gives it no gradient, by design: the padding entry stays as it was, zeros by default.
#     Finite differences of that row move the output wherever index i is looked up, and the
#     weight's gradient was called wrong (analytic 0 against the numeric change of row i) in
#     one of NLP's commonest layers. With scale_grad_by_freq=True PyTorch divides each row's
#     gradient by how often the batch looks it up, by design too. So the gradient check holds
#     those rows of every such submodule's weight at the point — the padding rows, and the rows
#     looked up more than once at the point where the gradient is scaled — its directions leave
#     them alone, and a note says so. The other rows are judged as before.


def held_rows(fn: LayerFunction) -> dict[int, torch.Tensor]:
    """Per parameter slot, the rows of an nn.Embedding or nn.EmbeddingBag weight whose gradient
    PyTorch leaves out or scales by design (Note [padding rows]), as a mask of its elements."""
    module = fn.subject.module
    if module is None:
        return {}
    slots = {name: len(fn.input_slots) + k for k, (name, _) in enumerate(fn.parameters)}
    weights = {sub: f"{owner}.weight" if owner else "weight" for owner, sub in module.named_modules()
               if isinstance(sub, (nn.Embedding, nn.EmbeddingBag))}
    tables = [(sub, slots[name]) for sub, name in weights.items() if name in slots]
    held: dict[int, torch.Tensor] = {}
    looked_up: dict[int, list[torch.Tensor]] = {}

    def watch(slot: int) -> Callable[..., None]:
        def hook(_: nn.Module, args: tuple[Any, ...]) -> None:
            looked_up.setdefault(slot, []).append(args[0].detach().reshape(-1).cpu())
        return hook

    hooks = [sub.register_forward_pre_hook(watch(slot)) for sub, slot in tables if sub.scale_grad_by_freq]
    if hooks:
        try:
            fn.call()
        finally:
            fn.reset()
            for hook in hooks:
                hook.remove()
    for sub, slot in tables:
        mask = torch.zeros(fn.point[slot].shape, dtype=torch.bool)
        if sub.padding_idx is not None:
            mask[sub.padding_idx] = True
        if slot in looked_up:
            counts = torch.bincount(torch.cat(looked_up[slot]), minlength=mask.shape[0])
            mask[counts > 1] = True
        if mask.any():
            held[slot] = mask
    return held

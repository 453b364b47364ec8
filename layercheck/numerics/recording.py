"""One forward and backward of a layer, recorded: its gradients, what its hand-written
backwards returned before autograd's checks and casts (:class:`BackwardRecorder`), and, when
asked for, what it computed (its precision trace, numerics/trace.py)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from layercheck.numerics.functions import Backprop, LayerFunction
from layercheck.numerics.trace import Trace, Tracing, trace
from layercheck.parent.errors import LayerRaised
from layercheck.support.compare import dtype_name
from layercheck.support.context import Context
from layercheck.support.runs import cotangents, layer_is_float32
from layercheck.target.subject import Subject
from layercheck.target.tensors import custom_functions


@dataclass(frozen=True)
class RawGradient:
    """One gradient as a hand-written backward returned it, before autograd's checks, its
    summing over broadcast dimensions and its dtype cast."""

    function: str
    position: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    expected_shape: tuple[int, ...]
    expected_dtype: torch.dtype

    @property
    def wrong(self) -> bool:
        """A dtype autograd casts silently, or a size autograd cannot sum to the input's."""
        return self.dtype != self.expected_dtype or (self.shape != self.expected_shape and not self.broadcast)

    @property
    def broadcast(self) -> bool:
        """A size autograd sums to the input's (the input broadcasts to it): right, but wasteful."""
        if self.shape == self.expected_shape or len(self.expected_shape) > len(self.shape):
            return False
        tail = self.shape[len(self.shape) - len(self.expected_shape):]
        return all(e in (1, s) for e, s in zip(self.expected_shape, tail))

    def waste(self) -> str:
        """The note for a broadcast-shaped gradient: its size and the memory it costs."""
        extra = math.prod(self.shape) - math.prod(self.expected_shape)
        size = extra * torch.empty((), dtype=self.dtype).element_size()
        return (f"{self.function}.backward returns the gradient of its input {self.position} at size {self.shape} "
                f"for an input of size {self.expected_shape}; autograd sums it down, so it is right, but it holds "
                f"{extra} element(s) ({_bytes(size)}) more than needed at this layout: consider "
                f"grad.sum_to_size({self.expected_shape})")

    def describe(self) -> str:
        return (f"{self.function}.backward returned a gradient of size {self.shape} {dtype_name(self.dtype)} "
                f"for its input {self.position}, which is {self.expected_shape} {dtype_name(self.expected_dtype)}")

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "position": self.position, "size": list(self.shape),
                "dtype": dtype_name(self.dtype), "expected_size": list(self.expected_shape),
                "expected_dtype": dtype_name(self.expected_dtype)}


class BackwardRecorder:
    """Records what the hand-written backward of every ``autograd.Function`` in the graph
    returns. The Function classes found in the graph get their ``backward`` (or ``vjp``)
    wrapped while the backward runs, and put back afterwards: autograd's engine validates and
    reshapes a node's outputs before any hook sees them."""

    def __init__(self) -> None:
        self.records: list[RawGradient] = []
        self.functions: list[str] = []

    @contextlib.contextmanager
    def __call__(self, outputs: list[torch.Tensor]) -> Iterator[None]:
        classes = custom_functions(outputs)
        self.functions = [cls.__name__ for cls in classes]
        missing = object()
        patched = []
        try:
            for cls in classes:
                name = "vjp" if cls.vjp is not torch.autograd.Function.vjp else "backward"
                patched.append((cls, name, cls.__dict__.get(name, missing)))
                setattr(cls, name, staticmethod(self._wrap(cls, getattr(cls, name))))
            yield
        finally:
            for cls, name, saved in reversed(patched):
                if saved is missing:
                    delattr(cls, name)
                else:
                    setattr(cls, name, saved)

    def _wrap(self, cls: type, original: Any) -> Any:
        def backward(node: Any, *grads: Any) -> Any:
            result = original(node, *grads)
            self._record(cls.__name__, node, result if isinstance(result, tuple) else (result,))
            return result

        return backward

    def _record(self, function: str, node: Any, returned: tuple[Any, ...]) -> None:
        # backward returns one entry per argument of forward, non-tensor ones included; the
        # graph has one edge per tensor argument, None for those that do not require grad. The
        # arguments that need a gradient and the edges that lead somewhere pair up in order.
        needed = [i for i, needs in enumerate(node.needs_input_grad) if needs]
        edges = [(edge, index) for edge, index in node.next_functions if edge is not None]
        if len(needed) != len(edges):
            return  # nothing to align by: autograd itself reports what is wrong
        for position, (edge, index) in zip(needed, edges):
            grad = returned[position] if position < len(returned) else None
            if not isinstance(grad, torch.Tensor):
                continue
            try:
                meta = edge._input_metadata[index]
            except (AttributeError, IndexError, RuntimeError):
                continue  # this torch does not expose what autograd expects: nothing to compare
            self.records.append(RawGradient(function, position, tuple(grad.shape), grad.dtype,
                                            tuple(meta.shape), meta.dtype))

    def wrong(self) -> list[RawGradient]:
        return [r for r in self.records if r.wrong]

    def broadcast(self) -> list[RawGradient]:
        return [r for r in self.records if r.broadcast and not r.wrong]


@dataclass
class Analytic:
    """One forward and backward of a fresh layer on the generated inputs, with seeded
    cotangents on all its floating outputs; the backward's error, if it raised; and, when
    asked for, what the run computed (Note [float32 islands] in numerics/trace.py)."""

    fn: LayerFunction
    result: Backprop | None
    error: LayerRaised | None
    recorder: BackwardRecorder
    trace: Trace | None = None

    @property
    def grads(self) -> list[torch.Tensor | None]:
        assert self.result is not None
        return self.result.grads

    def check_ran(self) -> Backprop:
        """The backward's result; re-raises its error (the layer's fault: a failure)."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def analytic_run(ctx: Context, subject: Subject, inputs: list[torch.Tensor] | None = None, *,
                 traced: bool = False) -> Analytic:
    """One forward and backward of ``subject`` on ``inputs`` (its generated ones by default),
    with what its hand-written backwards return recorded. ``traced``: run it under a
    :class:`Tracing` recorder too, which then costs the gradient check no run of its own; a
    layer that raises under the recorder is run again without it, so that what it raises is
    its own."""
    fn = LayerFunction(subject, subject.inputs(share=True) if inputs is None else inputs)
    if traced:
        tracing = Tracing()
        recorder = BackwardRecorder()

        @contextlib.contextmanager
        def watch(outputs: list[torch.Tensor]) -> Iterator[None]:
            with recorder(outputs), tracing.backward(outputs):
                yield

        try:
            result = fn.gradient(lambda outputs: cotangents(ctx, outputs, copy=False), watch=watch,
                                 around=tracing.forward)
            if all(g is not None for g in result.grads):
                return Analytic(fn, result, None, recorder, tracing.result())
            fn.reset()
            plain = _untraced(ctx, fn)
            if plain.result is None or all(g is not None or h is None
                                           for g, h in zip(result.grads, plain.result.grads)):
                fn.reset()
                return Analytic(fn, result, None, recorder, tracing.result())
            return plain  # Note [a recorder that takes a gradient away]
        except LayerRaised:
            fn.reset()
    return _untraced(ctx, fn, traced=traced)


# Note [a recorder that takes a gradient away]
#     The float64 run is recorded under a dispatch mode (the precision tracer), and a dispatch
#     mode can change what autograd records: a custom operator with a Python CPU kernel and no
#     backward (torch.library.impl alone) gets torch's not-implemented fallback node under the
#     mode, which gives its inputs no gradient, while without the mode autograd records the
#     kernel's own operations (and warns). The gradient check then saw "no gradient at all"
#     where backward_runs saw one, left the tensor out and said backward_runs reported it: the
#     tensor was never judged. So a traced run that gives some tensor no gradient is run again
#     without the recorder, and where that run gives one, it is the run judged (its precision
#     traced apart, as an untraced run's is).


# Note [the training forward handed over]
#     forward_runs calls the training forward of a fresh layer on the generated inputs; the
#     gradient checks' float32 run (float32_run in numerics/reference.py), which backward_runs
#     asks for next, begins with the very same call where the layer is float32 already (a fresh
#     float32 copy of it is then the layer itself: the same constructor call, seed, values, inputs
#     and random stream). So where backward_runs runs, forward_runs makes its call as the float32
#     run's LayerFunction makes it and hands the function and the call's outputs over; the run
#     takes its backward from there: one full-size forward fewer. As with Note [the layout's first
#     batch] in support/runs.py, it is the same object after the same call, not a run deemed equal,
#     so a layer that differs from call to call is seen as before. Elsewhere (a layer in another
#     dtype, backward_runs not run, a run without forward_runs before it) each makes its own call.
_HANDED = "layercheck.gradients.float32.forward"


def training_forward(ctx: Context, readers: tuple[str, ...]) -> Any:
    """forward_runs' call: what the training forward of a fresh layer returns on the generated
    inputs, made as the float32 run makes it and handed over where one of ``readers`` (the float32
    run's) will ask for that run (Note [the training forward handed over]). Raises LayerRaised."""
    if not (any(ctx.planned(reader) for reader in readers) and layer_is_float32(ctx)):
        subject = ctx.fresh()
        return subject.forward(subject.inputs(requires_grad=True))
    subject = ctx.fresh(torch.float32)
    fn = LayerFunction(subject, subject.inputs(share=True))
    returned: list[Any] = []
    called = fn.call(returned=returned)
    ctx.shared(_HANDED, lambda: (fn, called), readers=readers)
    return returned[0]


def handed_run(ctx: Context) -> Analytic | None:
    """The float32 run's backward from forward_runs' call, where it was handed over (Note [the
    training forward handed over]); None where it was not."""
    handed = ctx.take(_HANDED)
    return None if handed is None else _untraced(ctx, handed[0], called=handed[1])


def _untraced(ctx: Context, fn: LayerFunction, *, traced: bool = False,
              called: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None) -> Analytic:
    """One forward and backward of ``fn`` as training runs it (``called``: its forward made
    already); ``traced``: its precision traced by a forward of its own."""
    recorder = BackwardRecorder()
    try:
        result = fn.gradient(lambda outputs: cotangents(ctx, outputs, copy=False), watch=recorder, called=called)
    except LayerRaised as exc:
        if exc.phase != "backward":
            raise
        return Analytic(fn, None, exc, recorder)
    return Analytic(fn, result, None, recorder, trace(fn) if traced else None)


@dataclass(frozen=True)
class KeptGradients:
    """What a run keeps once its inputs, outputs and cotangents are let go: the gradients, the
    names and sizes and dtypes of the tensors they belong to (on the meta device), whether
    each floating output required grad, and what the hand-written backwards returned."""

    names: list[str]
    tensors: list[torch.Tensor]
    grads: list[torch.Tensor | None]
    differentiable: list[bool]
    recorder: BackwardRecorder

    @classmethod
    def of(cls, analytic: Analytic) -> KeptGradients:
        result = analytic.check_ran()
        return cls(analytic.fn.names, [t.to("meta") for t in analytic.fn.point], result.grads,
                   result.differentiable, analytic.recorder)


def _bytes(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return f"{count} bytes"

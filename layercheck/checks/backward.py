"""What a backward pass must leave alone, and what it must compose with: a backward that writes
into the tensors it is given passes every gradient comparison made on a fresh graph, and
corrupts the training step of everything that shares them."""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from layercheck._sdk_internal import cotangents, custom_functions, failing, path_allowance, path_tolerances, user_trace
from layercheck.sdk import (
    EXACT,
    FORWARD,
    Allowance,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    Outputs,
    Subject,
    assert_close,
    check,
    largest,
    mismatch,
    reference_forward,
    seeded,
)
from layercheck.target.calling import backpropagate
from layercheck.target.tensors import backward_nodes


@dataclass
class _Pass:
    """One forward of a fresh layer with inputs that require grad, and a fingerprint of
    everything a backward is handed, taken before it runs."""

    subject: Subject
    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]  # floating outputs that require grad
    cotangents: list[torch.Tensor]
    kept: dict[str, _Kept]  # name -> the tensor before backward, as a fingerprint
    live: dict[str, torch.Tensor]  # name -> the tensor itself
    tracked: frozenset[str] = frozenset()  # the inputs, as the layer got them, on the graph before backward
    # saved tensors the forward made for its backward alone (Note [whose tensor])
    internal: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Kept:
    """What a tensor was: its size, dtype and a fingerprint of its bits (a weighted sum of
    them, which any change of one element moves), or a copy where no fingerprint can be taken.
    A fingerprint instead of a copy of each tensor a backward is handed: four or five
    full-size copies fewer while the backward runs."""

    shape: torch.Size
    dtype: torch.dtype
    digest: int | None
    copy: torch.Tensor | None = None

    @classmethod
    def of(cls, t: torch.Tensor) -> _Kept:
        t = t.detach()
        digest = _digest(t)
        return cls(t.shape, t.dtype, digest, t.clone() if digest is None else None)

    def same(self, now: torch.Tensor) -> bool | None:
        """Whether ``now`` has the same bits; None when only a copy can tell."""
        return None if self.digest is None else _digest(now.detach()) == self.digest

    def changed(self, now: torch.Tensor) -> bool:
        """Whether ``now`` differs in size, dtype or any bit (the copy tells where there is one)."""
        if now.shape != self.shape or now.dtype != self.dtype:
            return True
        same = self.same(now)
        if same is not None:
            return not same
        assert self.copy is not None
        return mismatch(self.copy, now.detach(), EXACT) is not None


_INTEGER_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_DIGEST_CHUNK = 1 << 20


def _digest(t: torch.Tensor) -> int | None:
    """sum_i bits_i * w_i modulo 2**64 over the tensor's elements in order, with odd weights
    w_i that depend on the position (so that a change of any single element, or elements
    swapped, changes it); computed a chunk at a time, without a full-size copy of a
    contiguous tensor. None for what has no such view (sparse, a subclass, complex)."""
    try:
        if type(t) is not torch.Tensor or t.layout is not torch.strided or t.is_complex():
            return None
        flat = t.reshape(-1)
        bits = flat.view(_INTEGER_OF_SIZE[flat.element_size()])
    except (KeyError, RuntimeError, TypeError):
        return None
    weights = _weights(bits.device) if bits.numel() >= _DIGEST_CHUNK else _odd_weights(bits.numel(), bits.device)
    total = 0
    for index, start in enumerate(range(0, bits.numel(), _DIGEST_CHUNK)):
        chunk = bits[start:start + _DIGEST_CHUNK]  # a view of the tensor: never written
        partial = int(torch.mul(chunk, weights[:chunk.numel()]).sum())
        total = (total + partial * (2 * index + 1)) % (1 << 64)
    return total


@functools.lru_cache(maxsize=2)
def _weights(device: torch.device) -> torch.Tensor:
    """The weights of a whole chunk, kept: a large tensor's digest takes several chunks."""
    return _odd_weights(_DIGEST_CHUNK, device)


def _odd_weights(n: int, device: torch.device) -> torch.Tensor:
    """n odd int64 weights that differ from position to position (a small tensor's own: no
    chunk-sized work for it)."""
    return torch.arange(n, dtype=torch.int64, device=device).mul_(0x9E3779B97F4A7C1).bitwise_or_(1)


def _forward(ctx: Context, subject: Subject, inputs: list[torch.Tensor]) -> _Pass:
    with failing("before backward"):
        outputs = [y for y in Outputs.of(subject.forward(inputs)).floating if y.requires_grad]
    ws = cotangents(ctx, outputs)
    live: dict[str, torch.Tensor] = {}
    for i, x in enumerate(subject.fed):  # the inputs as the layer got them
        if isinstance(x, torch.Tensor):
            live[f"input {i}"] = x
    for k, (y, w) in enumerate(zip(outputs, ws)):
        live[f"output {k}"] = y
        live[f"grad_output {k}"] = w
    for node in backward_nodes(outputs):
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            name = type(node).__name__.removesuffix("Backward")
            for j, saved in enumerate(_saved(node)):
                live.setdefault(f"tensor {j} that {name} saved for backward", saved)
    kept = {name: _Kept.of(t) for name, t in live.items()}
    tracked = frozenset(name for name, t in live.items() if name.startswith("input ") and t.grad_fn is not None)
    callers = _callers_storages(subject, [t for name, t in live.items() if not name.startswith("tensor ")])
    internal = frozenset(name for name, t in live.items()
                         if name.startswith("tensor ") and _storage_of(t) not in callers)
    return _Pass(subject, inputs, outputs, ws, kept, live, tracked, internal)


# Note [whose tensor]
#     A backward may write only into what nobody else reads. The caller's tensors are the inputs
#     (as the layer got them), the outputs, grad_output and the layer's parameters, buffers and
#     tensor attributes: a write into one of them (or into a view of one, which shares its
#     memory) changes what the caller, the optimizer or another use of the output reads next.
#     A tensor the forward made and saved for its backward alone (soft-DTW's dynamic-programming
#     table) is read by nothing but a later backward over the same graph: writing into it is the
#     backward's own business (soft-DTW sets the table's borders again in every backward), and a
#     fault only when that later backward then gives another gradient, which the second
#     backward here measures.


def _callers_storages(subject: Subject, tensors: Sequence[torch.Tensor]) -> set[int]:
    """The memory of the caller's tensors (Note [whose tensor]): ``tensors`` (inputs, outputs,
    grad_output), and the layer's parameters, buffers and tensor attributes."""
    held = list(tensors)
    if subject.module is not None:
        held += [*subject.module.parameters(), *subject.module.buffers()]
        for module in subject.module.modules():
            for value in vars(module).values():
                items = value if isinstance(value, (list, tuple)) else (value,)
                held += [t for t in items if isinstance(t, torch.Tensor)]
    return {_storage_of(t) for t in held}


def _storage_of(t: torch.Tensor) -> int:
    """The address of a tensor's memory, which its views share (its id where it has none)."""
    try:
        return int(t.untyped_storage().data_ptr()) or id(t)
    except (RuntimeError, NotImplementedError, TypeError):
        return id(t)


def _saved(node: Any) -> Sequence[torch.Tensor]:
    try:
        return [t for t in node.saved_tensors if isinstance(t, torch.Tensor)]
    except RuntimeError:  # already freed, or saved tensors that cannot be unpacked here
        return []


def _backward(run: _Pass, *, retain: bool) -> list[torch.Tensor | None]:
    leaves = [*run.inputs, *(p for _, p in run.subject.parameters())]
    if retain:
        return _backward_again(run.subject, run.outputs, run.cotangents, leaves)
    with seeded(run.subject.target.seed), failing("in backward"):
        return backpropagate(list(zip(run.outputs, run.cotangents)), leaves)


def _backward_again(subject: Subject, outputs: Sequence[torch.Tensor], cotangents: Sequence[torch.Tensor],
                    leaves: Sequence[torch.Tensor], *, what: str = "in backward", hint: str = "",
                    ) -> list[torch.Tensor | None]:
    """One backward over a graph kept for more (``retain_graph=True``): the gradients of ``leaves``
    read from ``.grad``, as an optimizer reads them, and cleared before and after."""
    for leaf in leaves:
        leaf.grad = None
    with seeded(subject.target.seed), failing(what, hint=hint):
        try:
            torch.autograd.backward(list(outputs), list(cotangents), retain_graph=True)
        except Exception as exc:
            raise LayerRaised("backward", exc, user_trace(exc)) from exc
    grads = [None if leaf.grad is None else leaf.grad.detach().clone() for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    return grads


_HINTS = {
    "grad_output": "autograd hands the same grad_output to every use of an output. Fix: clone it before changing it "
                   "(grad = grad.clone()), or use out-of-place operations",
    "output": "an output is the caller's tensor. Fix: compute from a clone, or save the input and recompute",
    "input": "an input is the caller's tensor: it may feed other layers",
    "tensor": "that saved tensor is the caller's (an input, an output, a parameter or buffer, or a view of one), "
              "which the caller and a second backward read again. Fix: compute out of place, or save a copy",
}


@check(
    "backward_pure",
    title="backward leaves what it is given unchanged, repeats, and composes",
    requires=("forward_runs", "backward_runs"),
    uses=(FORWARD,),  # the rounding floor of the float32 gradients
    tolerances=path_tolerances("relative difference between the gradients of two uses of the layer summed and of "
                               "each use alone, and between two backward passes over one graph"),
    any_batch=True,
)
def backward_pure(ctx: Context) -> str:
    """Runs forward and backward and requires the backward to leave unchanged what it is
    given: the incoming gradient (grad_output), the inputs, the outputs the forward returned
    and the tensors a hand-written backward saved; then back-propagates a second time over the
    same graph (``retain_graph=True``) and requires the same gradients; then applies the layer
    to two inputs, sums the outputs and requires each input to get the gradient it gets alone.

    A backward that masks grad_output in place returns the right gradient and corrupts the
    gradient of everything else that shares that grad_output: for ``f(x1) + f(x2)``, x1's
    gradient comes out wrong. One that updates a saved output in place (``y.sqrt_()``) changes
    the user's output and breaks a second backward (gradient penalties, ``retain_graph``). Fix:
    out-of-place operations in backward, or ``.clone()`` what you change.
    """
    subject = ctx.fresh()
    run = _forward(ctx, subject, subject.inputs(requires_grad=True))
    if not run.outputs:
        raise CheckSkipped("no floating output requires grad: there is no backward to look at (backward_runs says "
                           "why)")
    first = _backward(run, retain=True)
    written = _assert_unchanged(ctx, run)
    second = _backward(run, retain=True)
    names = [*(f"gradient of input {i}" for i in range(len(run.inputs))),
             *(f"gradient of parameter {n!r}" for n, _ in run.subject.parameters())]
    pairs = [(name, a, b) for name, a, b in zip(names, first, second) if a is not None or b is not None]
    home = ctx.target.home  # a gradient one backward gave and the other did not: compared with zero there
    try:
        assert_close([a if a is not None else torch.zeros((), device=home) for _, a, _ in pairs],
                     [b if b is not None else torch.zeros((), device=home) for _, _, b in pairs],
                     names=[n for n, _, _ in pairs],
                     what="a second backward over the same graph (retain_graph=True) vs the first",
                     labels=("first", "second"), allowance=path_allowance(ctx, FORWARD))
    except CheckFailed as exc:
        if not written:
            raise
        raise CheckFailed(f"backward writes into {', '.join(written)} (made by the forward for the backward alone, "
                          "not the caller's), and not idempotently: a second backward over the same graph (gradient "
                          f"penalties, retain_graph) reads what the first left there; {exc.message}. Fix: write the "
                          "backward's own results into a new tensor, or write only values the next backward writes "
                          "again before reading", written=written, **exc.details) from None
    saved = sum(1 for n in run.live if n.startswith("tensor"))
    checked = (f"backward leaves grad_output, {len(run.inputs)} input(s), {len(run.outputs)} output(s) and "
               f"{saved - len(written)} saved tensor(s) unchanged, repeats over one graph")
    if written:
        checked += (f" (it writes into {len(written)} saved tensor(s) of its own, which only a backward reads, and "
                    "gives the same gradients again)")
    del run, first, second, pairs  # the composition's tensors take their place, not join them
    return f"{checked}, and {_compose(ctx)}"


def _assert_unchanged(ctx: Context, run: _Pass) -> list[str]:
    """Every tensor of the caller's that the backward was handed is as it was (Note [whose
    tensor]); returns the saved tensors of the backward's own that it changed, which only a
    second backward can judge. Where a fingerprint moved, the tensor as it was comes from the
    same forward run again (a fresh layer, the same inputs and seeded output gradients) and is
    compared exactly, for the message. An input the layer got attached to the graph is still
    attached: a backward that calls ``detach_()`` on it cuts the caller's tensor from the graph
    that made it."""
    detached = sorted(name for name in run.tracked if run.live[name].grad_fn is None)
    if detached:
        raise CheckFailed(f"backward detached {', '.join(detached)} in place (detach_() on what the layer was "
                          "given, or on a tensor it saved that is that input): the caller's tensor is cut from the "
                          "graph that made it, so what is computed from it after this backward (a second loss, a "
                          "gradient penalty) no longer reaches the layers before. Fix: detach() (a new tensor) "
                          "instead of detach_()",
                          tensors=detached)
    again: _Pass | None = None
    written = []
    for name, kept in run.kept.items():
        now = run.live[name].detach()
        if name in run.internal:
            if kept.changed(now):
                written.append(name)
            continue
        if now.shape != kept.shape or now.dtype != kept.dtype:
            raise CheckFailed(f"backward changed {name} in place: {tuple(kept.shape)} became {tuple(now.shape)}",
                              tensor=name)
        if kept.same(now):
            continue
        if kept.copy is not None:
            before = kept.copy
        else:
            if again is None:
                subject = ctx.fresh()
                again = _forward(ctx, subject, subject.inputs(requires_grad=True))
            if name not in again.live or again.live[name].shape != now.shape:  # a forward that varies
                raise CheckFailed(f"backward modified {name} in place (its bits changed); "
                                  f"{_HINTS[name.split(' ')[0]]}", tensor=name)
            before = again.live[name].detach()
        found = mismatch(before, now, EXACT)
        if found is not None:
            hint = _HINTS[name.split(" ")[0]]
            raise CheckFailed(
                f"backward modified {name} in place: at index {tuple(found['index'])} {found['expected']:.6g} became "
                f"{found['actual']:.6g} ({found['mismatched']} of {found['elements']} elements); {hint}",
                tensor=name, **found)
    return written


def _compose(ctx: Context) -> str:
    """f(x1) + f(x2) on one layer: each input's gradient equals the one it gets alone, and the
    parameters get the sum of both (the second use runs after the first, as in the sum)."""
    both = ctx.fresh()
    inputs1 = both.inputs(requires_grad=True)
    inputs2 = [_rolled(x) for x in inputs1]
    with failing("applied twice with the outputs summed"):
        out1 = Outputs.of(both.forward(inputs1)).floating
        out2 = Outputs.of(both.forward(inputs2)).floating
    if [y.shape for y in out1] != [y.shape for y in out2]:
        return "its two uses give outputs of other sizes: their sum was not tried"
    # a state that carries the first use's graph into the second (a spiking neuron's membrane
    # potential kept between calls): the first use's input then reaches the second use's
    # output too, and its gradient in the sum is rightly not the one it gets alone
    carried = _reaches(out2, inputs1)
    summed = [a + b for a, b in zip(out1, out2) if a.requires_grad or b.requires_grad]
    ws = cotangents(ctx, summed)
    params = [p for _, p in both.parameters()]
    with failing("applied twice with the outputs summed"):
        grads = backpropagate(list(zip(summed, ws)), [*inputs1, *inputs2, *params])
    n = len(inputs1)
    every_output = len(summed) == len(out1) and all(y.requires_grad for y in out1)
    # the outputs, the first use's inputs and what the layer was fed are not needed any more:
    # let them go before each use alone runs
    del out1, out2, summed, inputs1
    both.fed = []
    alone1 = (_first_alone(ctx, both, n) if every_output else None) or _alone(ctx, None, ws)
    alone2 = _alone(ctx, inputs2, ws)
    names, expected, actual = [], [], []
    for i in range(n):
        uses = [(f"input {i} of the second use", grads[n + i], alone2[i])]
        if not carried:
            uses.insert(0, (f"input {i} of the first use", grads[i], alone1[i]))
        for label, composed, alone in uses:
            if composed is not None and alone is not None:
                names.append(f"gradient of {label}")
                expected.append(alone)
                actual.append(composed)
    for j, (name, _) in enumerate(both.parameters()):
        a, b, composed = alone1[n + j], alone2[n + j], grads[2 * n + j]
        if composed is not None and (a is not None or b is not None):
            names.append(f"gradient of parameter {name!r}")
            expected.append(_zero_if_none(a, composed) + _zero_if_none(b, composed))
            actual.append(composed)
    # a parameter's gradients of the two uses alone, summed: two runs' rounding on that side
    assert_close(expected, actual, names=names, labels=("alone", "summed"),
                 allowance=path_allowance(ctx, FORWARD, combined=2.0),
                 what="two uses of the layer with their outputs summed vs each use alone (a backward that changes "
                      "grad_output in place corrupts the other use's)")
    if carried:
        ctx.note("the layer's state carries its graph from one call into the next (the first use's input reaches "
                 "the second use's output), so the first use's input gradients in the sum include the second use's "
                 "and were not compared with the first use alone")
    return f"two uses with their outputs summed each get their own gradient ({len(names)} tensor(s) compared)"


def _reaches(outputs: list[torch.Tensor], leaves: list[torch.Tensor]) -> bool:
    """Whether the outputs' autograd graph reaches any of the leaves."""
    wanted = {id(x) for x in leaves if x.requires_grad}
    return bool(wanted) and any(id(getattr(node, "variable", None)) in wanted for node in backward_nodes(outputs))


def _alone(ctx: Context, second: list[torch.Tensor] | None, ws: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """The gradients of one use on its own: the first use, or (``second``) the second one after
    a first call without grad, so that a layer with state sees what it sees in the sum."""
    subject = ctx.fresh()
    inputs = subject.inputs(requires_grad=True)
    with failing("used once"):
        if second is not None:
            subject.forward(inputs)
            inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in second]
        outputs = Outputs.of(subject.forward(inputs)).floating
    pairs = [(y, w) for y, w in zip(outputs, ws) if y.requires_grad]
    with failing("used once"):
        return backpropagate(pairs, [*inputs, *(p for _, p in subject.parameters())])


def _first_alone(ctx: Context, subject: Subject, n_inputs: int) -> list[torch.Tensor | None]:
    """The first use alone is the shared forward run (a fresh layer, the generated inputs, the
    same cotangents), when every floating output takes part in the sum."""
    grads = dict(reference_forward(ctx).grads)
    return [*(grads.get(f"input {i}") for i in range(n_inputs)),
            *(grads.get(f"parameter {name!r}") for name, _ in subject.parameters())]


def _rolled(x: torch.Tensor, fraction: float = 1 / 3) -> torch.Tensor:
    """Another input (or grad_output) of the same size and distribution: the values rolled along
    the flattened tensor by about ``fraction`` of its length, which costs no random draw (a
    constant input stays as it is)."""
    if not x.is_floating_point() or x.numel() < 2:  # a copy: a layer may write into its integer input
        return x.detach().clone().requires_grad_(x.requires_grad) if x.is_floating_point() else x.clone()
    shift = int(x.numel() * fraction) or 1
    other = x.detach().reshape(-1).roll(shift).reshape(x.shape).clone()
    return other.requires_grad_(x.requires_grad)



# -- grad_output ------------------------------------------------------------------------------

# g(A·w1 + B·w2) against A·g(w1) + B·g(w2). A + B != 1, so that a term that does not scale with
# grad_output (g(w) = L·w + c) shows as (1 − A − B)·c; A < 0, so that abs, relu or clamp of
# grad_output shows too.
_A, _B = -1.75, 0.5


@check(
    "grad_output",
    title="backward is linear in grad_output and copes with outputs whose gradient is undefined",
    uses=(FORWARD,),  # g(w1) for the seeded cotangents, and the rounding floor of the float32 gradients
    tolerances=path_tolerances("relative difference between the gradients for a combination of two grad_outputs "
                               "and the same combination of their gradients, and between the sum of each output's "
                               "gradients alone and all outputs' gradients"),
    any_batch=True,
)
def grad_output(ctx: Context) -> str:
    """Back-propagates, over one forward graph, a second seeded grad_output w2 and the combination
    −1.75·w1 + 0.5·w2 (w1: the cotangents of the shared run), and requires the gradients to be that
    combination of the gradients: backward must be linear in the incoming gradient. Then, with
    several outputs, back-propagates through each output alone (the others' gradients undefined,
    as for ``out, _ = layer(x)``) and requires those gradients to add up to the gradients of all
    outputs; with one output and a hand-written backward, back-propagates an undefined gradient
    (gradcheck's ``check_undefined_grad``) and requires no gradient, or zero.

    Autograd adds the gradients of every use of a tensor and scales them by the loss: a backward
    that forgets to multiply by grad_output (the chain rule), adds a term of its own or transforms
    grad_output (abs, clamp) passes a check that uses one fixed grad_output and trains wrongly in
    every network. A Function that calls ``ctx.set_materialize_grads(False)`` receives None for an
    output whose gradient is undefined and must treat it as zero. Fix: multiply every term by
    grad_output; handle None (``if grad is None``) where materialisation is off.
    """
    reference = dict(reference_forward(ctx).grads)
    subject = ctx.fresh()
    inputs = subject.inputs(requires_grad=True)
    with failing("before backward"):
        outputs = [y for y in Outputs.of(subject.forward(inputs)).floating if y.requires_grad]
    if not outputs:
        raise CheckSkipped("no floating output requires grad: there is no backward to look at")
    names = [*(f"input {i}" for i, x in enumerate(inputs) if x.requires_grad),
             *(f"parameter {name!r}" for name, _ in subject.parameters())]
    graph = _Graph(subject, outputs, [*(x for x in inputs if x.requires_grad), *(p for _, p in subject.parameters())])
    w1 = cotangents(ctx, outputs)
    w2 = [_rolled(w, 1 / 5) for w in w1]
    second = graph.backward(w2)
    with _repeatable(graph, w2):
        combined = graph.backward([_A * a + _B * b for a, b in zip(w1, w2)])
    first = [reference.get(name) for name in names]
    compared = _assert_linear(ctx, graph, names, first, second, combined, w2)
    with _repeatable(graph, w2):
        undefined = _undefined(ctx, graph, w1, names, first)
    message = f"backward is linear in grad_output ({compared} gradient(s) compared); {undefined}"
    if graph.written:
        message += (f"; backward writes into the {' and '.join(sorted(graph.written))} it is handed"
                    f"{ctx.reported_by('backward_pure')}: each backward here was handed a copy of its own")
    return message


@dataclass
class _Graph:
    """One forward's graph, back-propagated through several times (``retain_graph=True``), each
    time with copies of the grad_outputs: a backward that writes into the grad_output it is handed
    (backward_pure's finding) must not change the grad_outputs the next backward combines, or
    this check would blame linearity for it. ``written``: the grad_outputs a backward wrote into."""

    subject: Subject
    outputs: list[torch.Tensor]
    leaves: list[torch.Tensor]
    written: set[str] = field(default_factory=set)

    def backward(self, cotangents: Sequence[torch.Tensor], *, outputs: Sequence[torch.Tensor] | None = None,
                 which: Sequence[int] | None = None, what: str = "in backward", hint: str = "",
                 ) -> list[torch.Tensor | None]:
        """The gradients of the leaves for ``cotangents`` (of ``outputs``: all by default; ``which``:
        their indices among all outputs, for the names of those written into)."""
        handed = [w.clone() for w in cotangents]
        grads = _backward_again(self.subject, self.outputs if outputs is None else outputs, handed, self.leaves,
                                what=what, hint=hint)
        indices = range(len(handed)) if which is None else which
        self.written |= {f"grad_output {k}" for k, w, h in zip(indices, cotangents, handed)
                         if h.shape != w.shape or not torch.equal(h, w)}
        return grads


@contextlib.contextmanager
def _repeatable(graph: _Graph, cotangents: list[torch.Tensor]) -> Iterator[None]:
    """A later backward over the graph raising is this check's failure only when the first
    backward's grad_output still goes through: else backward cannot run twice over one graph,
    which backward_pure reports, and this check has nothing to compare."""
    try:
        yield
    except CheckFailed as exc:
        try:
            graph.backward(cotangents)
        except CheckFailed:
            raised = exc.message.removeprefix("in backward, ")
            raise CheckSkipped(f"a second backward over the same graph raises ({raised}): backward_pure reports it, "
                               "and comparing gradients for several grad_outputs needs several backward "
                               "passes", applies=True) from exc
        raise


def _which_alone(ctx: Context, graph: _Graph, w1: list[torch.Tensor], names: list[str],
                 alone: list[list[torch.Tensor | None]]) -> str:
    """Which output, used alone, gets other gradients than with explicit zeros for the others."""
    allowance = path_allowance(ctx, FORWARD)
    for k in range(len(graph.outputs)):
        zeros = [w if j == k else torch.zeros_like(y) for j, (y, w) in enumerate(zip(graph.outputs, w1))]
        explicit = graph.backward(zeros)
        for name, leaf, got, want in zip(names, graph.leaves, alone[k], explicit):
            label = f"gradient of {name}"
            if mismatch(_zero_if_none(want, leaf), _zero_if_none(got, leaf), allowance(label, leaf)) is not None:
                unused = ", ".join(str(j) for j in range(len(graph.outputs)) if j != k)
                return (f"with only output {k} used, the {label} differs from the one with zero gradients for "
                        f"output(s) {unused}: backward takes the undefined gradient of an unused output (None where "
                        "ctx.set_materialize_grads(False)) for something other than zero")
    return "each output alone agrees with zeros for the others: backward is not additive over its outputs"


@functools.cache
def _may_receive_none(function: type[torch.autograd.Function]) -> bool:
    """Whether a Function's backward can receive None: only when it calls
    ``ctx.set_materialize_grads(False)`` (otherwise autograd hands it zeros, which linearity
    covers). Read from its source, once per class (finding a class's source parses its whole
    module: 2 ms for SReLU's); a Function without source is assumed to."""
    try:
        return "set_materialize_grads" in inspect.getsource(function)
    except (OSError, TypeError):
        return True


def _zero_if_none(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if grad is None else grad


def _assert_linear(ctx: Context, graph: _Graph, names: list[str], first: list[torch.Tensor | None],
                   second: list[torch.Tensor | None], combined: list[torch.Tensor | None],
                   w2: list[torch.Tensor]) -> int:
    rows = [(f"gradient of {name}", _zero_if_none(g1, leaf), _zero_if_none(g2, leaf), _zero_if_none(g3, leaf))
            for name, leaf, g1, g2, g3 in zip(names, graph.leaves, first, second, combined)
            if g1 is not None or g2 is not None or g3 is not None]
    # each side carries rounding of its own: |A|·g(w1) + |B|·g(w2), and g(A·w1 + B·w2) for a
    # cotangent about hypot(A, B) times as large
    allowance = path_allowance(ctx, FORWARD, combined=abs(_A) + abs(_B) + math.hypot(_A, _B))
    for name, g1, g2, g3 in rows:
        try:
            assert_close([_A * g1 + _B * g2], [g3], names=[name], allowance=allowance,
                         labels=("the same combination of the gradients for w1 and w2",
                                 f"the gradient for {_A:g}·w1 + {_B:g}·w2"),
                         what="backward of two grad_outputs w1 and w2 combined vs their gradients combined")
        except CheckFailed as exc:
            _assert_repeats(ctx, graph, names, name, w2, g2)
            why, fix = _why_not_linear(graph, names, name, g1, g2, allowance(name, g1))
            raise CheckFailed(f"the {name} is not linear in grad_output: {why}; {exc.message}. Fix: {fix}",
                              **exc.details) from None
    return len(rows)


def _assert_repeats(ctx: Context, graph: _Graph, names: list[str], name: str, w2: list[torch.Tensor],
                    g2: torch.Tensor) -> None:
    """Before a failure to be linear is blamed on how backward uses grad_output: the same
    grad_output back-propagated again over the graph gives the same gradient. Else the backward
    changes what a later backward reads (the tensors it saved): backward_pure measures that, and
    combinations of grad_outputs back-propagated over one graph cannot be compared."""
    again = graph.backward(w2)[[f"gradient of {n}" for n in names].index(name)]
    leaf = graph.leaves[[f"gradient of {n}" for n in names].index(name)]
    found = mismatch(g2, _zero_if_none(again, leaf), path_allowance(ctx, FORWARD)(name, g2))
    if found is not None:
        raise CheckSkipped(
            f"backward does not repeat over one graph: the same grad_output back-propagated again gives another "
            f"{name} (at index {tuple(found['index'])} {found['expected']:.6g} became {found['actual']:.6g}), so "
            f"it changes what a later backward reads (the tensors it saved?){ctx.reported_by('backward_pure')}; "
            "whether it is linear in grad_output needs several backward passes over one graph", applies=True)


def _why_not_linear(graph: _Graph, names: list[str], name: str, g1: torch.Tensor, g2: torch.Tensor,
                    allowance: Allowance) -> tuple[str, str]:
    """Why a gradient is not linear in grad_output, and the fix."""
    if mismatch(g1, g2, allowance) is None:
        return ("it is the same for two different grad_outputs, so backward ignores grad_output",
                "multiply every term by the incoming gradient (the chain rule: grad_input = grad_output * dy/dx)")
    zero = graph.backward([torch.zeros_like(y) for y in graph.outputs])
    g0 = zero[[f"gradient of {n}" for n in names].index(name)]
    if g0 is not None and mismatch(torch.zeros_like(g0), g0, allowance) is not None:
        return (f"for a zero grad_output backward returns a nonzero gradient (largest {largest(g0):.3g}), so it adds a "
                "term that does not scale with grad_output", "multiply every term by the incoming gradient")
    return ("backward transforms grad_output before using it (rounds, clips, abs, sign, a power?)",
            "use it only as a factor: grad_input = grad_output * dy/dx")


def _undefined(ctx: Context, graph: _Graph, w1: list[torch.Tensor], names: list[str],
               first: list[torch.Tensor | None]) -> str:
    """Outputs whose gradient is undefined: each output used alone (several outputs), or an undefined
    gradient reaching a hand-written backward (one output)."""
    hint = ("; a Function that calls ctx.set_materialize_grads(False) receives None for an output whose gradient is "
            "undefined and must treat it as zero")
    outputs = graph.outputs
    if len(outputs) > 1:
        alone = [graph.backward([w], outputs=[y], which=[k], what=f"with only output {k} used", hint=hint)
                 for k, (y, w) in enumerate(zip(outputs, w1))]
        rows: list[tuple[str, torch.Tensor, torch.Tensor]] = []
        for j, (name, g1) in enumerate(zip(names, first)):
            parts = [g for grads in alone if (g := grads[j]) is not None]
            if g1 is not None and parts:
                rows.append((f"gradient of {name}", g1, torch.stack(parts).sum(dim=0)))
        try:
            assert_close([g for _, g, _ in rows], [s for _, _, s in rows], names=[n for n, _, _ in rows],
                         allowance=path_allowance(ctx, FORWARD),
                         labels=("all outputs used", "sum of each output alone"),
                         what=f"the sum of the gradients with each of the {len(outputs)} outputs used alone (the "
                              "others' gradients undefined) vs all outputs used at once")
        except CheckFailed as exc:
            raise CheckFailed(f"{_which_alone(ctx, graph, w1, names, alone)}; {exc.message}. Fix: treat None (the "
                              "gradient of an unused output) as zeros", **exc.details) from None
        return f"each of {len(outputs)} outputs used alone gives its share of the gradient"
    functions = [f for f in custom_functions(outputs) if _may_receive_none(f)]
    undefined_grad = getattr(getattr(torch._C, "_functions", None), "UndefinedGrad", None)
    if not functions or undefined_grad is None:
        return "one output, and no hand-written backward that turns materialisation off to receive None"
    grads = graph.backward(w1, outputs=[undefined_grad()(outputs[0])], what="with the output's gradient undefined",
                           hint=hint)
    for name, g in zip(names, grads):
        if g is not None and bool(g.ne(0).any()):
            raise CheckFailed(
                f"with the output's gradient undefined (None for a Function that calls "
                f"ctx.set_materialize_grads(False), zeros otherwise), backward gives gradient of {name} nonzero "
                f"values (largest {largest(g):.3g}); it must give None or zeros. Fix: return None for inputs when "
                "grad_output is None", tensor=f"gradient of {name}")
    return f"an undefined gradient reaching {', '.join(f.__name__ for f in functions)} gives none"

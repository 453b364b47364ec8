"""Layer hygiene no other tool checks: inputs left alone, deterministic prediction, finite
values, any memory layout accepted, every tensor registered."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from layercheck._sdk_internal import (
    REQUIRES_GRAD_SWITCHED,
    InputPath,
    assert_same_unless_random,
    comparable,
    describe_shapes,
    failing,
    forward_is_random,
    input_change,
    layer_is_float32,
    output_names,
    path_allowance,
    path_tolerances,
    predict_is_random,
    present_grads,
    run_along,
)
from layercheck.numerics.reference import float32_run
from layercheck.parent.layout import Layout
from layercheck.sdk import (
    EXACT,
    FORWARD,
    PREDICT,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    SharedRun,
    assert_close,
    check,
    forward_run,
    modules_only,
    nonfinite,
    predict_run,
    reference_forward,
    reference_predict,
)
from layercheck.target.seeding import second_draw_seed


@check(
    "input_unchanged",
    title="the layer does not modify its inputs",
    uses=(PREDICT, FORWARD),
    any_batch=True,
)
def input_unchanged(ctx: Context) -> str:
    """Compares every input after predict and after the training forward, with grad on and
    off, with the values it was given: values, size and strides, and whether it requires grad.

    A layer that writes into its input (``inplace=True`` activations, ``x.clamp_()``,
    ``x.data`` writes, ``x.unsqueeze_()``) silently corrupts the caller's tensor: a skip
    connection or a second branch that reads it gets the wrong values. (On a leaf that
    requires grad PyTorch refuses the write, and forward_runs reports it; inside a network
    inputs are not leaves and nothing stops it.) Fix: the out-of-place operation
    (``torch.relu(x)``, ``inplace=False``). A layer that calls ``x.requires_grad_()`` on an
    input given without grad (to take a gradient inside forward: marginals from a partition
    function, forces from an energy) changes the caller's tensor too: its in-place writes then
    raise and backward fills its ``.grad``. Fix: ``x.detach().requires_grad_()``.
    """
    calls = [("predict (grad off)", reference_predict(ctx)), ("forward (grad on)", reference_forward(ctx))]
    subject = ctx.fresh()
    inputs = subject.inputs()
    subject.forward(inputs, grad=False)
    changes = [(call, run.input_change) for call, run in calls]
    changes.append(("forward (grad off)", input_change(subject.inputs(), inputs)))
    for call, change in changes:
        if change is not None:
            what = "switched on the gradient of" if REQUIRES_GRAD_SWITCHED in change else "wrote into"
            raise CheckFailed(f"the layer {what} its input during {call}: {change}", call=call)
    return f"{len(ctx.layouts)} input(s) unchanged by predict and forward, with grad on and off"


@check(
    "deterministic",
    title="identical copies give bit-identical predict outputs for the same input",
    uses=(PREDICT,),
    any_batch=True,  # random draws at prediction are the layer's logic, at any batch size
)
def deterministic(ctx: Context) -> str:
    """Predicts with two identical copies of the layer on the same input, their random
    streams seeded differently, and requires bit-identical outputs.

    Prediction must be a function of the input and the layer: a layer that draws random
    numbers at prediction time (noise, sampling, dropout left on in ``eval()``) gives a
    different answer for the same input, so results cannot be reproduced or compared.
    Dropout in training mode is not checked here. Fix: draw random numbers only when
    ``self.training`` is true.
    """
    first = reference_predict(ctx)
    second = reference_predict(ctx, rng_seed=ctx.seed + 1)
    assert_close(
        first.outputs, second.outputs, allowance=EXACT,
        what="predict is random: two identical copies of the layer give two results for the same input",
        labels=(f"the copy with random stream {ctx.seed}", f"the copy with random stream {ctx.seed + 1}"),
    )
    return f"{len(first.outputs)} output(s) bit-identical across copies and random streams"


@check(
    "finite",
    title="outputs and gradients are finite on the generated inputs",
    uses=(PREDICT, FORWARD),
)
def finite(ctx: Context) -> str:
    """Looks for NaN and infinity in the outputs of predict and of the training forward,
    and in the gradients of every input and learnable parameter, on the generated
    (standard-normal) inputs.

    One non-finite value poisons every later step of training. Usual causes: a division
    by a statistic that can be zero, ``log``/``sqrt`` of a value that can be negative,
    ``exp`` that overflows (subtract the maximum first), a missing ``eps``. Fix: add an ``eps``
    to what can be zero, clamp what goes into ``log`` and ``sqrt``, and subtract the maximum
    before ``exp``.
    """
    predicted = reference_predict(ctx)
    groups = [(output_names(predicted.outputs, "predict "), predicted.outputs), *_trained(ctx)]
    checked = 0
    for names, tensors in groups:
        for name, t in zip(names, tensors):
            if not t.is_floating_point():
                continue
            checked += 1
            problem = nonfinite(t)
            if problem is not None:
                raise CheckFailed(f"{name} has {problem}", tensor=name)
    return f"{checked} output and gradient tensor(s) finite"


def _trained(ctx: Context) -> list[tuple[list[str], list[torch.Tensor]]]:
    """The training forward's outputs and the gradients of its backward, with their names: those
    of the gradient checks' float32 run where the layer is float32 already (the same run: one
    full-size forward and backward fewer), else of the shared forward run."""
    if layer_is_float32(ctx):
        run = float32_run(ctx)
        result = run.check_ran()
        outputs = ([f"forward output {i}" for i in result.positions], result.outputs)
        present = [(f"gradient of {name}", g) for name, g in zip(run.fn.names, result.grads) if g is not None]
        return [outputs, ([name for name, _ in present], [g for _, g in present])]
    forwarded = reference_forward(ctx)
    return [(output_names(forwarded.outputs, "forward "), forwarded.outputs), present_grads(forwarded)]


# -- noncontiguous ----------------------------------------------------------------------------


def _strided(x: torch.Tensor) -> torch.Tensor:
    """The same values as a slice of a tensor twice as wide in the last dimension longer
    than one (as from splitting q, k and v): not contiguous, not dense. A slice that would
    still be contiguous (no longer dimension before it) takes every other element instead."""
    dims = [d for d in range(x.dim()) if x.shape[d] > 1]
    if not dims:
        return x
    d = dims[-1]
    size = list(x.shape)
    size[d] *= 2
    base = torch.zeros(size, dtype=x.dtype, device=x.device)
    index: list[slice] = [slice(None)] * x.dim()
    index[d] = slice(0, x.shape[d]) if len(dims) > 1 else slice(None, None, 2)
    view = base[tuple(index)]
    view.copy_(x)
    return view


def _channels_last(x: torch.Tensor, layout: Layout | None = None) -> torch.Tensor:
    """The same values stored with the layout's C dimension innermost (PyTorch's channels-last
    for 4-D and 5-D inputs), or dimension 1 where the layout has no C (a transposed tensor's
    storage): dense, not contiguous. An input whose C is innermost already (a BTC sequence)
    stays contiguous (:func:`_channels_first` stores it another way)."""
    if x.dim() < 2:
        return x
    channel = _channel(x, layout)
    moved = 1 if channel is None else channel
    return _stored(x, [d for d in range(x.dim()) if d != moved] + [moved])


def _channels_first(x: torch.Tensor, layout: Layout | None = None) -> torch.Tensor:
    """For an input of three or more dimensions whose C is innermost already (a BTC or TBC
    sequence, a BSSC image): the same values stored channels-first, B then C outermost, as a
    Conv1d's (B, C, T) output transposed to (B, T, C) and handed on to a sequence layer (a
    conformer's convolution module, a speech model's feature encoder). Any other input stays
    as it is (:func:`_channels_last` stores it another way)."""
    channel = _channel(x, layout)
    if x.dim() < 3 or channel != x.dim() - 1:
        return x
    assert layout is not None
    batch = layout.batch_dim
    order = ([] if batch is None else [batch]) + [channel]
    order += [d for d in range(x.dim()) if d not in order]
    return _stored(x, order)


def _channel(x: torch.Tensor, layout: Layout | None) -> int | None:
    return layout.dim("C") if layout is not None and len(layout.size) == x.dim() else None


def _stored(x: torch.Tensor, order: list[int]) -> torch.Tensor:
    """The same values stored with the dimensions in ``order``, outermost first."""
    inverse = [order.index(d) for d in range(x.dim())]
    return x.permute(order).contiguous().permute(inverse)


_LAYOUTS = (
    InputPath("strided-view", lambda x, layout: _strided(x)),
    InputPath("channels-last", _channels_last),
    InputPath("channels-first", _channels_first),
)


@check(
    "noncontiguous",
    title="channels-last (channels-first for a BTC sequence) and strided-view inputs give the same results",
    uses=(PREDICT, FORWARD),
    tolerances=path_tolerances("relative difference between outputs, gradients and state with non-contiguous and "
                               "with contiguous inputs"),
    any_batch=True,
)
def noncontiguous(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Feeds the generated inputs stored two other ways and compares with contiguous
    inputs: predict outputs for a strided view (a slice of a wider tensor), forward
    outputs, gradients and state for channels-last (the layout's C dimension innermost, or
    dimension 1 without a C), or channels-first for an input whose C is innermost already (a
    BTC sequence: a Conv1d's output transposed back); the strided view again where no input
    can be stored so.

    Slices, transposes and ``channels_last`` models hand layers non-contiguous tensors;
    a layer that calls ``.view()`` where ``.reshape()`` is needed raises on them, and one
    that indexes raw storage computes garbage. Values that differ are accepted only when
    the layer draws random numbers (they are laid out in memory order). Fix: ``.reshape()``
    instead of ``.view()``, or ``.contiguous()`` before raw-storage code.
    """
    shapes = [torch.empty(layout.size, device="meta") for layout in ctx.layouts]
    usable = [path for path in _LAYOUTS
              if any(not path.inputs(x, layout).is_contiguous() for x, layout in zip(shapes, ctx.layouts))]
    if not usable:
        raise CheckSkipped("no input can be stored non-contiguously "
                           "(every input has at most one element per dimension)")
    # Each layout once, predict with the first and forward+backward with the last (the same
    # code path in most layers; both layouts where only one can be made).
    first, last = usable[0], usable[-1]
    reference_p = reference_predict(ctx)
    subject = ctx.fresh()
    with _failing_with(first.label):
        predicted = run_along(ctx, PREDICT, subject, subject.inputs(), first)
    predict_compared, predict_why = _compared_or_settled(
        ctx, PREDICT, first, output_names(reference_p.outputs), reference_p.outputs, predicted.outputs,
        lambda: assert_same_unless_random(
            reference_p.outputs, predicted.outputs, random=lambda: predict_is_random(ctx),
            allowance=path_allowance(ctx, PREDICT, path=first),
            what=f"predict with {first.label} inputs vs contiguous ones", names=output_names(reference_p.outputs)))
    reference_f = reference_forward(ctx)
    subject = ctx.fresh()
    with _failing_with(last.label):
        forwarded = run_along(ctx, FORWARD, subject, subject.inputs(), last)
    names, expected, actual = comparable(reference_f, forwarded)
    forward_compared, forward_why = _compared_or_settled(
        ctx, FORWARD, last, names, expected, actual,
        lambda: assert_same_unless_random(
            expected, actual, random=lambda: forward_is_random(ctx), names=names,
            allowance=path_allowance(ctx, FORWARD, path=last),
            what=f"forward and backward with {last.label} inputs vs contiguous ones"))
    for why in (predict_why, forward_why):
        if why:
            ctx.note(why)
    random = [m for m, c in (("predict", predict_compared), ("forward", forward_compared)) if not c]
    note = f" (values of {' and '.join(random)} differ: the layer draws random numbers)" if random else ""
    return (f"predict with {first.label} inputs, forward and backward with {last.label} inputs agree with "
            f"contiguous ones{note}", {"predict_layout": first.label, "forward_layout": last.label})


# Note [float64 settles a layout]
#     A network that amplifies float32 rounding (a whole U-Net at 32×32, batch of two, whose
#     deepest BatchNorms normalise eight values) can differ between contiguous and channels-last
#     inputs by more than the rounding floor measured from two perturbed roundings, whose spread is
#     heavy-tailed there: the segmentation_models_pytorch Unet's float32 gradient of a decoder
#     BatchNorm weight came out 0.16 channels-last and 0.22 contiguous, while its float64 gradients
#     agree to 3e-11 in both layouts; over six roundings of the input its float32 error ranged
#     from 4e-4 to 1.3e-2 in either layout (0.087 at another input). So a float32 comparison that
#     fails is asked again in float64. The difference is the layer's rounding, and the check
#     passes with a note, when the two layouts agree in float64 within float64's tolerance and the
#     layer computes imprecisely in float32 at these sizes even with contiguous inputs: some
#     tensor of its contiguous float32 run is off the float64 one by more than float32's plain
#     tolerance. Not tensor by tensor: PyTorch's own channels-last CPU kernels are the less
#     accurate there (the Unet's gradient of another BatchNorm bias: contiguous within 6e-4 of
#     float64 over six roundings, channels-last up to 0.09 off), which is no bug of the layer. A
#     layout bug is one in float64 as well; one in a float32-only kernel of a layer that computes
#     accurately in float32 still fails.


def _compared_or_settled(ctx: Context, run: SharedRun, path: InputPath, names: list[str],
                         expected: list[torch.Tensor], actual: list[torch.Tensor],
                         compare: Callable[[], bool]) -> tuple[bool, str | None]:
    """``compare()`` (whether the values were compared, not accepted as random), letting its
    CheckFailed through unless float64 settles the difference as rounding (Note [float64
    settles a layout]): then (True, why)."""
    try:
        return compare(), None
    except CheckFailed as failure:
        why = _rounding_only(ctx, run, path, names, expected, actual)
        if why is None:
            raise
        return True, f"{failure.message.split(':')[0]}: {why}"


def _rounding_only(ctx: Context, run: SharedRun, path: InputPath, names: list[str], expected: list[torch.Tensor],
                   actual: list[torch.Tensor]) -> str | None:
    """Why the float32 difference between the layouts is rounding, or None when it may not be."""
    if not any(t.dtype == torch.float32 for t in expected):
        return None
    float64 = _both_layouts(ctx, run, path, torch.float64)
    if float64 is None:
        return None
    names64, at_home, moved = float64
    exact = dict(zip(names64, at_home))
    try:
        assert_close(at_home, moved, names=names64, allowance=path_allowance(ctx), what="float64 layouts")
    except CheckFailed:
        return None
    differing, imprecise = [], []
    for name, e, a in zip(names, expected, actual):
        if e.dtype != torch.float32 or e.shape != a.shape:
            continue
        try:
            assert_close([e], [a], names=[name], allowance=path_allowance(ctx, run, path=path), what=name)
        except CheckFailed:
            differing.append(name)
        if name in exact:
            try:  # the contiguous float32 value within float32's plain tolerance of the float64 one: accurate
                assert_close([exact[name].to(e.device, torch.float32)], [e], names=[name],
                             allowance=path_allowance(ctx), what=name)
            except CheckFailed:
                imprecise.append(name)
    def shown(found: list[str]) -> str:
        return ", ".join(found[:2]) + (f" and {len(found) - 2} more" if len(found) > 2 else "")

    if not imprecise:
        return _a_kink_crossed(ctx, run, path, shown(differing))

    return (f"in float64 the two layouts agree, and the layer computes imprecisely in float32 at these sizes even "
            f"with contiguous inputs ({shown(imprecise)} off the float64 values beyond float32's tolerance): the "
            f"float32 differences between the layouts ({shown(differing)}) are its amplified rounding, which the "
            "measured rounding floor missed (a normalisation over few values?)")


def _both_layouts(ctx: Context, run: SharedRun, path: InputPath, dtype: torch.dtype, *, seed: int | None = None,
                  ) -> tuple[list[str], list[torch.Tensor], list[torch.Tensor]] | None:
    """The run's names and values with contiguous inputs and with inputs along ``path``, in
    ``dtype`` (``seed``: on another draw of the inputs); None where the layer raises."""
    try:
        runs = []
        for along in (None, path):
            subject = ctx.fresh(dtype)
            inputs = subject.inputs() if seed is None else ctx.target.inputs(dtype, subject.device, seed=seed)
            runs.append(run_along(ctx, run, subject, inputs, along))
    except LayerRaised:
        return None
    if run is FORWARD:
        return comparable(*runs)
    return output_names(runs[0].outputs), list(runs[0].outputs), list(runs[1].outputs)


def _a_kink_crossed(ctx: Context, run: SharedRun, path: InputPath, differing: str) -> str | None:
    """Note [a kink crossed in one layout]: why a float32 difference between the layouts that
    float64 does not show is the rounding of one draw's values, or None when another draw shows
    it too."""
    again = _both_layouts(ctx, run, path, torch.float32, seed=second_draw_seed(ctx.seed))
    if again is None:
        return None
    names, at_home, moved = again
    try:
        assert_close(at_home, moved, names=names, allowance=path_allowance(ctx, run, path=path),
                     what="float32 layouts on another draw")
    except CheckFailed:
        return None
    return (f"in float64 the two layouts agree, and on another draw of the inputs they agree in float32 too: the "
            f"float32 difference on the first draw ({differing}) is the layer's rounding putting a value on the other "
            "side of a kink (a ReLU's zero) in one layout, not the layout")


# Note [a kink crossed in one layout]
#     A value of the layer that sits within float32's rounding of a kink makes the two layouts
#     differ in float32 by a whole slope where their kernels round it differently: MONAI's
#     SEResNetBottleneck at 16,8,24,24 (sampled to 14 observations) has its last ReLU's input at
#     8.5e-7 in one element, within float32's rounding of zero, and the layouts' float32 kernels
#     put it on either side: the gradient of the input then differs by up to 0.9 over the 3x3
#     neighbourhood and 8 channels behind it (48 elements), while float64 agrees to 2e-15 and the
#     contiguous float32 run is accurate (the rounding floor's two roundings crossed it in
#     neither layout, so they did not cover it). Such a
#     crossing is a coincidence of one draw's values; a layout bug in a float32-only kernel is not,
#     and shows on another draw too. So where float64 agrees and the contiguous float32 run is
#     accurate, the float32 layouts are compared again on the second draw of the inputs: agreeing
#     there, the check passes with a note.


def _failing_with(label: str) -> AbstractContextManager[None]:
    return failing(f"with {label} (non-contiguous) inputs",
                   hint="; with contiguous inputs it runs (.view() where .reshape() is needed?)")


# -- registered_tensors -----------------------------------------------------------------------


@check(
    "registered_tensors",
    title="every tensor attribute is a parameter or a buffer",
    applies=modules_only("operations (autograd.Function, custom operators, functions) have no attributes of their own"),
)
def registered_tensors(ctx: Context) -> str:
    """Looks through the attributes of the layer and of every submodule (and the lists,
    tuples and dicts they hold) for tensors that are neither parameters nor buffers.

    ``.to(device)``, ``.half()``, ``state_dict()``, optimisers and DDP see only registered
    tensors: a plain tensor attribute stays on the CPU in float32, is not saved in
    checkpoints and is not trained. Fix: ``self.register_buffer("name", tensor)`` (add
    ``persistent=False`` for constants you do not want saved) or ``nn.Parameter``.

    An attribute the layer assigns anew in every call (a weight recomputed from a registered
    one by a forward pre-hook, as the legacy ``torch.nn.utils.spectral_norm`` does) is derived,
    not kept: it is not reported. Nor is an empty tensor (``self.att_mat = torch.Tensor()``, a
    placeholder MONAI's attention blocks keep for an optional cache): it holds nothing to move,
    save or train. Nor is one that neither predict nor the training forward reads, or one that
    shares its memory with a registered tensor: Pyro's ``AutoRegressiveNN`` keeps the masks it
    gave its ``MaskedLinear`` layers (which register them as buffers) in a list, and a skip mask
    it never uses; the buffers carry what the layer computes with, and a read of such a copy
    after ``.to()`` or ``.double()`` is the ``device``, ``meta_device`` and ``dtype`` checks'.
    Nor is one the layer's own ``_apply`` moves with it (ultralytics' ``Detect`` keeps its
    ``stride`` so), or one that shares such an attribute's memory (its model's ``stride``, the
    same tensor): ``.to()`` and the casts see it; the message names it. Nor is a constant its
    calls move to their inputs' device themselves, reading it only through ``.to()`` (the
    Gaussian window of pytorch_msssim's SSIM, ``win.to(X.device, dtype=X.dtype)``; auraloss's
    STFT window), asked of a fresh layer on the meta device whose calls find it still on the
    CPU (``torch.nonzero`` returning its largest result there): one that requires grad (meant
    to be trained) or that a call changes in place (state that ``state_dict()`` loses) is
    reported all the same; the message names them.
    """
    subject = ctx.fresh()
    module = subject.module
    assert module is not None
    registered_tensors = [*module.parameters(), *module.buffers()]
    registered = {id(t) for t in registered_tensors}
    before = _unregistered(module, registered)
    found: list[tuple[str, str, torch.Tensor]] = []
    unused: list[str] = []
    carried: list[str] = []
    moved: list[str] = []
    if before:
        values = {name: t.detach().clone() for name, _, t in before}  # what a call changes in place is state
        with _Reads() as reads, contextlib.suppress(LayerRaised):
            subject.predict(subject.inputs())
        after = {name: id(t) for name, _, t in _unregistered(module, registered)}
        recomputed = {name for name, _, t in before if after.get(name, id(t)) != id(t)}
        with reads, contextlib.suppress(LayerRaised):
            subject.forward(subject.inputs(), grad=False)
        # what a call reads and no registered tensor holds (nor one the layer's _apply carries)
        held = reads.storages - {_storage_of(t) for t in registered_tensors if t.numel()}
        kept = [item for item in before if item[0] not in recomputed and item[2].numel()]
        read = {name for name, _, t in kept if _storage_of(t) in held}
        carried = _carried_by_the_layer(ctx, read) if read else []  # a layer built only where one is read
        constants = {name for name, _, t in kept if name in read and name not in carried and not t.requires_grad
                     and _same(values[name], t)}
        moved = _moved_by_its_calls(ctx, constants) if constants else []
        held -= {_storage_of(t) for name, _, t in kept if name in carried or name in moved}
        for item in kept:
            if item[0] in carried or item[0] in moved:
                continue
            if _storage_of(item[2]) in held:
                found.append(item)
            else:
                unused.append(item[0])
    empty = [name for name, _, t in before if t.numel() == 0]
    if found:
        listed = "; ".join(
            f"{name} ({describe_shapes([t])[0]}) of {owner}" for name, owner, t in found
        )
        raise CheckFailed(
            f"{len(found)} tensor attribute(s) are neither parameters nor buffers: {listed}. "
            "Fix: register them (register_buffer or nn.Parameter) so that .to(), state_dict() and optimisers see "
            "them",
            attributes=[name for name, _, _ in found],
        )
    message = f"{len(registered)} tensor(s), all registered"
    if unused:
        message += (f"; {len(unused)} plain tensor attribute(s) left out, which no call reads or which share the "
                    f"memory of a registered tensor: {', '.join(unused)}")
    if empty:
        message += f"; {len(empty)} empty placeholder(s) left out: {', '.join(empty)}"
    if carried:
        message += (f"; {len(carried)} plain tensor attribute(s) the layer's own _apply moves and casts with it "
                    f"(.to(), .double() see them; state_dict() does not): {', '.join(carried)}")
    if moved:
        message += (f"; {len(moved)} constant plain tensor attribute(s) its calls move to their inputs' device "
                    f"themselves, read only through .to() (state_dict() does not see them): {', '.join(moved)}")
    return message


def _same(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Whether a call left a plain tensor attribute as it was (NaNs equal); False where its
    values cannot be compared (a tensor on the meta device)."""
    try:
        return before.shape == after.shape and before.dtype == after.dtype and bool(
            torch.equal(before, after) or (before.is_floating_point() and torch.allclose(before, after, 0, 0, True)))
    except (RuntimeError, NotImplementedError):
        return False


def _moved_by_its_calls(ctx: Context, names: set[str]) -> list[str]:
    """Those of the plain tensor attributes ``names`` that the calls of a fresh layer on the meta
    device, which finds them still on the CPU, read only through ``.to()``: the calls move them
    to their inputs' device themselves. Meta kernels do not all check devices (a convolution
    runs with a CPU weight), so a read is judged by the operation that makes it, not by
    whether the call runs; none where the calls raise there."""
    try:
        predicting, training = ctx.fresh(device="meta"), ctx.fresh(device="meta")
        watched = {}
        for subject in (predicting, training):
            assert subject.module is not None
            watched.update({_storage_of(t): name for name, _, t in _unregistered(subject.module)
                            if name in names and t.device.type == "cpu"})
        with _Reads(watched) as reads, _nonzero_on_meta():
            predict_run(predicting)
            forward_run(ctx, training)
    except Exception:  # a layer that cannot run on meta: how it reads them is not known
        return []
    return sorted(name for name in names if name in reads.moved and name not in reads.direct)


def _nonzero_on_meta() -> AbstractContextManager[Any]:
    """torch.nonzero on the meta device with the largest result (every element nonzero), where
    this torch has the switch: a loss that selects pairs by label (pytorch-metric-learning's
    ProxyNCALoss) then runs there, where it raised for want of a data-independent size."""
    try:
        config = importlib.import_module("torch.fx.experimental._config")
    except ImportError:
        return contextlib.nullcontext()
    if not hasattr(config, "meta_nonzero_assume_all_nonzero"):
        return contextlib.nullcontext()
    return config.patch(meta_nonzero_assume_all_nonzero=True)


def _carried_by_the_layer(ctx: Context, names: set[str]) -> list[str]:
    """Those of the plain tensor attributes ``names`` that a fresh layer moved to the meta device
    takes along: a layer that overrides ``_apply`` to move them (ultralytics' ``Detect`` moves
    its ``stride`` so) is seen by ``.to()`` and the casts as registered tensors are."""
    module = ctx.fresh().module
    assert module is not None
    try:
        moved = module.to("meta")
    except Exception:  # a layer that cannot go to meta: what its _apply does is not known
        return []
    return [name for name, _, t in _unregistered(moved) if name in names and t.device.type == "meta"]


_MOVES = (torch.Tensor.to, torch.Tensor.type_as, torch.Tensor.cuda)


class _Reads(torch.overrides.TorchFunctionMode):
    """The storages of the tensors the calls under it hand to torch (a read of a view is a
    read of the tensor it views); of the ``watched`` ones (storage -> name), which are read
    through a move (``.to()``, ``.type_as()``, ``.cuda()``) and which by anything else."""

    def __init__(self, watched: dict[int, str] | None = None) -> None:
        super().__init__()
        self.storages: set[int] = set()
        self.watched = watched or {}
        self.moved: set[str] = set()
        self.direct: set[str] = set()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        for t in torch.utils._pytree.tree_leaves((args, kwargs or {})):
            if isinstance(t, torch.Tensor):
                storage = _storage_of(t)
                self.storages.add(storage)
                if storage in self.watched and getattr(func, "__name__", "") != "__get__":  # .shape: no read
                    (self.moved if func in _MOVES else self.direct).add(self.watched[storage])
        return func(*args, **(kwargs or {}))


def _storage_of(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr()) or id(t)
    except (RuntimeError, NotImplementedError):
        return id(t)


def _unregistered(module: nn.Module, registered: set[int] | None = None) -> list[tuple[str, str, torch.Tensor]]:
    """(dotted name, owner class, tensor) of every tensor held in a plain attribute, that is none
    of ``registered`` (ids; by default the module's parameters and buffers as they are now)."""
    if registered is None:
        registered = {id(t) for t in [*module.parameters(), *module.buffers()]}
    found = []
    for prefix, sub in module.named_modules():
        for attr, value in vars(sub).items():
            if attr in ("_parameters", "_buffers", "_modules"):
                continue
            for where, tensor in _tensors_in(value, attr):
                if id(tensor) not in registered:
                    found.append((f"{prefix}.{where}" if prefix else where, type(sub).__name__, tensor))
    return found


def _tensors_in(value: Any, where: str, depth: int = 2) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield where, value
    elif depth > 0 and isinstance(value, (list, tuple)) and not isinstance(value, nn.Module):
        for i, item in enumerate(value):
            yield from _tensors_in(item, f"{where}[{i}]", depth - 1)
    elif depth > 0 and isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors_in(item, f"{where}[{key!r}]", depth - 1)

"""Observations are independent: a batch gives what its observations give one at a time."""

from __future__ import annotations

from typing import Any

import torch

from layercheck._sdk_internal import (
    FIRST_BATCH,
    FirstBatch,
    describe_shapes,
    failing,
    path_allowance,
    path_tolerances,
    predict_is_random,
)
from layercheck.sdk import (
    PREDICT,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    Subject,
    assert_close,
    check,
    layer_failure,
    needs_batch,
    predict_run,
)
from layercheck.target.subject import Checkpoint

_SAMPLED = 4  # observations run one at a time: batch-wide mixing shows in every one, so a few suffice
# The second number of observations, after the layout's: the smallest batch that is still one
# (and even: a layer that pairs its observations, two views of each, takes it); 4 where the
# layout's batch is 2 already.
_OTHER = 2

_KEEPS_THE_BATCH = ("something in the layer keeps the size of the batch it was initialised or first called with (a "
                    "parameter or buffer sized by the batch, a mask cached at the first call, a reshape to a fixed "
                    "batch size), and training's last, smaller batch or inference on a few observations meets it. "
                    "Fix: size it from the input's batch dimension at every call; a layer that takes only one batch "
                    "size says so by skipping this check (--skip observations; a spec's checks: skip: [observations])")


@check(
    "observations",
    title="in predict mode a batch gives the same outputs as its observations one at a time, and as a batch of "
          "another size",
    matlab="checks with ObservationDimension",
    uses=(PREDICT,),
    applies=needs_batch,
    tolerances=path_tolerances("relative difference between an observation's outputs in a batch and alone, or in a "
                               "batch of another size"),
)
def observations(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Predicts the layout's batch on a fresh layer (initialised for it), then, on the same
    layer, a batch of another size (2, or 4 for a batch of 2: the first observations, or the
    batch with more drawn where it has fewer) as training's last, smaller batch comes after the
    full ones (its state put back first, its caches kept); then a few observations alone
    (batches of one, each from the initial state). It finds each output's batch dimension by
    comparing the sizes (it may move or vanish: SSCB to CB pooling, an LSTM's hidden state) and
    compares the shared observations' slices.

    At prediction time an observation's result must not depend on what else is in the batch,
    nor on how many observations there are: batch-wide normalisation in ``eval()``, a
    ``squeeze()`` that drops the batch dimension of a batch of one, a reshape that mixes
    observations, and anything that keeps the size of the first batch (a parameter or buffer
    sized by the batch in ``initialize``, a mask cached at the first call, a reshape to a fixed
    batch size) all break this. Batch statistics in training mode (BatchNorm) are not checked.
    Fix: normalise with running statistics in eval mode; squeeze named dimensions only; size
    what depends on the batch from each call's input. A layer that takes only one batch size
    skips this check (``--skip observations``).
    """
    # the layer predict_runs called on the layout's batch, where it left it (Note [the layout's
    # first batch] in support/runs.py): the same call, not made twice
    kept: FirstBatch | None = ctx.take(FIRST_BATCH)
    subject = ctx.fresh() if kept is None else kept.subject
    initial = subject.checkpoint() if kept is None else kept.initial
    inputs = subject.inputs()
    dims = [layout.batch_dim for layout in ctx.layouts]
    size = next(x.shape[d] for x, d in zip(inputs, dims) if d is not None)
    other = _OTHER if size != _OTHER else 2 * _OTHER
    big = max(size, other)
    wide = [x if d is None else torch.cat([x, *(_another_observation(ctx, k, x, d, j) for j in range(big - size))], d)
            for k, (x, d) in enumerate(zip(inputs, dims))]
    # the layout's batch first, as the layer was initialised for it; then the other size on the
    # same layer, as a user calls it (Note [the second batch])
    if kept is not None:
        at_size = kept.outputs
    else:
        with failing(f"a batch of {size} observations (the layout's)"):
            at_size = predict_run(subject, inputs).outputs
    _start_again(subject, initial)
    try:
        at_other: list[torch.Tensor] | LayerRaised = predict_run(subject, _first(wide, dims, other)).outputs
    except LayerRaised as exc:
        at_other = exc
    subject.rewind(initial)
    if isinstance(at_other, LayerRaised):
        raise layer_failure(at_other, f"a batch of {other} observations after one of {size} (the layout's)",
                            hint=f": {_KEEPS_THE_BATCH}", observations=other)
    batched = at_size if big == size else at_other
    if not any(big in y.shape for y in batched):
        # a reduction over the batch (a loss, a batch statistic): a batch of one need not even
        # be valid for it (a contrastive loss asserts two observations)
        raise CheckSkipped(f"no output has a dimension of the batch's size ({big}): each reduces over the batch "
                           "(a loss, a batch statistic), so none can be compared observation by observation")
    picks = sorted({round(k * (big - 1) / (_SAMPLED - 1)) for k in range(_SAMPLED)})
    found: list[int | None] | None = None
    for i in picks:
        alone = [x if d is None else x.narrow(d, i, 1).clone(memory_format=torch.contiguous_format)
                 for x, d in zip(wide, dims)]
        with failing(f"a batch of one observation (observation {i} of {big})", observation=i):
            single = predict_run(subject, alone).outputs
        subject.rewind(initial)
        if found is None:
            found = _batch_dims(batched, single, big)
        for j, d in enumerate(found):
            if d is not None:
                try:
                    _compare(ctx, [batched[j].narrow(d, i, 1)], [single[j]], f"output {j}",
                             f"observation {i} of a batch of {big} vs the same observation alone (batch dim {d})",
                             labels=(f"the batch of {big}", "the observation alone"))
                except CheckFailed as exc:  # which fix fits is measured: a mask reduced over the batch?
                    why = _mixed_by(ctx, subject, initial, wide, dims, i, (j, d), single[j])
                    raise CheckFailed(f"{exc.message}: {why}", **{**exc.details, "observation": i}) from None
    assert found is not None
    small = min(size, other)
    fewer = at_other if big == size else at_size
    _compare_fewer(ctx, batched, fewer, found, big, small)
    compared = [j for j, d in enumerate(found) if d is not None]
    if not compared:
        raise CheckSkipped("no output changes size with the batch, so none can be compared observation by observation")
    where = ", ".join(f"output {j} along dim {found[j]}" for j in compared)
    return (f"observations {picks} of {big} agree with the batch ({where}); batches of one work; a batch of {other} "
            f"after one of {size} agrees with it", {"observations": picks, "batch_dims": found, "other_batch": other})


# Note [the second batch]
#     The batch of another size runs on the layer the layout's batch ran on, as training's last
#     batch follows the full ones: what the first call caches (a mask, a table in a plain
#     attribute) is still there. State is another matter: where predict changed a buffer (a
#     recurrent hidden state carried from call to call), the second batch's outputs depend on it
#     and cannot be compared with the first batch's. A user starts a new sequence with the
#     layer's reset_state, so the check calls it; a layer without one has no way to start again
#     but a new layer, so the check puts everything back as it was (caches included: a cache held
#     in a buffer cannot be told from state, and is not exercised after the first batch).


_MIXED = ("the observation's output depends on the other observations of the batch: something reduces over the "
          "batch dimension (a mean, a norm, a softmax or another statistic over dim B; batch statistics in eval mode). "
          "Fix: reduce over each observation's own dimensions only, and in eval mode normalise with running "
          "statistics")


def _mixed_by(ctx: Context, subject: Subject, initial: Checkpoint, wide: list[torch.Tensor], dims: list[int | None],
              i: int, output: tuple[int, int], alone: torch.Tensor) -> str:
    """Why observation ``i`` differs in the batch, measured where it can be: a bool or integer input
    (a mask) reduced over the batch, when the batch agrees with the observation alone once every
    observation is given observation ``i``'s mask; else the general cause."""
    masks = [k for k, (x, d) in enumerate(zip(wide, dims)) if d is not None and not x.is_floating_point()]
    if not masks:
        return _MIXED
    same = [torch.cat([x.narrow(d, i, 1)] * x.shape[d], d) if k in masks and d is not None else x
            for k, (x, d) in enumerate(zip(wide, dims))]
    try:
        outputs = predict_run(subject, same).outputs
    except LayerRaised:
        return _MIXED
    finally:
        subject.rewind(initial)
    j, d = output
    try:
        assert_close([outputs[j].narrow(d, i, 1)], [alone], names=[f"output {j}"],
                     allowance=path_allowance(ctx, PREDICT), what="the batch with one mask repeated")
    except CheckFailed:
        return _MIXED
    named = ", ".join(f"input {k} ({str(wide[k].dtype).removeprefix('torch.')})" for k in masks)
    return (f"given observation {i}'s {named} in every observation, the batch agrees with observation {i} alone: the "
            f"layer combines that mask across the batch (mask.any(0), mask.all(0), a sum over dim {dims[masks[0]]}?), "
            "so one observation's padding changes the others. Fix: reduce a mask over its own observation's dimensions "
            "only, keeping the batch dimension (mask.any(-1, keepdim=True))")


def _start_again(subject: Subject, initial: Checkpoint) -> None:
    """Ready ``subject`` for the second batch after the first (Note [the second batch])."""
    if not any(change.startswith("buffer ") for change in subject.changes(initial)):
        return
    reset = getattr(subject.module, "reset_state", None)
    if callable(reset):
        try:
            reset()
            return
        except Exception:  # a reset_state that raises is reset_state's finding
            pass
    subject.rewind(initial)


def _first(inputs: list[torch.Tensor], dims: list[int | None], count: int) -> list[torch.Tensor]:
    """The inputs cut to their first ``count`` observations (inputs without a batch as they are)."""
    return [x if d is None else x.narrow(d, 0, count).clone(memory_format=torch.contiguous_format)
            for x, d in zip(inputs, dims)]


def _compare(ctx: Context, expected: list[torch.Tensor], actual: list[torch.Tensor], name: str, what: str,
             hint: str = "", labels: tuple[str, str] = ("expected", "got")) -> None:
    """The two sides agree, or the check fails (or skips, where predict draws random numbers);
    ``labels`` say which number is which side's."""
    try:
        assert_close(expected, actual, names=[name], allowance=path_allowance(ctx, PREDICT), what=what,
                     labels=labels)
    except CheckFailed as exc:
        # asked only now: a layer that predicts the same whatever its random stream (nearly
        # every one) never pays for the second predict of the batch
        if predict_is_random(ctx):
            raise CheckSkipped("predict draws random numbers, so observations cannot be compared"
                               + ctx.reported_by("deterministic"), applies=True) from None
        if hint:
            raise CheckFailed(f"{exc.message}: {hint}", **exc.details) from None
        raise


def _compare_fewer(ctx: Context, batched: list[torch.Tensor], fewer: list[torch.Tensor], found: list[int | None],
                   big: int, small: int) -> None:
    """The batch of ``small`` observations (the first of the ``big`` ones) gives the outputs of
    those observations in the batch of ``big``: the same number of outputs, each the size of
    the big batch's along every dimension but its batch dimension."""
    if len(fewer) != len(batched):
        raise CheckFailed(f"a batch of {big} gives {len(batched)} output tensor(s), a batch of {small} "
                          f"{len(fewer)}: {_KEEPS_THE_BATCH}", batch=describe_shapes(batched),
                          other=describe_shapes(fewer))
    for j, d in enumerate(found):
        if d is None:
            continue
        wanted = (*batched[j].shape[:d], small, *batched[j].shape[d + 1:])
        if tuple(fewer[j].shape) != wanted:
            raise CheckFailed(f"output {j} has size {tuple(fewer[j].shape)} for a batch of {small} but "
                              f"{tuple(batched[j].shape)} for a batch of {big}; with its batch along dim {d} it "
                              f"should be {wanted}: {_KEEPS_THE_BATCH}", output=j, batch=list(batched[j].shape),
                              other=list(fewer[j].shape))
        _compare(ctx, [batched[j].narrow(d, 0, small)], [fewer[j]], f"output {j}",
                 f"the first {small} observations of a batch of {big} vs a batch of those {small} (batch dim {d})",
                 hint=_KEEPS_THE_BATCH, labels=(f"the batch of {big}", f"the batch of {small}"))


def _batch_dims(batched: list[torch.Tensor], single: list[torch.Tensor], size: int) -> list[int | None]:
    """Each output's batch dimension: the one that is ``size`` for the batch and 1 alone.
    None for outputs whose size does not follow the batch (nothing to compare)."""
    if len(batched) != len(single):
        raise CheckFailed(f"a batch of {size} gives {len(batched)} output tensor(s), a batch of one {len(single)}",
                          batch=describe_shapes(batched), single=describe_shapes(single))
    dims: list[int | None] = []
    for j, (b, s) in enumerate(zip(batched, single)):
        if b.dim() != s.dim():
            raise CheckFailed(
                f"output {j} has size {tuple(s.shape)} for a batch of one but {tuple(b.shape)} for a batch of {size}: "
                "a dimension disappears for one observation (a squeeze() that drops the batch dimension?). Fix: "
                "squeeze named dimensions only (x.squeeze(-1), not x.squeeze(), which drops a batch of one too)",
                output=j, batch=list(b.shape), single=list(s.shape),
            )
        differ = [d for d in range(b.dim()) if b.shape[d] != s.shape[d]]
        dims.append(differ[0] if len(differ) == 1 and (b.shape[differ[0]], s.shape[differ[0]]) == (size, 1) else None)
    return dims


def _another_observation(ctx: Context, index: int, x: torch.Tensor, dim: int, count: int = 0) -> torch.Tensor:
    """Another seeded observation (the ``count``-th) of input ``index``, drawn as that input is
    drawn, so a layout with fewer observations than the checks need still gets a batch."""
    return ctx.target.observation(index, ctx.seed * 1_000_003 + 104_729 + 7_919 * count).to(x.device, x.dtype)

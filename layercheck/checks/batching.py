"""Observations are independent: a batch gives what its observations give one at a time."""

from __future__ import annotations

from typing import Any

import torch

from layercheck.sdk import (
    PREDICT,
    CheckFailed,
    CheckSkipped,
    Context,
    assert_close,
    check,
    describe_shapes,
    failing,
    needs_batch,
    path_allowance,
    path_tolerances,
    predict_is_random,
    predict_run,
    reference_predict,
)

_SAMPLED = 4  # observations run one at a time: batch-wide mixing shows in every one, so a few suffice


@check(
    "observations",
    title="in predict mode a batch gives the same outputs as its observations one at a time",
    matlab="checks with ObservationDimension",
    uses=(PREDICT,),
    applies=needs_batch,
    tolerances=path_tolerances("relative difference between an observation's outputs in a batch and alone"),
)
def observations(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Predicts a batch, then a few of its observations alone (batches of one, each from
    the initial state), finds each output's batch dimension by comparing the two sizes
    (it may move or vanish: SSCB to CB pooling, an LSTM's hidden state), and compares
    the observations' slices.

    At prediction time an observation's result must not depend on what else is in the
    batch: batch-wide normalisation in ``eval()``, a ``squeeze()`` that drops the batch
    dimension of a batch of one, or a reshape that mixes observations all break this.
    Batch statistics in training mode (BatchNorm) are not checked. Fix: normalise with
    running statistics in eval mode; squeeze named dimensions only.
    """
    subject = ctx.fresh()
    initial = subject.checkpoint()
    inputs = subject.inputs()
    dims = [layout.batch_dim for layout in ctx.layouts]
    size = next(x.shape[d] for x, d in zip(inputs, dims) if d is not None)
    if size == 1:
        inputs = [x if d is None else torch.cat([x, _another_observation(ctx, k, x, d)], d)
                  for k, (x, d) in enumerate(zip(inputs, dims))]
        size = 2
        batched = predict_run(subject, inputs).outputs
        subject.rewind(initial)
    else:
        batched = reference_predict(ctx).outputs
    if not any(size in y.shape for y in batched):
        # a reduction over the batch (a loss, a batch statistic): a batch of one need not even
        # be valid for it (a contrastive loss asserts two observations)
        raise CheckSkipped(f"no output has a dimension of the batch's size ({size}): each reduces over the batch "
                           "(a loss, a batch statistic), so none can be compared observation by observation")
    picks = sorted({round(k * (size - 1) / (_SAMPLED - 1)) for k in range(_SAMPLED)})
    found: list[int | None] | None = None
    for i in picks:
        alone = [x if d is None else x.narrow(d, i, 1).clone(memory_format=torch.contiguous_format)
                 for x, d in zip(inputs, dims)]
        with failing(f"a batch of one observation (observation {i} of {size})", observation=i):
            single = predict_run(subject, alone).outputs
        subject.rewind(initial)
        if found is None:
            found = _batch_dims(batched, single, size)
        for j, d in enumerate(found):
            if d is not None:
                try:
                    assert_close([batched[j].narrow(d, i, 1)], [single[j]], names=[f"output {j}"],
                                 allowance=path_allowance(ctx, PREDICT),
                                 what=f"observation {i} of a batch of {size} vs the same observation alone "
                                      f"(batch dim {d})")
                except CheckFailed:
                    # asked only now: a layer that predicts the same whatever its random stream
                    # (nearly every one) never pays for the second predict of the batch
                    if predict_is_random(ctx):
                        raise CheckSkipped("predict draws random numbers, so observations cannot be compared"
                                           + ctx.reported_by("deterministic"), applies=True) from None
                    raise
    assert found is not None
    compared = [j for j, d in enumerate(found) if d is not None]
    if not compared:
        raise CheckSkipped("no output changes size with the batch, so none can be compared observation by observation")
    where = ", ".join(f"output {j} along dim {found[j]}" for j in compared)
    return (f"observations {picks} of {size} agree with the batch ({where}); batches of one work",
            {"observations": picks, "batch_dims": found})


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
                "a dimension disappears for one observation (a squeeze() that drops the batch dimension?)",
                output=j, batch=list(b.shape), single=list(s.shape),
            )
        differ = [d for d in range(b.dim()) if b.shape[d] != s.shape[d]]
        dims.append(differ[0] if len(differ) == 1 and (b.shape[differ[0]], s.shape[differ[0]]) == (size, 1) else None)
    return dims


def _another_observation(ctx: Context, index: int, x: torch.Tensor, dim: int) -> torch.Tensor:
    """A second seeded observation of input ``index``, drawn as that input is drawn, so a layout
    with one observation still gets a batch to compare against."""
    return ctx.target.observation(index, ctx.seed * 1_000_003 + 104_729).to(x.device, x.dtype)

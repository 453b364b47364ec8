"""How much a layer's own float32 rounding moves each tensor it computes, measured on the layer.

Note [rounding floor]
    Checks that compare two float32 computations of the same tensors (strided vs contiguous
    inputs, CPU vs accelerator, compiled vs eager, a batch vs its observations, float32 vs
    float64 gradients) bound the difference by a relative tolerance and an absolute part
    scaled to the tensor's largest element. Neither bounds an element that is zero by
    cancellation: the gradient of a bias directly before a normalisation is exactly zero, and
    float32 returns the rounding left over from a sum of terms that cancel (about 1e-6 where
    the terms are of order one, while float64 returns 1e-15). That residue is as large as the
    tensor's largest element, so every relative rule calls it a bug.

    The floor measures that residue instead of guessing it: the shared float32 run is
    repeated with every floating input and parameter moved by one unit in the last place
    (``torch.nextafter``, a random direction per element) — another rounding of the same
    computation, as another summation order would give. Per tensor, the spread |A − B|
    between the runs is what rounding alone produces; a comparison may then differ by
    SAFETY times its largest element (its norm, for the norm-based comparisons). Four
    perturbed runs are taken and the largest spread kept, so a spread that is small by chance
    does not make the floor small: with two, MONAI's SimpleASPP (four convolutions with a bias,
    concatenated, then a 1x1 convolution and BatchNorm2d: every bias is zero by cancellation,
    in tensors of two elements) got a floor 10-15 times below the difference between its
    channels-last and contiguous bias gradients for 2 of 30 initialisations; with four, for
    none of 80. A comparison that combines several runs (grad_output's −1.75·g(w1) + 0.5·g(w2)
    against g(−1.75·w1 + 0.5·w2)) carries the rounding of each, and its floor is multiplied
    by the sum of their coefficients' magnitudes (``path_allowance(combined=)``). The runs
    are made only when a comparison would fail without the floor.

    The other side of a comparison may round more than the shared run does: another summation
    order is another error, not only another draw of the same one. At 14 observations of
    16,8,24,24 SimpleASPP's channels-last float32 bias gradients (zero in float64) are up to
    sixteen times further from zero than the contiguous ones, and they differed from the
    contiguous ones by 11-20 times the contiguous run's spread for 3 of 4 initialisations: the
    channels-last run's perturbed spread was no larger, as perturbing the inputs by one unit in
    the last place hardly moves the rounding of a long float32 sum, whose partial sums round at
    bits far above the perturbation. So where the first floor is not enough and the check names
    its other side as an ``InputPath`` (the same run on inputs stored another way), the rounding
    of each side is measured directly: its float32 run against its float64 run at the same point
    (the float32 inputs and parameters widened). Where both float64 runs give the tensor as zero
    (its largest magnitude at most CANCELLED of the float32 distance), the floor is SAFETY times
    the larger distance. Elsewhere a float32 run far from its float64 run is no rounding but a
    bug of the float32 path, which such a floor would hide: there the floor is the other side's
    perturbation spread.

    Why SAFETY = 8: measured on conv+BatchNorm2d, Linear+BatchNorm1d and Conv1d+InstanceNorm1d
    at seeds 0-2, the largest difference between channels-last and contiguous (and between
    float32 and float64) bias gradients was 3.4 times the larger of the two spreads. For an
    element that is not zero by cancellation the floor is about eight units of rounding of the
    element itself, far below the relative tolerances (1e-4 and more), so it loosens nothing
    there; a bug moves an element by its own size, far above any floor.

    Large tensors: a perturbation that moves an element across a kink (a threshold, a
    max-pooling tie) changes it by the size of the jump, which is not rounding. Such
    crossings are rare (about one in ten million elements), so for tensors of more than
    TRIMMED elements the few largest spreads (one in TRIMMED) are left out.

Note [emulated rounding]
    A one-ulp move of the inputs and parameters cannot change the rounding of a value that
    does not move with them. lucidrains' En-transformer gates its outputs by sigmoid(Wx + b)
    with W zero and b = 10 at initialisation: the gate is the constant 0.99995 whose float32
    value has a relative error of 1e-3 in 1 - s, which every gradient through the gate carries,
    the same in every perturbed run. Its float32 gate-bias gradient is 0.3-1.7% off float64's,
    the perturbed runs' spread 100 times below that; its coordinates' gradient, through norms of
    differences of coordinates, is 3e-4 off where the spread says 1e-4. Both were failures of a
    correct layer (gradients[float32], grad_output).

    So where the spread's floor is not enough, float32's rounding is emulated on the float64
    copy at the same point (the float32 inputs and parameters widened): under a dispatch mode,
    every float64 value an operation computes is rounded to a float32 value within one and a
    half float32 spacings of it, as a float32 kernel's result may be (float32's sigmoid(13.5)
    is a whole spacing off: its 1 + exp(-x) rounds inside the kernel); values float32 holds
    exactly stay. A hash of the value and a seed picks the neighbour, so equal values round
    alike, as in a float32 kernel: a constant broadcast over a tensor carries one error, not
    many independent ones that would average out in a sum. (Stochastic rounding, a fresh draw
    per element with the nearer neighbour the likelier, left the open gate of
    tests/zoo/good_saturated_gate.py failing: its float64 sigmoid lies 0.0007 spacings from a
    float32 value, which that rounding almost always picks, and what it did move averaged out.)
    Each of PERTURBATIONS runs, with seeds of its own, lands about as far from the plain
    float64 run as a float32 run does; the floor is SAFETY times the farthest. Measured on En-transformer
    (seeds 0-1, every gradient), the float32 error was 0.02-3.5 times the emulated distance
    (0.5-0.95 for the gates' gradients), within SAFETY.

    It follows the float64 code path, so a float32 path that computes differently still shows:
    tests/zoo/gradients_float32_only_centring.py (a bias gradient zero by cancellation, its
    incoming mean rounded to bfloat16 in float32 only) differs from float64 by 4e3-2.5e4 times
    the emulated distance (seeds 0-2). The emulation costs a dozen passes over every value the
    layer computes, so it runs only where a comparison fails with the spread's floor.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from layercheck.parent.errors import LayerRaised
from layercheck.parent.layout import Layout
from layercheck.parent.registry import SharedRun
from layercheck.support.compare import EXACT, Allowance, AllowanceFor, largest, real_view, scaled_allowance
from layercheck.support.context import Context
from layercheck.support.runs import (
    FORWARD,
    Run,
    forward_run,
    output_names,
    predict_run,
    reference_forward,
    reference_predict,
)
from layercheck.target.subject import Subject

SAFETY = 8.0
PERTURBATIONS = 4
TRIMMED = 10_000
CANCELLED = 1e-3


@dataclass(frozen=True)
class Spread:
    """How far two float32 roundings of one computation land apart, per named tensor (the
    names :func:`layercheck.support.runs.comparable` gives: ``output 0``, ``gradient of input 0``,
    ``state 'running_mean'``)."""

    largest: dict[str, float]  # the largest elementwise |A − B| (trimmed for large tensors)
    norms: dict[str, float]  # ‖A − B‖
    # the largest magnitude of B, where B is a float64 run (float64_error): whether a tensor is
    # zero by cancellation, its float32 values nothing but the rounding of terms that cancel
    magnitudes: dict[str, float] = field(default_factory=dict)

    def cancelled(self, name: str) -> bool:
        """Whether the float64 run gives ``name`` as zero (its largest magnitude at most CANCELLED
        of the float32 run's distance from it): rounding is all the float32 run has there."""
        error = self.largest.get(name, 0.0)
        return error > 0 and self.magnitudes.get(name, math.inf) <= CANCELLED * error

    def floor(self, name: str) -> float:
        """The absolute allowance for one element of ``name`` (Note [rounding floor])."""
        return SAFETY * self.largest.get(name, 0.0)

    def norm_floor(self, name: str) -> float:
        """The allowance for the norm of a difference of two computations of ``name``."""
        return SAFETY * self.norms.get(name, 0.0)


SOURCE = f"{SAFETY:g}x the spread between two float32 roundings of this tensor"
"""How a failure message names where the floor comes from."""
EMULATED_SOURCE = (f"{SAFETY:g}x how far float32 rounding after every operation, emulated on the float64 run, "
                   "moves this tensor")


@dataclass(frozen=True)
class InputPath:
    """Another way of running a shared run: the layer's inputs stored another way (``inputs``
    turns each generated input, with its layout, into the one the layer gets), named by
    ``label`` ("channels-last")."""

    label: str
    inputs: Callable[[torch.Tensor, Layout], torch.Tensor]


@dataclass(frozen=True)
class Point:
    """Another layer to measure a spread on: ``fresh`` builds it in float32 (the target's
    layer with its parameters moved, say), ``label`` names it."""

    label: str
    fresh: Callable[[], Subject]


def spread(ctx: Context, run: SharedRun, path: InputPath | None = None, *, at: Point | None = None) -> Spread:
    """The rounding spread of the shared float32 ``run`` (PREDICT or FORWARD), or of the same
    run along ``path``, or of the layer ``at`` another point, computed once per target."""
    ctx.use(run)
    key = ("rounding spread", run.name, None if path is None else path.label, None if at is None else at.label)
    return ctx.shared(key, lambda: _measure(ctx, run, path, at))


def _measure(ctx: Context, run: SharedRun, path: InputPath | None, at: Point | None) -> Spread:
    fresh = ctx.fresh if at is None else at.fresh
    if path is None and at is None:
        reference = reference_forward(ctx) if run is FORWARD else reference_predict(ctx)
    else:
        subject = fresh()
        reference = run_along(ctx, run, subject, subject.inputs(), path)
    return _distances(reference, (run_along(ctx, run, *_perturbed(ctx, k, fresh), path)
                                  for k in range(PERTURBATIONS)))


def float64_error(ctx: Context, run: SharedRun, path: InputPath | None = None) -> Spread | None:
    """How far the float32 ``run`` (PREDICT or FORWARD, along ``path``) lands from the same run
    of the float64 copy at the same point (the float32 inputs and parameters widened): its
    rounding error itself, per named tensor. None when the float64 copy raises or returns other
    tensors. Computed once per target."""
    ctx.use(run)
    key = ("float64 error", run.name, None if path is None else path.label)
    return ctx.shared(key, lambda: _float64_error(ctx, run, path))


def _float64_error(ctx: Context, run: SharedRun, path: InputPath | None) -> Spread | None:
    subject = ctx.fresh()
    inputs = subject.inputs()
    wide = [x.detach().to(torch.float64) if x.is_floating_point() else x for x in inputs]
    low = run_along(ctx, run, subject, inputs, path)
    try:
        high = run_along(ctx, run, ctx.fresh(torch.float64), wide, path)
    except LayerRaised:
        return None
    names, values = _named(high)
    if names != _named(low)[0]:
        return None
    return replace(_distances(low, [high]), magnitudes={
        name: largest(value) for name, value in zip(names, values) if value.is_floating_point()})


def emulated(ctx: Context, run: SharedRun, *, at: Point | None = None) -> Spread | None:
    """How far float32 rounding of every value the layer computes moves each tensor of the
    shared ``run`` (PREDICT or FORWARD), emulated on the float64 copy at the float32 point
    (Note [emulated rounding]); on the layer ``at`` another point where one is given. None when
    the float64 copy raises or cannot run under a dispatch mode. Computed once per target."""
    ctx.use(run)
    key = ("emulated rounding", run.name, None if at is None else at.label)
    return ctx.shared(key, lambda: _emulated(ctx, run, at))


def _emulated(ctx: Context, run: SharedRun, at: Point | None) -> Spread | None:
    low = ctx.fresh() if at is None else at.fresh()  # the float32 point: its inputs, and at ``at`` its parameters
    point = low.inputs()

    def float64_run(rounding: _Float32Rounding | None = None) -> Run:
        subject = ctx.fresh(torch.float64)
        if at is not None:  # its float32 parameters, widened
            with torch.no_grad():
                for (_, wide), (_, value) in zip(subject.parameters(), low.parameters()):
                    wide.copy_(value)
        inputs = [x.detach().to(torch.float64) if x.is_floating_point() else x.clone() for x in point]  # per run
        with contextlib.nullcontext() if rounding is None else rounding:
            return run_along(ctx, run, subject, inputs, None)

    try:
        plain = float64_run()
        return _distances(plain, (float64_run(_Float32Rounding(ctx.seed * 7_919 + k)) for k in range(PERTURBATIONS)))
    except Exception:  # the float64 copy raises, or cannot run under a dispatch mode: no such floor
        return None


class _Float32Rounding(TorchDispatchMode):
    """Rounds every float64 (and complex128) value an operation computes to a float32 value
    near it (:func:`_rounded`, with ``seed``), in place in the operation's fresh output (Note
    [emulated rounding]). Views compute nothing; what an in-place operation writes is left as
    it is (rounding it again in place would count as a second write to autograd)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if any(r.alias_info is not None for r in func._schema.returns):
            return out
        held = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}

        def round_(t: Any) -> Any:
            if (isinstance(t, torch.Tensor) and t.dtype in (torch.float64, torch.complex128)
                    and t.device.type != "meta" and t.numel() and t.untyped_storage().data_ptr() not in held):
                real = real_view(t)
                real.copy_(_rounded(real, self.seed))
            return t

        return tree_map(round_, out)


def _rounded(t: torch.Tensor, seed: int) -> torch.Tensor:
    """``t`` (float64) rounded to a float32 value within one and a half float32 spacings of it,
    as a float32 kernel's result may be (the float32 sigmoid of 13.5 is a whole spacing off: its
    1 + exp(-x) rounds inside the kernel): a dither of up to one spacing either way, then
    rounding to nearest. The dither is a hash of the value and ``seed``, so equal values round
    alike, as they do in a float32 kernel (a constant broadcast over a tensor carries one error,
    not many that average out). Values float32 holds exactly, and those beyond its range, stay."""
    nearest = t.to(torch.float32).to(torch.float64)
    _, exponent = torch.frexp(t)
    spacing = torch.ldexp(torch.ones_like(t), exponent - 24)  # float32's, for normal numbers
    rounded = (t + (2 * _hash(t, seed) - 1) * spacing).to(torch.float32).to(torch.float64)
    return torch.where((nearest == t) | ~torch.isfinite(rounded), t, rounded)


def _hash(t: torch.Tensor, seed: int) -> torch.Tensor:
    """A number in [0, 1) for each element of ``t`` (float64), a function of its bits and
    ``seed`` only (a 32-bit integer hash, in int64 without overflow)."""
    mask = 0xFFFFFFFF
    bits = t.contiguous().view(torch.int64)
    h = ((bits ^ (bits >> 32)) ^ seed) & mask
    for _ in range(2):
        h = (((h >> 16) ^ h) * 0x45D9F3B) & mask
    return ((h >> 16) ^ h).to(torch.float64) / 2.0**32


def _distances(reference: Run, others: Iterable[Run]) -> Spread:
    """Per named tensor of ``reference``, the largest elementwise distance from each of ``others``
    (trimmed for large tensors) and the largest distance in norm."""
    names, values = _named(reference)
    largest: dict[str, float] = dict.fromkeys(names, 0.0)
    norms: dict[str, float] = dict.fromkeys(names, 0.0)
    for other in others:
        other_names, other_values = _named(other)
        if other_names != names:
            continue  # the perturbation changed what the layer returns: nothing to learn from it
        for name, a, b in zip(names, values, other_values):
            if a.shape != b.shape or not a.is_floating_point():
                continue
            difference = (a.detach().to(torch.float64) - b.detach().to(torch.float64)).abs()
            difference = torch.nan_to_num(difference, nan=0.0, posinf=0.0)
            largest[name] = max(largest[name], _robust_max(difference))
            norms[name] = max(norms[name], float(difference.norm()))
    return Spread(largest, norms)


def run_along(ctx: Context, run: SharedRun, subject: Subject, inputs: list[torch.Tensor],
              path: InputPath | None) -> Run:
    """The shared ``run`` (PREDICT or FORWARD) of ``subject`` on ``inputs``, taken along ``path``
    (the inputs stored its way) where one is given."""
    if path is not None:
        inputs = [path.inputs(x, spec.layout).detach() for spec, x in zip(ctx.target.specs, inputs)]
    if run is not FORWARD:
        return predict_run(subject, inputs)
    for spec, x in zip(ctx.target.specs, inputs):
        x.requires_grad_(spec.takes_grad)
    return forward_run(ctx, subject, inputs)


def _named(run: Run) -> tuple[list[str], list[torch.Tensor]]:
    names, values = output_names(run.outputs), list(run.outputs)
    for name, grad in run.grads:
        if grad is not None:
            names.append(f"gradient of {name}")
            values.append(grad)
    for name, value in run.state.items():
        if value is not None:
            names.append(f"state {name!r}")
            values.append(value)
    return names, values


def _perturbed(ctx: Context, k: int, fresh: Callable[[], Subject]) -> tuple[Subject, list[torch.Tensor]]:
    """A fresh layer and inputs with every element that takes a gradient moved one unit in the last place,
    up or down at random (seeded by the target's seed and ``k``)."""
    gen = torch.Generator().manual_seed(ctx.seed * 1_000_003 + 7_777 + k)
    subject = fresh()
    with torch.no_grad():
        for _, p in subject.parameters():
            p.copy_(_nudged(p, gen))
    # constant inputs (a mask, a lookup table) stay: only what takes a gradient is rounded anew
    return subject, [_nudged(x, gen) if spec.takes_grad else x for spec, x in zip(ctx.target.specs, subject.inputs())]


def _nudged(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    if x.is_complex():  # a Fourier layer's complex weights: their real and imaginary parts
        return torch.view_as_complex(_nudged(real_view(x.detach()), gen))
    up = torch.rand(x.shape, generator=gen) < 0.5
    toward = torch.where(up, torch.full((), float("inf")), torch.full((), float("-inf"))).to(x.device, x.dtype)
    return torch.nextafter(x.detach(), toward)


def _robust_max(difference: torch.Tensor) -> float:
    """The largest element, leaving out one in TRIMMED for large tensors (kink crossings)."""
    flat = difference.reshape(-1)
    trim = flat.numel() // TRIMMED
    if not flat.numel():
        return 0.0
    if trim == 0:
        return float(flat.max())
    return float(flat.kthvalue(flat.numel() - trim).values)


def path_allowance(ctx: Context, run: SharedRun | None = None, *, combined: float = 1.0,
                   path: InputPath | None = None) -> AllowanceFor:
    """The allowance of a check that compares the same math along another path: its declared
    (or overridden) relative tolerance for the tensor's dtype, the absolute part scaled to the
    tensor's largest magnitude (compare.scaled_allowance), and for float32 tensors of the
    shared ``run`` (PREDICT or FORWARD) the rounding floor measured on the layer (Note
    [rounding floor]): that run's; where that is not enough and the other side is the run
    along ``path``, one from the rounding of both sides; where that is not enough either, the
    one from float32 rounding emulated on the float64 run (Note [emulated rounding]).
    ``combined``: the sum of the magnitudes of the runs' coefficients when a comparison
    combines several runs (−1.75·g(w1) + 0.5·g(w2) against g(−1.75·w1 + 0.5·w2) carries
    1.75 + 0.5 + 1.82 runs' rounding), by which the floors of one run are multiplied."""
    times = "" if combined == 1.0 else f", times {combined:.3g} for the runs combined"

    def allowance(name: str, expected: torch.Tensor) -> Allowance:
        if not (expected.is_floating_point() or expected.is_complex()):
            return EXACT
        dtype = expected.real.dtype if expected.is_complex() else expected.dtype  # complex64: float32's
        allowed = scaled_allowance(expected, ctx.tolerance(dtype))
        if run is None or dtype != torch.float32:
            return allowed
        floors: list[Callable[[], tuple[float, str]]] = [
            lambda: (combined * spread(ctx, run).floor(name), SOURCE + times)]
        if path is not None:
            floors.append(lambda: _either_side(ctx, run, path, name))
        floors.append(lambda: _emulated_floor(emulated(ctx, run), name, combined, times))
        return _refined(allowed, floors)

    return allowance


def _refined(allowance: Allowance, floors: Sequence[Callable[[], tuple[float, str]]]) -> Allowance:
    """``allowance``, raised where it is exceeded to each of ``floors`` in turn (a floor and its
    source), each measured only when the one before is not enough."""
    if not floors:
        return replace(allowance, refine=None)
    first, rest = floors[0], floors[1:]
    return replace(allowance, refine=lambda: _refined(replace(allowance, refine=None).with_floor(*first()), rest))


def _emulated_floor(found: Spread | None, name: str, combined: float = 1.0, times: str = "",
                    norm: bool = False) -> tuple[float, str]:
    """The floor of ``name`` (of its norm: ``norm``) from the emulated rounding ``found``, and its source."""
    if found is None:
        return 0.0, ""
    floor = found.norm_floor(name) if norm else found.floor(name)
    return combined * floor, EMULATED_SOURCE + times


def _either_side(ctx: Context, run: SharedRun, path: InputPath, name: str) -> tuple[float, str]:
    """The floor of ``name`` from the rounding of both sides of a comparison of ``run`` with the
    same run along ``path`` (Note [rounding floor]), and where it comes from: where the float64
    runs of both sides give ``name`` as zero, each side's float32 run's distance from its float64
    run; otherwise (a tensor that is not zero, where a float32 run far from the float64 one is a
    bug, not rounding; a layer without a float64 run) the other side's spread."""
    mine, theirs = float64_error(ctx, run), float64_error(ctx, run, path)
    if mine is not None and theirs is not None and mine.cancelled(name) and theirs.cancelled(name):
        return (max(mine.floor(name), theirs.floor(name)),
                f"{SAFETY:g}x the larger distance of either side's float32 run from its float64 run, which gives "
                "zero")
    return (spread(ctx, run, path).floor(name),
            f"{SAFETY:g}x the spread between two float32 roundings with {path.label} inputs")


def gradient_norm_floor(ctx: Context, name: str, dtype: torch.dtype = torch.float32, *,
                        at: Point | None = None, needed: float = 0.0) -> tuple[float, str]:
    """The norm floor of the float32 forward run's gradient of ``name`` (``input 0``,
    ``parameter 'w'``), for a comparison of two ``dtype`` computations of that gradient:
    scaled by the ratio of the dtypes' machine epsilons for float16 and bfloat16; and where it
    comes from. ``needed``: the floor the comparison needs; where the spread's is below it, the
    one from float32 rounding emulated on the float64 run is measured too and the larger taken
    (Note [emulated rounding]). ``at``: measured on that layer instead of the target's."""
    key, scale = f"gradient of {name}", torch.finfo(dtype).eps / torch.finfo(torch.float32).eps
    floor, source = spread(ctx, FORWARD, at=at).norm_floor(key) * scale, SOURCE
    if floor < needed:
        wider, wider_source = _emulated_floor(emulated(ctx, FORWARD, at=at), key, norm=True)
        if wider * scale > floor:
            floor, source = wider * scale, wider_source
    return floor, source

"""The finite-difference engine (layercheck/numerics/): accuracy on correct layers, power on
wrong gradients, kinks, lower-precision layers, fixed state and random stream, determinism,
cost independent of the input size, and narrowing a disagreement down."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from layercheck.numerics.engine import BASE_STEP, EPS64, FiniteDifferences, NotDifferentiable, TooNoisy
from layercheck.numerics.functions import LayerFunction
from layercheck.numerics.locate import diagnose
from layercheck.numerics.probes import Probe, Region
from layercheck.numerics.verdict import TIGHT, judge
from layercheck.parent.layout import Layout
from layercheck.target.subject import Target

from conftest import load_zoo


def reference(layer: type | nn.Module, *layouts: str, seed: int = 0,
              inputs: list[torch.Tensor] | None = None) -> tuple[FiniteDifferences, list[torch.Tensor | None]]:
    """A float64 layer as a function, seeded cotangents, its analytic gradient and its differences."""
    target = Target(layer, [Layout.parse(text) for text in layouts], seed=seed)
    subject = target.build(torch.float64)
    fn = LayerFunction(subject, inputs if inputs is not None else subject.inputs())
    gen = torch.Generator().manual_seed(seed)
    run = fn.gradient(lambda outputs: [torch.randn(y.shape, generator=gen, dtype=torch.float64) for y in outputs])
    return FiniteDifferences(fn, run.cotangents, seed=seed), run.grads


class Tanh(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1.0, 1.0, 15).view(3, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ self.weight.T)


class ReLU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


class Positive(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[x > 0]


def test_correct_gradient_agrees_to_rounding() -> None:
    fd, grads = reference(Tanh, "4,5:BC")
    verdict = judge(fd, grads, 1e-6)
    assert verdict.passed and not verdict.retried
    assert verdict.step == BASE_STEP
    assert verdict.worst.relative_error < 1e-7


def test_wrong_gradient_is_seen_with_its_size() -> None:
    fd, grads = reference(Tanh, "4,5:BC")
    scaled = [g * 1.01 for g in grads]  # a 1% error: the relative error must be of that order
    verdict = judge(fd, scaled, 1e-6)
    assert not verdict.passed
    assert 1e-3 < verdict.worst.relative_error < 0.1


def test_a_first_direction_that_agrees_tightly_settles_the_joint_verdict() -> None:
    # Note [one direction that agrees tightly] in numerics/verdict.py
    fd, grads = reference(Tanh, "4,5:BC")
    tight = judge(fd, grads, 1e-6, tight=True)
    assert tight.passed and len(tight.comparisons) == 1
    assert tight.worst.relative_error <= TIGHT * 1e-6
    assert len(judge(fd, grads, 1e-6).comparisons) == 2  # not asked: both directions
    assert len(judge(fd, grads, 1e-6, slot=1, tight=True).comparisons) == 2  # one tensor's: its own two
    # within the tolerance but not a hundredth of it: the second direction is taken, and judges
    off = [g * (1 + 3e-7) for g in grads]
    loose = judge(fd, off, 1e-6, tight=True)
    assert TIGHT * 1e-6 < loose.comparisons[0].relative_error < 1e-6
    assert len(loose.comparisons) == 2 and loose.passed
    wrong = judge(fd, [g * 1.01 for g in grads], 1e-6, tight=True)
    assert not wrong.passed and len(wrong.comparisons) >= 2


def test_one_parameter_wrong_is_named_and_located_element_by_element() -> None:
    fd, grads = reference(Tanh, "4,5:BC")
    broken = list(grads)
    broken[1] = grads[1].clone()
    broken[1][2, 4] += 0.5
    wrong, right = diagnose(fd, broken, 1e-6)
    assert [f.name for f in wrong] == ["parameter 'weight'"]
    assert right == ["input 0"]
    assert wrong[0].elements[0]["index"] == [2, 4]
    assert abs(wrong[0].elements[0]["analytic"] - wrong[0].elements[0]["numeric"] - 0.5) < 1e-4


class Deep(nn.Module):
    """Twenty tanh layers with a weight and a bias each: 40 parameters, 41 tensors with the input."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.layers = nn.ModuleList(nn.Linear(5, 5) for _ in range(20))
        for layer in self.layers:
            nn.init.normal_(layer.weight, std=0.5, generator=gen)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def test_many_tensors_are_judged_in_groups_and_the_wrong_ones_named() -> None:
    # Note [tensors judged in groups]: one by one, a whole network's 189 tensors took a failing
    # U-Net five minutes; in groups of seven, 6 groups and the failing groups' 14 tensors
    fd, grads = reference(Deep, "4,5:BC")
    names = fd.fn.names
    broken = list(grads)
    for name in ("parameter 'layers.3.bias'", "parameter 'layers.17.weight'"):
        slot = names.index(name)
        broken[slot] = grads[slot] * 1.5
    before = fd.evaluations
    wrong, right = diagnose(fd, broken, 1e-6)
    assert [f.name for f in wrong] == ["parameter 'layers.3.bias'", "parameter 'layers.17.weight'"]
    assert right == [name for name in names if name not in {f.name for f in wrong}]
    assert "1.5" in (wrong[0].pattern or "")
    judged_one_by_one = 2 * len(names)  # at least one direction, two evaluations, per tensor
    assert fd.evaluations - before < judged_one_by_one


def test_a_step_across_a_kink_is_not_a_wrong_gradient() -> None:
    x = torch.randn(50, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x[7] = 1e-13  # every difference step crosses ReLU's kink here
    fd, grads = reference(ReLU, "50:U", inputs=[x])
    verdict = judge(fd, grads, 1e-6)
    assert verdict.passed
    assert any(c.kink_crossed for c in verdict.comparisons)
    wrong = [g.clone() for g in grads]
    wrong[0][20] += 1.0  # a real error elsewhere is still seen despite the kink
    assert not judge(fd, wrong, 1e-6).passed


def test_an_output_size_that_a_step_changes_is_not_differentiable() -> None:
    x = torch.tensor([0.0, 1.0, -2.0, 0.5], dtype=torch.float64)  # one side of every step moves x[0] above 0
    fd, grads = reference(Positive, "4:U", inputs=[x])
    with pytest.raises(NotDifferentiable, match="finite differences do not apply to this layer"):
        judge(fd, grads, 1e-6)


def test_layer_computing_in_float32_gets_a_larger_step_and_passes() -> None:
    layer = load_zoo("good_grad_float32_inside").LAYER
    fd, grads = reference(layer, "4,16:BC")
    verdict = judge(fd, grads, 1e-6)
    assert verdict.passed
    assert verdict.precision_limited and verdict.step > BASE_STEP
    scaled = [g * 1.01 for g in grads]
    assert not judge(fd, scaled, 1e-6).passed  # still able to see a 1% error


class Steep(nn.Module):
    """sin(3e6·x): the per-element step at 1e-8 is about a tenth of its period."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(3e6 * x)


def test_a_steep_layer_keeps_the_base_step_and_is_judged_at_smaller_ones() -> None:
    # Note [steep at the base step]: its second differences at 1e-8 are curvature, not rounding;
    # taken for noise, they grew the step and finite differences could not judge at all
    fd, grads = reference(Steep, "4,6:BC")
    verdict = judge(fd, grads, 1e-6)
    assert fd.steep() and verdict.step == BASE_STEP
    assert fd.noise_bound(BASE_STEP) < 1e-3 * fd.noise(refined=True) / BASE_STEP  # rounding alone
    assert verdict.passed and verdict.worst.relative_error < 1e-6
    wrong = [g * 1.001 for g in grads]  # a 0.1% error is as wrong at every step
    assert not judge(fd, wrong, 1e-6).passed


class CurvedOverLargeSums(nn.Module):
    """sin(3e6·x) + 1e8·x: curvature at the base step, over sums whose float64 rounding is 2e-7."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(3e6 * x) + 1e8 * x


def test_curvature_over_large_sums_is_not_taken_for_rounding() -> None:
    # Note [curvature over large sums]: at a hundredth of the base step its second differences sink
    # to within ten times the floor; taken for rounding, they grew the step, whose noise bound then
    # let a gradient 3% wrong pass
    fd, grads = reference(CurvedOverLargeSums, "4,6:BC")
    verdict = judge(fd, grads, 1e-6)
    assert fd.steep() and verdict.step == BASE_STEP and verdict.passed
    for factor in (1.001, 1.03):
        fd, grads = reference(CurvedOverLargeSums, "4,6:BC")
        assert not judge(fd, [g * factor for g in grads], 1e-6).passed


class Steeper(nn.Module):
    """sin(1e8·x): three periods per element at the base step, a thirtieth at a hundredth of it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(1e8 * x)


def test_a_layer_too_steep_for_any_usable_step_is_not_judged() -> None:
    # extrapolations still moving where rounding stops the steps: right and wrong look alike
    fd, grads = reference(Steeper, "4,6:BC")
    for candidate in (grads, [g * 1.001 for g in grads]):
        with pytest.raises(TooNoisy, match="too steep at the point"):
            judge(fd, candidate, 1e-6)


def test_differences_that_move_between_a_grown_step_and_twice_it_judge_nothing() -> None:
    # Note [a grown step that has not settled]: past the base step (here 2e-8 on sin(3e6·x), its
    # rounding taken as nil) the extrapolation's truncation is 1.5e-4 of the derivative: the
    # right gradient failed; it moves fifteen times that between the step and twice it
    fd, grads = reference(Steep, "4,6:BC")
    fd.noise_bound = lambda step: 0.0  # type: ignore[method-assign]
    with pytest.raises(TooNoisy, match=r"at the step its rounding noise needs \(2e-08\) and at twice it"):
        judge(fd, grads, 1e-6, step=2e-8)
    verdict = judge(fd, [g * 1.01 for g in grads], 1e-6, step=2e-8)  # a 1% error is as wrong at both
    assert not verdict.passed and any(not c.unresolved and not c.agrees for c in verdict.comparisons)


class Saturating(nn.Module):
    """x + tanh(1e11·(w − 5e-12)) + offset with w at zero (a chain of BatchNorms over two nearly equal
    values): linear only within 1e-11 of the point, a step beyond it, which makes second differences
    that stay the same from 1e-8 to 1e-10 as rounding's do. ``offset`` adds rounding to the sums."""

    def __init__(self, offset: float = 0.0) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(6))
        self.register_buffer("offset", torch.full((6,), offset))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(1e11 * (self.w - 5e-12)) + self.offset


def test_a_layer_linear_only_far_below_the_base_step_is_judged_there() -> None:
    # Note [steep below the base step]: taken for rounding, its second differences grew the step,
    # where the saturated differences settled at a millionth of the derivative: the right
    # gradient failed ("the right gradient is zero")
    fd, grads = reference(Saturating(), "4,6:BC")
    verdict = judge(fd, grads, 1e-6)
    assert verdict.step > BASE_STEP and verdict.passed
    assert all(c.taken_at is not None and c.taken_at < 1e-12 for c in verdict.comparisons)
    for factor in (2.0, 1.01, 1.0001):  # a wrong gradient settles away from it below the base step as well
        fd, grads = reference(Saturating(), "4,6:BC")
        assert not judge(fd, [g * factor for g in grads], 1e-6).passed


def test_differences_that_only_come_toward_the_gradient_below_the_base_step_judge_nothing() -> None:
    # with rounding in the sums that no step below 1e-11 gets under the tolerance (a whole
    # MobileNetV2 U-Net at 32x32, batch of two: 0.5% off at 1e-14, right to 1e-3 at 1e-13)
    fd, grads = reference(Saturating(1e10), "4,6:BC")
    with pytest.raises(TooNoisy, match="below 1e-08 they come toward it"):
        judge(fd, grads, 1e-6)
    fd, grads = reference(Saturating(1e10), "4,6:BC")
    assert not judge(fd, [g * 2 for g in grads], 1e-6).passed


class SingularScale(nn.Module):
    """x·(|w| + 1e-10)^0.75 + x with w at zero (as kornia's DenseSIFT takes sqrt(p + 1e-10) of
    its empty bins): within 1e-10 of the point a huge derivative, beyond it |w|^0.75, whose
    second differences fall 5.6x a decade: neither rounding nor kinks."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (self.w.abs() + 1e-10) ** 0.75 + x


def test_second_differences_that_fall_with_the_spacing_are_the_layers_own_not_rounding() -> None:
    # Taken for rounding, they grew the step to 1e-3, where kornia's DenseSIFTDescriptor then
    # failed (analytic 1e5 vs numeric 1e2); kept at the base step it is too steep to judge.
    fd, grads = reference(SingularScale, "16,64:BC")
    assert not fd.on_a_kink() and fd.steep()
    assert fd.step_for(fd.spread(Probe(0, BASE_STEP), grads), 1e-6) == BASE_STEP
    with pytest.raises(TooNoisy):
        judge(fd, grads, 1e-6)


def test_noise_that_does_not_fall_with_the_spacing_is_not_taken_for_steepness() -> None:
    layer = load_zoo("good_grad_float32_inside").LAYER
    fd, _ = reference(layer, "4,16:BC")
    assert not fd.steep()


def test_float64_noise_is_at_rounding_level() -> None:
    fd, _ = reference(Tanh, "4,5:BC")
    magnitude = float(fd.base().square().sum().sqrt())
    assert EPS64 * magnitude / 10 <= fd.noise() < 1e3 * EPS64 * max(magnitude, 1.0)


class JitteryTanh(nn.Module):
    """Three outputs, the last smooth only to 1e-9 (as a solver's result to its tolerance): a
    difference step of 1e-8 sees its jitter in one chunk, the other two only rounding."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        jitter = torch.zeros_like(x)
        jitter[..., 2] = 1e-9 * torch.sin(1e9 * x[..., 2])
        return torch.tanh(x) + jitter


def test_an_output_of_few_elements_counts_its_largest_residual() -> None:
    """Three elements give the noise estimate three chunks, whose median is too often far below
    the variance: below FEW_CHUNKS the largest squared residual counts (here the median of the
    three is a smooth element's, and would miss the jitter)."""
    fd, _ = reference(JitteryTanh, "3:U")
    up, down = fd.measure(Probe(0, BASE_STEP))
    residual = (up + down - 2 * fd.base())[0, :3]
    assert fd.noise() ** 2 >= float(residual.square().max()) / 6 * (1 - 1e-9)


def test_state_and_random_stream_are_the_same_for_every_evaluation() -> None:
    recurrent = load_zoo("good_grad_recurrent").LAYER
    fd, _ = reference(recurrent, "3,5:BC")
    first = fd._evaluate(fd.fn.point)  # each evaluation updates the hidden state ...
    assert torch.equal(first, fd._evaluate(fd.fn.point))  # ... and is restored before the next
    after = fd.fn.subject.snapshot()
    assert all(torch.equal(fd.fn.state.buffers[k], after[k]) for k in after)
    dropout = load_zoo("good_dropout_custom").LAYER
    fd, grads = reference(dropout, "4,3,5:BCU")
    assert torch.equal(fd._evaluate(fd.fn.point), fd._evaluate(fd.fn.point))
    assert judge(fd, grads, 1e-6).passed


def test_same_seed_same_numbers_other_seed_other_directions() -> None:
    a = judge(*reference(Tanh, "4,5:BC", seed=3), 1e-6)
    b = judge(*reference(Tanh, "4,5:BC", seed=3), 1e-6)
    c = judge(*reference(Tanh, "4,5:BC", seed=4), 1e-6)
    assert [x.numeric for x in a.comparisons] == [x.numeric for x in b.comparisons]
    assert [x.numeric for x in a.comparisons] != [x.numeric for x in c.comparisons]


def test_evaluations_do_not_grow_with_the_input_size() -> None:
    counts = []
    for layout in ("4,5:BC", "4000,5:BC"):
        fd, grads = reference(Tanh, layout)
        assert judge(fd, grads, 1e-6).passed
        counts.append(fd.evaluations)
    # the base point, two directions, and two more when curvature hides the noise level
    assert max(counts) <= 7


def test_a_wrong_value_range_is_located() -> None:
    layer = load_zoo("gradients_region_bug").LAYER
    fd, grads = reference(layer, "8,8,4,16:SSCB")
    wrong, right = diagnose(fd, grads, 1e-6)
    assert [f.name for f in wrong] == ["input 0"]
    assert len(right) == 4
    region = wrong[0].regions[0]
    assert region.startswith("values in [")
    low = float(region.removeprefix("values in [").split(",")[0])
    assert 1.5 < low <= 2.5  # the bug starts at 2.5; bins are quantiles, so the edge lies below
    assert wrong[0].elements
    for element in wrong[0].elements:  # the bug passes the gradient through instead of halving it
        assert abs(element["analytic"] - 2 * element["numeric"]) < 1e-4 * max(1.0, abs(element["analytic"]))


def test_regions() -> None:
    value = torch.arange(12.0).view(3, 4)
    assert Region(0, low=2.0, high=5.0).mask(value).sum() == 4
    slab = Region(0, dim=1, start=1, stop=3)
    assert slab.mask(value)[:, 1:3].all() and slab.mask(value).sum() == 6
    assert Region(0, element=7).mask(value)[1, 3]
    assert Region(0, element=7).describe(value.shape) == "element (1, 3)"
    assert slab.describe(value.shape) == "indices 1..2 of dimension 1"


def test_storages_forget_a_storage_once_its_tensors_are_gone() -> None:
    """A freed tensor's memory reused by another is not taken for it: the trace would see a
    float32 island or a step where there is none."""
    import gc

    from layercheck.numerics.trace import _Storages

    seen = _Storages()
    t = torch.randn(64)
    view = t[:8]
    seen.set(t, "round")
    seen.set(view, "round")
    del t
    gc.collect()
    assert seen.get(view) == "round"  # a view keeps the storage, and what was known of it, alive
    del view
    gc.collect()
    assert not seen


class _Heaviside(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(v)
        return (v > 0).to(v.dtype)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        (v,) = ctx.saved_tensors
        return grad / (1 + v.abs()) ** 2


class _Neuron(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.threshold = nn.Parameter(torch.full((5,), 0.25))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = torch.sigmoid(x) * 2  # autograd detaches the sigmoid's output to save it: no detach of the layer's
        spike = _Heaviside.apply(v - self.threshold)
        return spike, v - spike.detach() * self.threshold


def test_the_trace_finds_surrogate_functions_and_ignores_autograd_s_own_detaches() -> None:
    """Note [surrogate gradients]: a Function whose output is piecewise constant yet requires
    grad is recorded; a detached spike is no straight-through estimator (it is the same value
    held or not), and the detach autograd makes of a saved output is none of the layer's."""
    from layercheck.numerics.trace import trace

    subject = Target(_Neuron, [Layout.parse("4,5:BC")]).build(dtype=torch.float64)
    traced = trace(LayerFunction(subject, subject.inputs()))
    assert traced.surrogates == (_Heaviside,)
    assert traced.straight_through == () and traced.detached == 0 and traced.lowest == torch.float64


class _CfloatSpectrum(nn.Module):
    """A Fourier filter whose spectrum is written into a torch.cfloat buffer (Li et al.'s FNO)."""

    def __init__(self, cast: bool) -> None:
        super().__init__()
        self.cast = cast
        self.weight = nn.Parameter(torch.linspace(-1, 1, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spectrum = torch.fft.rfft(x)
        out = torch.zeros(spectrum.shape, dtype=torch.cfloat if self.cast else spectrum.dtype)
        out[..., :5] = spectrum[..., :5] * self.weight
        return torch.fft.irfft(out, n=x.shape[-1])


@pytest.mark.parametrize("cast", [True, False])
def test_the_trace_follows_values_through_an_fft(cast: bool) -> None:
    """Note [float32 islands]: a spectrum is complex; values computed through it are followed as
    the real ones before it, so a complex64 spectrum in the float64 copy is a float32 island (it
    was not seen: the trace followed floating tensors only)."""
    from layercheck.numerics.trace import trace

    subject = Target(_CfloatSpectrum, [Layout.parse("3,16:BT")], kwargs={"cast": cast}).build(dtype=torch.float64)
    traced = trace(LayerFunction(subject, subject.inputs()))
    assert traced.lowest == (torch.float32 if cast else torch.float64)

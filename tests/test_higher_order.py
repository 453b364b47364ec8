"""The opt-in higher-derivative checks as a user meets them: gradgrad (double backward) and
forward_ad (jvp) on the bundled layers, on broken and correct zoo layers, at a kink, through
the command line and in the JSON report; and the double backward the engine takes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.engine.runner import Options, run_target
from layercheck.numerics.functions import GradientFunction, LayerFunction
from layercheck.parent.layout import Layout
from layercheck.parent.registry import get, select
from layercheck.parent.result import RunReport
from layercheck.target.loading import resolve
from layercheck.target.subject import Target
from layercheck.target.tensors import backward_nodes

from conftest import ROOT, load_zoo, run_zoo, write_spec

HIGHER = ("gradgrad", "forward_ad")
runner = CliRunner()


def run(layer: type, *layouts: str, seed: int = 0, kwargs: dict | None = None,
        tolerance: dict[str, float] | None = None) -> RunReport:
    target = Target(layer, [Layout.parse(text) for text in layouts], kwargs=kwargs, seed=seed)
    return run_target(target, select(only=HIGHER), options=Options(seed=seed, tolerance=tolerance or {}))


def outcome(report: RunReport, check: str) -> tuple[str, str, dict]:
    (result,) = [r for r in report.results if r.check == check]
    return result.status.value, result.message, result.details


def bundled(name: str) -> type:
    return resolve(f"layers/{name}.py", base_dir=ROOT)


def test_both_checks_are_opt_in_and_need_the_gradient_check() -> None:
    for check_id in HIGHER:
        info = get(check_id)
        assert not info.default
        assert "gradients" in info.requires and "backward_runs" in info.requires
    default = {p.info.id for p in select()}
    assert not default & set(HIGHER)
    assert {p.info.id for p in select(enable=HIGHER)} >= set(HIGHER)


@pytest.mark.parametrize(("name", "layouts"), [
    ("srelu", ["4,5,3,2:SSCB"]),
    ("prelu", ["4,5,3,2:SSCB"]),
    ("srelu_function", ["4,5,3,2:SSCB", "1,1,3,1:UUCU", "1,1,3,1:UUCU", "1,1,3,1:UUCU", "1,1,3,1:UUCU"]),
])
def test_bundled_layers_are_twice_differentiable_and_define_a_jvp(name: str, layouts: list[str]) -> None:
    """Their backward is written with differentiable torch operations on the saved inputs, so
    the double backward is right; their Functions define a jvp, so forward mode agrees too."""
    report = run(bundled(name), *layouts)
    status, message, details = outcome(report, "gradgrad")
    assert status == "passed", message
    assert "grad_output 0" in message and details["directions"]
    assert max(d["relative_error"] for d in details["directions"]) < 1e-7
    status, message, details = outcome(report, "forward_ad")
    assert status == "passed", message
    assert max(d["relative_error"] for d in details["directions"]) < 1e-7
    assert max(d["relative_to_reverse"] for d in details["directions"]) < 1e-9


@pytest.mark.parametrize(("name", "check", "wrong", "agree"), [
    ("gradgrad_detached_parameter", "gradgrad", "parameter 'beta'", "input 0"),
    ("gradgrad_detached_grad_output", "gradgrad", "grad_output 0", "input 0"),
    ("gradgrad_wrong_double_backward", "gradgrad", "input 0", "grad_output 0"),
    ("forward_ad_jvp_ignores_parameter", "forward_ad", "parameter 'scale'", "parameter 'shift'"),
    ("forward_ad_wrong_jvp", "forward_ad", "input 0", "input 1"),
])
def test_a_wrong_higher_derivative_is_pinned_on_its_tensor(name: str, check: str, wrong: str, agree: str) -> None:
    status, message, details = outcome(run_zoo(name, only=(check,)), check)
    assert status == "failed"
    assert (f"wrong second derivative of {wrong}" if check == "gradgrad" else f"wrong jvp of {wrong}") in message
    assert agree in details["agree"] and wrong in [w["tensor"] for w in details["wrong"]]
    assert "tolerance 1e-06" in message
    assert details["reproduce"].endswith(f"--check {check} --seed 0")


def test_once_differentiable_backward_fails_gradgrad_with_the_reason() -> None:
    status, message, details = outcome(run_zoo("gradgrad_once_differentiable", only=("gradgrad",)), "gradgrad")
    assert status == "failed"
    assert "the backward of OnceSwishFunction is decorated with @once_differentiable" in message
    assert details["once_differentiable"] == ["OnceSwishFunction"]


class _Node:
    """A graph node whose Python object is made afresh on every access, as torch makes those of
    its C++ nodes: a walk that drops it may meet its memory (and id) again as another node's."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    @property
    def next_functions(self) -> tuple[tuple[_Node, int], ...]:
        return ((_Node(self.depth + 1), 0),) if self.depth < 20 else ()


def test_the_graph_walk_reaches_every_node_however_torch_makes_their_objects() -> None:
    """On torch 2.11 the walk stopped short of the once_differentiable node above: it told nodes
    apart by id without holding them, and a freed node's id came back as the next one's."""
    output = SimpleNamespace(grad_fn=_Node(0))  # stands in for a tensor
    assert [node.depth for node in backward_nodes([output])] == list(range(21))  # type: ignore[list-item]


def test_missing_jvp_fails_forward_ad_and_says_the_function_needs_one() -> None:
    status, message, _details = outcome(run_zoo("forward_ad_missing_jvp", only=("forward_ad",)), "forward_ad")
    assert status == "failed"
    assert "NoJvpSwishFunction (torch.autograd.Function) needs a jvp" in message
    assert "ctx.save_for_forward" in message


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x


class _NoGradBackward(_Square):
    """x² with a backward computed under no_grad: right values, nothing to differentiate."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.no_grad():
            return 2 * x * grad


class _RaisingDoubleBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad, x):
        ctx.save_for_backward(x)
        return 2 * x * grad

    @staticmethod
    def backward(ctx, gg):
        raise RuntimeError("double backward of square is not supported")


class _SquareWithRaisingDoubleBackward(_Square):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _RaisingDoubleBackward.apply(grad, x)


def test_a_backward_outside_autograd_or_a_raising_double_backward_fails_gradgrad() -> None:
    status, message, _ = outcome(run(_NoGradBackward, "4,3:BC"), "gradgrad")
    assert status == "failed"
    assert "does not require grad even with create_graph=True" in message
    status, message, details = outcome(run(_SquareWithRaisingDoubleBackward, "4,3:BC"), "gradgrad")
    assert status == "failed"
    assert "double backward" in message and "RuntimeError: double backward of square is not supported" in message
    assert details["phase"] == "double backward"


class _KinkNextToAnInput(nn.Module):
    """scale·relu(x − kink) + 0.1·x², with the kink a hair (1e-9) from the first input element:
    a difference step that moves that element crosses it in about half of all directions."""

    def __init__(self, kink: float) -> None:
        super().__init__()
        self.kink = kink
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * torch.relu(x - self.kink) + 0.1 * x * x


def test_a_step_across_a_kink_is_not_reported() -> None:
    layout = "6,4:BC"
    crossed = 0
    for seed in range(3):
        first = float(Target(nn.Identity, [Layout.parse(layout)], seed=seed).base_inputs()[0].reshape(-1)[0])
        # float32 rounding (1e-7) puts the element on either side of a kink 1e-9 away, which only the
        # float32 gradient check can see; its tolerance is opened so that gradgrad and forward_ad run.
        report = run(_KinkNextToAnInput, layout, seed=seed, kwargs={"kink": first + 1e-9},
                     tolerance={"float32": 1.0})
        for check in HIGHER:
            status, message, details = outcome(report, check)
            assert status == "passed", (seed, check, message)
            crossed += sum(d["kink_crossed"] for d in details["directions"])
    assert crossed >= 2  # the kink was really crossed, and the one-sided difference was used


@pytest.mark.parametrize("name", ["good_higher_kinks", "good_higher_srelu", "good_higher_function"])
def test_correct_layers_pass_on_other_seeds(name: str) -> None:
    for seed in (1, 2, 3):
        report = run_zoo(name, only=HIGHER, seed=seed)
        for check in HIGHER:
            status, message, _ = outcome(report, check)
            assert status == "passed", (seed, check, message)


def test_results_are_deterministic_for_a_seed_and_honour_their_own_float64_tolerance() -> None:
    first = outcome(run_zoo("good_higher_mlp", only=HIGHER, seed=4), "gradgrad")[2]["directions"]
    again = outcome(run_zoo("good_higher_mlp", only=HIGHER, seed=4), "gradgrad")[2]["directions"]
    assert first == again
    broken = load_zoo("gradgrad_detached_parameter")
    target = Target(broken.LAYER, [Layout.parse(text) for text in broken.LAYOUTS])
    loose = run_target(target, select(only=HIGHER), options=Options(tolerance={"gradgrad.float64": 10.0}))
    status, message, details = outcome(loose, "gradgrad")
    assert status == "passed" and details["tolerance"] == 10.0, message
    # the gradient check's own float64 tolerance does not reach gradgrad
    strict = run_target(target, select(only=HIGHER), options=Options(tolerance={"float64": 10.0}))
    assert outcome(strict, "gradgrad")[0] == "failed"


def test_double_backward_of_a_known_layer() -> None:
    """y = a·x² elementwise: F = <g, u> with g_x = 2·a·w·x and g_a = Σ w·x², so
    dF/dx = 2·a·w·u_x + 2·w·x·u_a, dF/da = Σ 2·w·x·u_x and dF/dw = 2·a·x·u_x + x²·u_a."""

    class Square(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Parameter(torch.tensor(0.7, dtype=torch.float64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a * x * x

    target = Target(Square, [Layout.parse("3,4:BC")])
    subject = target.build(torch.float64)
    fn = LayerFunction(subject, subject.inputs())
    x, a = fn.point
    w = torch.randn(3, 4, dtype=torch.float64)
    u_x, u_a = torch.randn(3, 4, dtype=torch.float64), torch.randn((), dtype=torch.float64)
    d_x, d_a, d_w = GradientFunction(fn, [w], [u_x, u_a]).gradient()
    torch.testing.assert_close(d_x, 2 * a * w * u_x + 2 * w * x * u_a)
    torch.testing.assert_close(d_a, (2 * w * x * u_x).sum())
    torch.testing.assert_close(d_w, 2 * a * x * u_x + x * x * u_a)


def test_command_line_enables_the_checks_and_reports_them(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    layer = str(ROOT / "tests/zoo/forward_ad_jvp_ignores_parameter.py") + ":Affine"
    result = runner.invoke(app, ["run", layer, "--layout", "5,4:BC", "--enable", "gradgrad", "--enable",
                                 "forward_ad", "--format", "json", "--output", str(out)])
    assert result.exit_code == 1, result.output
    entries = {r["check"]: r for r in json.loads(out.read_text())["runs"][0]["results"]}
    assert entries["gradgrad"]["status"] == "passed"
    assert entries["forward_ad"]["status"] == "failed"
    assert "wrong jvp of parameter 'scale'" in entries["forward_ad"]["message"]
    assert entries["forward_ad"]["details"]["directions"][0]["jvp"] != entries["forward_ad"]["details"][
        "directions"][0]["reverse"]


def test_a_spec_enables_them_and_a_correct_layer_exits_zero(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "mlp.yaml", str(ROOT / "tests/zoo/good_higher_mlp.py") + ":TinyMLP", "6,5:BC",
                      checks={"enable": list(HIGHER)})
    result = runner.invoke(app, ["run", str(spec), "--check", "gradgrad", "--check", "forward_ad", "--format", "json"])
    assert result.exit_code == 0, result.output
    statuses = {r["check"]: r["status"] for r in json.loads(result.output)["runs"][0]["results"]}
    assert statuses["gradgrad"] == statuses["forward_ad"] == "passed"


def test_once_differentiable_is_recognised_under_another_decorator() -> None:
    """A torch (or a library) that wraps the marked backward once more still has it named
    (torch 2.11 gave the generic message); a plain backward is not marked."""
    import functools

    from layercheck.checks.higher_order import _marked_once_differentiable

    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        return grad

    def outer(fn):  # type: ignore[no-untyped-def]
        @functools.wraps(fn)
        def wrapped(*args):  # type: ignore[no-untyped-def]
            return fn(*args)
        return wrapped

    marked = torch.autograd.function.once_differentiable(backward)
    assert _marked_once_differentiable(marked) and _marked_once_differentiable(outer(marked))
    assert not _marked_once_differentiable(backward) and not _marked_once_differentiable(outer(backward))

"""``layercheck init NAME``: the template and its spec pass every default check as written,
and the template is right on its own terms (its hand-written backward, its state)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.engine.runner import Options, run_target
from layercheck.parent.layout import Layout
from layercheck.parent.registry import select
from layercheck.parent.spec import load_spec
from layercheck.target.loading import resolve
from layercheck.target.subject import Target

from conftest import failed_checks

cli = CliRunner()


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("init")
    result = cli.invoke(app, ["init", str(folder / "my_layer")])
    assert result.exit_code == 0, result.output
    return folder / "my_layer.py", folder / "my_layer.yaml"


@pytest.fixture(scope="module")
def layer_class(written: tuple[Path, Path]) -> type:
    return resolve(f"{written[0]}:MyLayer")


def test_init_writes_the_layer_and_its_spec(written: tuple[Path, Path]) -> None:
    layer_file, spec_file = written
    spec = load_spec(spec_file)
    assert spec.layer == "my_layer.py:MyLayer" and [str(x) for x in spec.layouts] == ["4,3,8,8:BCSS"]
    text = layer_file.read_text()
    for part in ("def initialize", "def forward", "def predict", "def reset_state", "def backward",
                 "register_buffer", "nn.Parameter", "needs_input_grad", "OPTIONAL", "REQUIRED", "MATLAB"):
        assert part in text, part


def test_layercheck_run_passes_on_the_written_spec(written: tuple[Path, Path]) -> None:
    result = cli.invoke(app, ["run", str(written[1]), "--format", "json"])
    data = json.loads(result.stdout)
    problems = [(r["check"], r["variant"], r["message"]) for r in data["runs"][0]["results"]
                if r["status"] in ("failed", "error")]
    assert result.exit_code == 0 and not problems, problems
    assert data["runs"][0]["custom_backward"] is True
    assert data["summary"]["passed"] >= 5


@pytest.mark.parametrize(
    ("layouts", "kwargs"),
    [
        (["5,4,3,2:SSCB"], {}),  # MATLAB's order: the channels are found by their label
        (["6,5:BU"], {}),  # no C: one slope shared by every element
        (["2,3,7:BCT"], {"num_channels": 3}),  # built up front; initialize keeps it
    ],
)
def test_the_template_passes_the_whole_default_suite(layer_class: type, layouts: list[str], kwargs: dict) -> None:
    target = Target(layer_class, [Layout.parse(x) for x in layouts], kwargs=kwargs, name="my_layer")
    report = run_target(target, select(), options=Options())
    assert report.error is None, report.error
    problems = [f"{r.check}[{r.variant}] {r.status.value}: {r.message}" for r in report.results
                if r.check in failed_checks(report)]
    assert not problems, "\n".join(problems)


def hand_written(layer_class: type) -> type:
    return sys.modules[layer_class.__module__]._MyLayerFunction


def build(layer_class: type, layout: str = "3,4,5:BCS", dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    layer = layer_class()
    layer.initialize(Layout.parse(layout))
    with torch.no_grad():
        layer.beta.copy_(torch.linspace(-1.5, 2.0, layer.beta.numel()))  # distinct slopes, negative too
    return layer.to(dtype)


def test_the_hand_written_backward_agrees_with_autograd(layer_class: type) -> None:
    layer = build(layer_class)
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(3, 4, 5, dtype=torch.float64)
    grad_x, grad_beta = torch.autograd.grad(layer(x), (x, layer.beta), upstream)
    beta = layer.beta.detach().clone().requires_grad_(True)
    reference = x * torch.sigmoid(beta.view(1, -1, 1) * x)  # the formula, differentiated by autograd
    want_x, want_beta = torch.autograd.grad(reference, (x, beta), upstream)
    torch.testing.assert_close(grad_x, want_x, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_beta, want_beta, rtol=1e-12, atol=1e-12)
    # And against finite differences, as torch itself would check it.
    function = hand_written(layer_class)
    assert torch.autograd.gradcheck(lambda x, b: function.apply(x, b.view(1, -1, 1)), (x, beta))


def test_backward_computes_only_what_needs_input_grad_asks_for(layer_class: type) -> None:
    function = hand_written(layer_class)
    x, beta = torch.randn(3, 4, 5, dtype=torch.float64), torch.rand(1, 4, 1, dtype=torch.float64)
    grad = torch.ones(3, 4, 5, dtype=torch.float64)
    for needs in ((True, False), (False, True), (False, False)):
        ctx = SimpleNamespace(saved_tensors=(x, beta), needs_input_grad=needs)
        grads = function.backward(ctx, grad)
        assert [g is not None for g in grads] == list(needs)
    layer = build(layer_class)
    layer.beta.requires_grad_(False)  # a frozen parameter
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    layer(x).sum().backward()
    assert layer.beta.grad is None and x.grad is not None


def test_state_changes_in_training_only_and_reset_state_restores_it(layer_class: type) -> None:
    layer = build(layer_class, dtype=torch.float64)
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    initial = layer.running_mean.clone()
    layer.eval()
    layer(x), layer.predict(x)
    assert torch.equal(layer.running_mean, initial)
    layer.train()
    first = layer(x).detach()
    layer(x * 3)
    assert not torch.equal(layer.running_mean, initial)
    assert layer.running_mean.dtype == torch.float64 and torch.isfinite(layer.running_mean).all()
    layer.reset_state()
    assert torch.equal(layer.running_mean, initial)
    torch.testing.assert_close(layer(x).detach(), first, rtol=0, atol=0)


def test_dtype_meta_device_and_state_dict(layer_class: type) -> None:
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        layer = build(layer_class, dtype=dtype)
        x = torch.randn(3, 4, 5, dtype=dtype, requires_grad=True)
        y = layer(x)
        y.sum().backward()
        assert y.dtype == x.grad.dtype == layer.beta.grad.dtype == layer.running_mean.dtype == dtype
    meta = build(layer_class).to("meta")
    assert meta(torch.empty(3, 4, 5, device="meta", dtype=torch.float64)).device.type == "meta"
    source = build(layer_class)
    copy = layer_class()
    copy.initialize(Layout.parse("3,4,5:BCS"))
    copy.to(torch.float64).load_state_dict(source.state_dict())
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    torch.testing.assert_close(copy.predict(x), source.predict(x), rtol=0, atol=0)


def test_init_never_overwrites(tmp_path: Path) -> None:
    spec = tmp_path / "mine.yaml"
    spec.write_text("precious\n")
    result = cli.invoke(app, ["init", str(tmp_path / "mine")])
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line == f"layercheck: error: {spec} already exists; layercheck init never overwrites (choose another NAME)"
    assert spec.read_text() == "precious\n" and not (tmp_path / "mine.py").exists()


@pytest.mark.parametrize("name", ["my-layer", "class", "torch", "json", "2d"])
def test_init_refuses_names_that_cannot_be_imported(tmp_path: Path, name: str) -> None:
    result = cli.invoke(app, ["init", str(tmp_path / name)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_init_takes_a_class_name_and_a_layout(tmp_path: Path) -> None:
    result = cli.invoke(app, ["init", str(tmp_path / "act"), "--class-name", "SlopedSwish", "--layout", "6,5,4,2:SSCB"])
    assert result.exit_code == 0, result.output
    spec = load_spec(tmp_path / "act.yaml")
    assert spec.layer == "act.py:SlopedSwish" and str(spec.layouts[0]) == "6,5,4,2:SSCB"
    result = cli.invoke(app, ["run", str(tmp_path / "act.yaml"), "--check", "forward_predict_agree"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--layout", "4,3:BCC"], "2 sizes but 3 labels"),
        (["--class-name", "Tensor"], "--class-name 'Tensor': not usable as the class name"),
    ],
)
def test_init_refuses_a_bad_layout_or_class_name(tmp_path: Path, options: list[str], message: str) -> None:
    result = cli.invoke(app, ["init", str(tmp_path / "act"), *options])
    assert result.exit_code == 2 and message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_init_op_writes_a_custom_operator_that_passes_and_whose_wrong_backward_is_caught(tmp_path: Path) -> None:
    result = cli.invoke(app, ["init", str(tmp_path / "my_op"), "--op", "--layout", "2,3,4:BCS"])
    assert result.exit_code == 0, result.output
    spec = tmp_path / "my_op.yaml"
    run = cli.invoke(app, ["run", str(spec), "--format", "json"])
    assert run.exit_code == 0, run.output
    checks = {r["check"]: r["status"] for r in json.loads(run.stdout)["runs"][0]["results"]}
    assert checks["op_fake"] == checks["op_schema"] == checks["op_autograd_registration"] == "passed"
    assert checks["op_aot_dispatch"] == "passed" and checks["gradients"] == "passed"
    broken_folder = tmp_path / "broken"  # another file: this process imported the first one already
    broken_folder.mkdir()
    source = (tmp_path / "my_op.py").read_text()
    wrong = source.replace("grad * (1 - t * t) * scale", "2 * grad * (1 - t * t) * scale")
    (broken_folder / "my_op.py").write_text(wrong)
    (broken_folder / "my_op.yaml").write_text(spec.read_text())
    broken = cli.invoke(app, ["run", str(broken_folder / "my_op.yaml"), "--check", "gradients", "--format", "json"])
    assert broken.exit_code == 1
    results = {(r["check"], r["variant"]): r for r in json.loads(broken.stdout)["runs"][0]["results"]}
    # the registered backward named first, with its file and line
    assert re.match(r"in _backward \(\S*broken/my_op\.py:\d+\): wrong gradient of input 0",
                    results["gradients", "float64"]["message"]), results["gradients", "float64"]["message"]
    assert results["gradients", "float32"]["status"] == "skipped"  # the same cause, reported once

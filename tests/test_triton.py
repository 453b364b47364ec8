"""Triton layers checked on a CPU-only machine under Triton's interpreter (--interpret, spec key
interpret: true; on by itself where Triton is installed and no GPU is present), and the
interpreter's gaps layercheck closes (layercheck/target/triton_interpret.py, Note [triton interpreter]).

The layers are tests/gpu/: a leaky ReLU, an RMS norm (a float eps, libdevice.rsqrt, a weight
gradient accumulated across programs) and a gated MLP (autotuned over two configs, a backward
that recomputes the forward), each beside a buggy twin that `gradients` must catch. They run
here on CPU tensors; tests/test_on_device.py runs them on CUDA where there is a GPU."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.engine import runner as layercheck_runner

from conftest import ROOT, run_zoo

triton = pytest.importorskip("triton")
from layercheck.parent import limits  # noqa: E402  (it imports Triton)
from layercheck.target import prepare, triton_interpret  # noqa: E402

runner = CliRunner()
pytest_plugins = ["pytester"]
GPU = ROOT / "tests" / "gpu"
NO_GPU = not triton_interpret.gpu_present()
no_gpu = pytest.mark.skipif(not NO_GPU, reason="the interpreter is switched on by itself only where there is no GPU")


def run_json(*args: str) -> tuple[int, dict[str, Any], str]:
    """``layercheck run ARGS --format json``: exit code, the one run's report, and stderr."""
    done = runner.invoke(app, ["run", *args, "--format", "json"])
    assert done.exit_code in (0, 1), done.output
    report = json.loads(done.stdout)
    (run,) = report["runs"]
    return done.exit_code, run, done.stderr


def by_check(run: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["check"], r["variant"]): r for r in run["results"]}


def not_passing(run: dict[str, Any]) -> set[tuple[str, str]]:
    return {(r["check"], r["variant"]) for r in run["results"] if r["status"] in ("failed", "error")}


# -- the leaky ReLU pair: the everyday tier -------------------------------------------------------


def test_the_triton_leaky_layer_runs_under_the_interpreter_and_passes_the_default_suite() -> None:
    code, run, _ = run_json(str(GPU / "triton_leaky.py"), "--layout", "8,6,16:BCT", *(["--interpret"] * (not NO_GPU)))
    assert code == 0 and not not_passing(run), not_passing(run)
    assert by_check(run)[("gradients", "float64")]["status"] == "passed"
    if NO_GPU:  # switched on by itself, with one line saying so (on the worker's stderr: a process of its own,
        # whose stderr is the command's, not this test's captured one)
        done = subprocess.run([sys.executable, "-m", "layercheck", "run", str(GPU / "triton_leaky.py"), "--layout",
                               "8,6,16:BCT", "--check", "signatures", "--quiet"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("Triton kernels (_leaky_forward, _leaky_backward) and no GPU here: they run under "
                                 "Triton's interpreter") == 1, done.stderr


def test_the_buggy_leaky_twin_fails_gradients_on_the_negative_elements_only() -> None:
    code, run, _ = run_json(str(GPU / "triton_leaky_bug.py"), "--layout", "8,6,16:BCT", "--interpret")
    assert code == 1 and not_passing(run) == {("gradients", "float64")}
    details = by_check(run)[("gradients", "float64")]["details"]
    (wrong,) = details["wrong"]
    assert wrong["tensor"] == "input 0" and details["agree"] == ["parameter 'slope'"]
    # the backward scales the negative side's gradient by 1.5: every element named is off by
    # exactly that, and the elements on the positive side (a third of them here) are not named
    ratios = [e["analytic"] / e["numeric"] for e in wrong["elements"]]
    assert ratios and all(ratio == pytest.approx(1.5, rel=1e-4) for ratio in ratios)
    # the part is named: the negative side (the elements differenced are drawn from it)
    message = by_check(run)[("gradients", "float64")]["message"]
    assert "the gradient is 1.5 × what finite differences give on the" in message
    assert "of its elements where the value is negative, and agrees on the others" in message


# -- the interpreter's gaps, each on a kernel of its own -----------------------------------------

_GAP_LAYERS = {
    "float_eps": """
        @triton.jit
        def _kernel(x_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            inside = offsets < n
            x = tl.load(x_ptr + offsets, mask=inside)
            tl.store(y_ptr + offsets, x / (tl.abs(x) + eps.to(tl.float32)), mask=inside)

        def launch(x, y):
            _kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), 0.5, BLOCK=64)
        """,
    "libdevice_rsqrt": """
        from triton.language.extra import libdevice
        from triton.language.extra.libdevice import tanh

        @triton.jit
        def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            inside = offsets < n
            x = tl.load(x_ptr + offsets, mask=inside, other=0.0)
            tl.store(y_ptr + offsets, x * libdevice.rsqrt(x * x + 1.0) + tanh(x), mask=inside)

        def launch(x, y):
            _kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        """,
    "autotuned": """
        @triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
        @triton.jit
        def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            inside = offsets < n
            x = tl.load(x_ptr + offsets, mask=inside)
            tl.store(y_ptr + offsets, x * tl.sigmoid(x), mask=inside)

        def launch(x, y):
            _kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
        """,
}
_REFERENCES = {
    "float_eps": lambda x: x / (x.abs() + torch.tensor(0.5, dtype=torch.float32).to(x.dtype)),
    "libdevice_rsqrt": lambda x: x * torch.rsqrt(x * x + 1) + torch.tanh(x),
    "autotuned": lambda x: x * torch.sigmoid(x),
}


def _gap_layer(folder: Path, name: str) -> Path:
    """A layer whose forward is the kernel; its backward is torch's gradient of the reference
    (the kernel's value is what these tests are about)."""
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent("""
        import torch
        import triton
        import triton.language as tl
        """) + textwrap.dedent(_GAP_LAYERS[name]) + textwrap.dedent("""

        class Layer(torch.nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                launch(x.detach().contiguous(), y)
                return y
        """))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_GAP_LAYERS))
def test_a_kernel_that_needs_a_closed_gap_runs_under_interpret(tmp_path: Path, name: str) -> None:
    code, run, _ = run_json(str(_gap_layer(tmp_path, name)), "--layout", "6,20:BC", "--interpret",
                            "--check", "forward_runs", "--check", "forward_predict_agree", "--check", "deterministic")
    assert code == 0 and not not_passing(run), [r["message"] for r in run["results"]]


@pytest.mark.parametrize("name", sorted(_GAP_LAYERS))
def test_the_closed_gaps_compute_what_compiled_triton_computes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                name: str) -> None:
    """In this process: the kernel's values against torch (eps typed fp32 as compiled Triton
    types a float argument; libdevice's NumPy bodies; the first autotune config)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # put back after the test
    assert prepare.prepare_interpreter(True) is triton_interpret
    from layercheck.target.loading import resolve

    layer = resolve(f"{_gap_layer(tmp_path, name)}:Layer")()
    for dtype in (torch.float32, torch.float64):
        x = torch.linspace(-3, 3, 70, dtype=dtype).reshape(7, 10)
        tight = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
        torch.testing.assert_close(layer(x), _REFERENCES[name](x), **tight)


def test_every_gap_is_closed_or_absent_on_this_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    gaps = triton_interpret.close_gaps()
    assert set(gaps) == {"decorated before the switch", "float arguments", "libdevice", "autotune"}
    assert all(state in ("closed", "absent") for state in gaps.values()), gaps


@pytest.mark.slow
def test_a_libdevice_function_without_a_numpy_body_is_an_environment_limit(tmp_path: Path) -> None:
    path = tmp_path / "bessel.py"
    path.write_text(textwrap.dedent("""
        import torch
        import triton
        import triton.language as tl
        from triton.language.extra import libdevice

        @triton.jit
        def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.arange(0, BLOCK)
            inside = offsets < n
            tl.store(y_ptr + offsets, libdevice.j0(tl.load(x_ptr + offsets, mask=inside)), mask=inside)

        class Bessel(torch.nn.Module):
            def forward(self, x):
                y = torch.empty_like(x)
                _kernel[(1,)](x.contiguous(), y, x.numel(), BLOCK=64)
                return y
        """))
    code, run, _ = run_json(str(path), "--layout", "4,3:BC", "--interpret", "--check", "forward_runs")
    result = by_check(run)[("forward_runs", "")]
    assert code == 1 and result["status"] == "error"
    assert result["message"].startswith("needs a GPU driver: an environment limit, not the layer's fault")
    assert "libdevice.j0" in result["message"]


@pytest.mark.slow
@no_gpu
def test_a_layer_that_asks_triton_for_its_gpu_gets_an_environment_limit_not_a_failure(tmp_path: Path) -> None:
    path = tmp_path / "asks_driver.py"
    path.write_text(textwrap.dedent("""
        import torch
        import triton

        class AsksDriver(torch.nn.Module):
            def forward(self, x):
                # as kernels that size their grid by the GPU's multiprocessors do
                triton.runtime.driver.active.get_current_device()
                return x * 2
        """))
    code, run, _ = run_json(str(path), "--layout", "4,3:BC", "--interpret", "--check", "forward_runs")
    result = by_check(run)[("forward_runs", "")]
    assert code == 1 and result["status"] == "error"
    assert result["message"].startswith("needs a GPU driver: an environment limit, not the layer's fault "
                                        "(RuntimeError: 0 active drivers")


@pytest.mark.slow
def test_an_interpreted_layer_that_runs_past_its_limit_is_told_about_the_interpreter(tmp_path: Path) -> None:
    path = tmp_path / "spins.py"
    path.write_text(textwrap.dedent("""
        import torch
        import triton
        import triton.language as tl

        @triton.jit
        def _spin(y_ptr, n):
            total = 0.0
            for _ in range(n):
                total += 1.0
            tl.store(y_ptr, total)

        class Spins(torch.nn.Module):
            def forward(self, x):
                y = torch.zeros(1)
                _spin[(1,)](y, 10**12)
                return x * y
        """))
    code, run, _ = run_json(str(path), "--layout", "4,3:BC", "--interpret", "--check", "forward_runs", "--timeout", "1")
    result = by_check(run)[("forward_runs", "")]
    assert code == 1 and result["status"] == "error"
    assert result["message"].startswith("timed out after 1 s in forward_runs")
    assert "Its Triton kernels run under Triton's interpreter" in result["message"]


@no_gpu
def test_a_triton_layer_that_refuses_cpu_tensors_is_told_about_interpret_and_on_cuda() -> None:
    import layercheck

    class CudaOnly(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("this is a Triton kernel: it runs on CUDA tensors only")

    report = layercheck.check_layer(CudaOnly, "4,3:BC", checks=["forward_runs"])
    (result,) = [r for r in report.results if r.check == "forward_runs"]
    assert result.status.value == "failed"
    assert result.message.endswith("Fix: check it there with --on cuda (a spec's on: cuda), or, where its Triton "
                                   "kernels take CPU tensors, under Triton's interpreter with --interpret (more: "
                                   "layercheck checks forward_runs).")


# -- the option and the spec key ------------------------------------------------------------------


@pytest.mark.slow
def test_interpret_in_a_spec_is_validated_and_honoured(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    layer = str(GPU / "triton_leaky.py")
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"layer: {layer}\ninputs:\n  - layout: 8,6,16:BCT\ninterpret: yes please\n")
    done = runner.invoke(app, ["run", str(bad)])
    assert done.exit_code == 2
    assert done.stderr.strip() == (f"layercheck: error: {bad}: interpret: expected true or false (Triton's "
                                   "interpreter), got a string ('yes please')")
    good = tmp_path / "good.yaml"
    good.write_text(f"layer: {layer}\ninputs:\n  - layout: 8,6,16:BCT\ninterpret: true\n")
    code, run, _ = run_json(str(good), "--check", "forward_runs")
    assert code == 0 and by_check(run)[("forward_runs", "")]["status"] == "passed"
    assert "no GPU here" not in capfd.readouterr().err  # asked for: nothing to announce


@pytest.mark.slow
def test_interpret_is_in_the_reproduce_command(tmp_path: Path) -> None:
    code, run, _ = run_json(str(GPU / "triton_leaky_bug.py"), "--layout", "8,6,16:BCT", "--interpret",
                            "--check", "gradients")
    assert code == 1
    assert by_check(run)[("gradients", "float64")]["details"]["reproduce"].endswith("--seed 0 --interpret")


def test_interpret_without_triton_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "triton" else found(name, *args))
    done = runner.invoke(app, ["run", str(GPU / "triton_leaky.py"), "--layout", "8,6,16:BCT", "--interpret"])
    assert done.exit_code == 2
    assert done.stderr.strip() == ("layercheck: error: --interpret: Triton's interpreter needs Triton, which is not "
                                   "installed (pip install triton)")


# -- the norm and the gated MLP, with their twins -------------------------------------------------


@pytest.mark.slow
def test_the_triton_rms_norm_passes_and_its_twin_fails_the_weight_gradient() -> None:
    code, run, _ = run_json(str(GPU / "triton_rmsnorm.py"), "--layout", "4,8,32:BTC", "--interpret")
    assert code == 0 and not not_passing(run), not_passing(run)
    code, run, _ = run_json(str(GPU / "triton_rmsnorm_bug.py"), "--layout", "4,8,32:BTC", "--interpret")
    assert code == 1 and not_passing(run) == {("gradients", "float64")}
    details = by_check(run)[("gradients", "float64")]["details"]
    assert [w["tensor"] for w in details["wrong"]] == ["parameter 'weight'"] and details["agree"] == ["input 0"]


@pytest.mark.slow
def test_the_triton_gated_mlp_passes_and_its_twin_fails_the_gate_path() -> None:
    code, run, _ = run_json(str(GPU / "triton_gated_mlp.py"), "--layout", "4,8,16:BTC", "--interpret")
    assert code == 0 and not not_passing(run), not_passing(run)
    code, run, _ = run_json(str(GPU / "triton_gated_mlp_bug.py"), "--layout", "4,8,16:BTC", "--interpret")
    assert code == 1 and not_passing(run) == {("gradients", "float64")}
    details = by_check(run)[("gradients", "float64")]["details"]
    assert [w["tensor"] for w in details["wrong"]] == ["input 0", "parameter 'gate'"]
    assert details["agree"] == ["parameter 'up'", "parameter 'down'"]


# -- the diagnosis inside the time limit ----------------------------------------------------------


def test_a_diagnosis_out_of_time_names_the_wrong_tensor_and_says_it_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    from layercheck.numerics import locate

    def float64_result() -> Any:
        report = run_zoo("gradients_region_bug", only=("gradients",))
        (result,) = [r for r in report.results if r.check == "gradients" and r.variant == "float64"]
        assert result.status.value == "failed" and "wrong gradient of input 0" in result.message
        return result

    full = float64_result()
    assert "narrowed down no further" not in full.message and full.details["wrong"][0]["regions"]
    # a check that has spent its time (as a slow interpreted layer does) stops narrowing at once
    monkeypatch.setattr(locate, "AFTER_DIAGNOSIS", 1e9)
    cut = float64_result()
    assert "narrowed down no further: the diagnosis had spent its share of the check's time limit" in cut.message
    wrong = cut.details["wrong"][0]
    assert wrong["tensor"] == "input 0" and wrong["cut_short"] and not wrong["regions"] and not wrong["elements"]


def test_the_check_clock_is_the_running_checks_own() -> None:
    assert limits.check_clock() is None
    with limits.deadline(100.0):
        spent, left = limits.check_clock() or (None, None)
        assert spent is not None and left is not None and 0 <= spent < 1 and 99 < left <= 100
        with limits.deadline(None):
            assert limits.check_clock() is None
    assert limits.check_clock() is None


# -- the sizes interpreted kernels are checked at (Note [interpreted sizes]) ----------------------


def _sizes(*layouts: str, **limits_: int) -> list[str]:
    from layercheck.parent.inputs import parse_input

    return [str(spec.layout) for spec in triton_interpret.interpreted_sizes([parse_input(t) for t in layouts],
                                                                           **limits_)]


def test_interpreted_sizes_cut_batch_time_and_space_and_keep_the_features() -> None:
    (cut,) = _sizes("24,24,20,128:SSCB")
    sizes = [int(s) for s in cut.partition(":")[0].split(",")]
    assert sizes[2] == 20 and all(s >= 2 for s in sizes)  # C kept, every cut dimension at least 2
    assert math.prod(sizes) <= triton_interpret.ELEMENTS
    (cut,) = _sizes("24,24,20,128:SSBC")
    rows = math.prod(int(s) for s in cut.partition(":")[0].split(",")[:3])
    assert cut.endswith(",128:SSBC") and triton_interpret.ROWS <= rows < 24 * 24 * 20  # several programs of rows kept
    assert _sizes("128,512,1024:BTC") == ["8,4,1024:BTC"]  # wide features: the rows stop at ROWS
    # small layouts (the tests'), unspecified dimensions and a batch of one stay as given
    for given in ("8,6,16:BCT", "4,8,32:BTC", "4,8,16:BTC", "4096,4096:UU"):
        assert _sizes(given) == [given]
    assert _sizes("1,4096,64:BTC") == ["1,64,64:BTC"]
    # one label, one size in every input: a mask beside its sequence still fits it
    assert _sizes("64,100,64:BTC", "64,100:BT dtype=bool") == ["8,6,64:BTC", "8,6:BT"]


def test_a_wrong_gradient_is_caught_at_the_reduced_sizes_of_a_training_layout() -> None:
    code, run, _ = run_json(str(GPU / "triton_leaky.py"), "--layout", "24,24,20,128:SSCB", "--interpret")
    assert code == 0 and not not_passing(run), not_passing(run)
    interpreter = run["interpreter"]
    assert run["inputs"] == [{"size": [24, 24, 20, 128], "format": "SSCB"}]  # as given; as checked: interpreter
    assert interpreter["sizes"] == "reduced" and interpreter["kernels"] == ["_leaky_forward", "_leaky_backward"]
    (checked,) = interpreter["inputs"]
    assert checked["format"] == "SSCB" and checked["size"][2] == 20 and math.prod(checked["size"]) <= 4096
    shown = ",".join(map(str, checked["size"])) + ":SSCB"
    # one line on stderr says so (the worker's: a process of its own, whose stderr is the command's)
    done = subprocess.run([sys.executable, "-m", "layercheck", "run", str(GPU / "triton_leaky.py"), "--layout",
                           "24,24,20,128:SSCB", "--interpret", "--check", "signatures", "--quiet"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"checked at {shown}, reduced from 24,24,20,128:SSCB" in done.stderr
    assert "--interpret-sizes full checks the sizes given" in done.stderr
    # the buggy twin still fails gradients, on the wrong elements only, at the same sizes
    code, run, _ = run_json(str(GPU / "triton_leaky_bug.py"), "--layout", "24,24,20,128:SSCB", "--interpret")
    assert code == 1 and not_passing(run) == {("gradients", "float64")}
    assert run["interpreter"]["inputs"] == [checked]
    details = by_check(run)[("gradients", "float64")]["details"]
    (wrong,) = details["wrong"]
    assert all(e["analytic"] / e["numeric"] == pytest.approx(1.5, rel=1e-4) for e in wrong["elements"])
    # the console's summary line of the target says the kernels were interpreted, at which sizes
    done = runner.invoke(app, ["run", str(GPU / "triton_leaky_bug.py"), "--layout", "24,24,20,128:SSCB",
                               "--interpret", "--check", "forward_runs"], env={"COLUMNS": "200"})
    assert f"[Triton interpreter, kernels not compiled at {shown} (reduced)]" in done.stdout, done.stdout


def test_interpret_sizes_full_checks_the_layouts_given_and_is_in_the_reproduce_command(tmp_path: Path) -> None:
    _, run, _ = run_json(str(GPU / "triton_leaky_bug.py"), "--layout", "24,24,20,128:SSCB", "--interpret",
                         "--interpret-sizes", "full", "--check", "forward_runs")
    assert run["interpreter"]["sizes"] == "given" and "--interpret-sizes full" in run["interpreter"]["why"]
    assert run["interpreter"]["inputs"] == run["inputs"] == [{"size": [24, 24, 20, 128], "format": "SSCB"}]
    done = runner.invoke(app, ["run", str(GPU / "triton_leaky.py"), "--layout", "8,6,16:BCT", "--interpret-sizes",
                               "half"])
    assert done.exit_code == 2
    assert done.stderr.strip() == "layercheck: error: --interpret-sizes 'half': expected one of reduced, full"
    spec = tmp_path / "leaky.yaml"
    spec.write_text(f"layer: {GPU / 'triton_leaky.py'}\ninputs:\n  - layout: 8,6,16:BCT\n"
                    "interpret_sizes: half\n")
    done = runner.invoke(app, ["run", str(spec)])
    assert done.exit_code == 2 and "interpret_sizes: 'half' is not one of reduced, full" in done.stderr
    # asked for where the layer's import defines no kernel: recorded, and nothing reduced
    _, run, _ = run_json(str(ROOT / "specs" / "prelu.yaml"), "--interpret", "--check", "forward_runs")
    assert run["interpreter"]["sizes"] == "given" and "no Triton kernel" in run["interpreter"]["why"]
    from layercheck.parent.invocation import Invocation

    words = Invocation("x.py", layouts=(), interpret=True, interpret_sizes="full").command_words("gradients")
    assert words is not None and words[-3:] == ["--interpret", "--interpret-sizes", "full"]


@pytest.mark.slow
def test_a_layer_whose_sizes_follow_its_constructor_is_checked_at_the_sizes_given(tmp_path: Path) -> None:
    layer = tmp_path / "positional.py"
    layer.write_text(textwrap.dedent("""
        import torch
        import triton
        import triton.language as tl
        from torch import nn


        @triton.jit
        def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            inside = offsets < n
            tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=inside), mask=inside)


        class Twice(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x = x.contiguous()
                y = torch.empty_like(x)
                _scale[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
                return y

            @staticmethod
            def backward(ctx, dy):
                return 2.0 * dy


        class Positional(nn.Module):  # a table of T rows: the layer takes T = length only
            def __init__(self, length=64, channels=32):
                super().__init__()
                self.table = nn.Parameter(0.1 * torch.randn(length, channels))

            def forward(self, x):
                return Twice.apply(x + self.table)
        """))
    code, run, _ = run_json(f"{layer}:Positional", "--layout", "4,64,32:BTC", "--interpret", "--check",
                            "backward_runs")
    assert code == 0 and not not_passing(run), not_passing(run)
    interpreter = run["interpreter"]
    assert interpreter["sizes"] == "given" and interpreter["inputs"] == run["inputs"]
    assert interpreter["why"].startswith("at ") and "it raised RuntimeError" in interpreter["why"]


def test_check_layer_interprets_kernels_at_reduced_sizes_and_puts_the_environment_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from layercheck import check_layer

    sys.path.insert(0, str(GPU))
    try:
        from _twin import with_bug
    finally:
        sys.path.remove(str(GPU))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    correct = with_bug("triton_leaky.py", INTERPRETED=True)  # imported as a user's test imports it: compiled
    buggy = with_bug("triton_leaky.py", INTERPRETED=True, BUG=1.5)
    asked = {} if NO_GPU else {"interpret": True}
    report = check_layer(correct.TritonLeaky, "24,24,20,128:SSCB", checks=["gradients:float64"], **asked)
    assert report.passed, report.failures()
    (run,) = report.runs
    assert run.interpreter is not None and run.interpreter["sizes"] == "reduced"
    assert run.to_dict()["interpreter"] == run.interpreter and run.inputs[0]["size"] == [24, 24, 20, 128]
    assert "TRITON_INTERPRET" not in os.environ  # put back: the user's process runs its kernels as before
    report = check_layer(buggy.TritonLeaky, "8,6,16:BCT", checks=["gradients:float64"], interpret=True,
                         interpret_sizes="full")
    (failed,) = report.failures()
    assert failed[1].check == "gradients" and report.runs[0].interpreter["sizes"] == "given"  # type: ignore[index]
    assert failed[1].details["reproduce"].endswith(" --interpret --interpret-sizes full")
    from layercheck.parent.invocation import Invocation

    python = Invocation(None, interpret=True, interpret_sizes="full").reproduce("gradients")
    assert python.startswith("layercheck.check_layer(layer, ") and "interpret=True, interpret_sizes='full'" in python
    report = check_layer(correct.TritonLeaky, "8,6,16:BCT", checks=["forward_runs"], interpret=False)
    assert report.runs[0].interpreter is None  # compiled, as asked (on a CPU: an environment limit, not a failure)
    with pytest.raises(ValueError, match="interpret_sizes='half': expected one of reduced, full"):
        check_layer(correct.TritonLeaky, "8,6,16:BCT", interpret_sizes="half")


@pytest.mark.slow
def test_the_pytest_plugin_honours_a_specs_interpret_key(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    here = str(Path(layercheck_runner.__file__).resolve().parent.parent)  # the layercheck under test
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pytester.makefile(".yaml", layercheck_leaky=f"layer: {GPU / 'triton_leaky_bug.py'}\ninputs:\n"
                                                "  - layout: 24,24,20,128:SSCB\ninterpret: true\n")
    result = pytester.runpytest_subprocess("-k", "gradients and float64", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, deselected=result.parseoutcomes()["deselected"])
    result.stdout.fnmatch_lines(["*wrong gradient of input 0*"])

"""layercheck scan and check_model: every custom layer of a model checked at the inputs one sample
forward gives it (issue 49). The model is tests/scan_models/tiny_lm.py, written as a user would,
with one bug planted in one layer by build(bug=...)."""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import layercheck
from layercheck.cli.commands import app
from layercheck.reporting.json import load
from layercheck.scan.capture import ForwardRaised, capture
from layercheck.scan.choose import chosen, kinds
from tests.scan_models import tiny_lm

MODELS = Path(__file__).resolve().parent / "scan_models"
TINY = f"{MODELS / 'tiny_lm.py'}:build"
INPUTS = ("--input", "2,6:BT dtype=int64 values=0:50", "--input", "2,6:BT dtype=bool values=0.8")
FAST = ("--check", "gradients", "--check", "observations")  # the checks the planted bugs meet; the rest: slow test

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def sample() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, 50, (2, 6), generator=gen), torch.rand(2, 6, generator=gen) < 0.8


def rows(report: layercheck.Report) -> dict[str, dict]:
    assert report.scan is not None
    return {row["path"]: row for row in report.scan}


# -- capture -------------------------------------------------------------------------------------

def test_capture_leaves_the_model_exactly_as_it_was() -> None:
    model = tiny_lm.build()
    model.train()
    model.blocks[1].eval()  # mixed modes must come back as they were
    seen = []
    handle = model.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    params = [(n, p.requires_grad) for n, p in model.named_parameters()]
    modes = [m.training for m in model.modules()]
    hooks = [(len(m._forward_pre_hooks), len(m._forward_hooks)) for m in model.modules()]
    apply = torch.autograd.Function.__dict__["apply"]

    calls = capture(model, sample(), {})

    assert [c.path for c in calls][:3] == ["", "embed", "blocks.0"]
    assert {c.path for c in calls if c.function is tiny_lm.SiLUFn} == {"blocks.0.mlp/SiLUFn", "blocks.1.mlp/SiLUFn"}
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert [(n, p.requires_grad) for n, p in model.named_parameters()] == params
    assert all(p.grad is None for p in model.parameters())
    assert [m.training for m in model.modules()] == modes
    assert [(len(m._forward_pre_hooks), len(m._forward_hooks)) for m in model.modules()] == hooks
    assert torch.autograd.Function.__dict__["apply"] is apply
    model(*sample())
    assert seen == [1, 1]  # the user's own hook still runs, once per forward (once in the capture too)
    handle.remove()


class Explodes(nn.Module):
    def forward(self, x):
        raise ValueError("shape mismatch in my layer")


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4), Explodes())

    def forward(self, x):
        return self.inner(x)


def build_exploding() -> nn.Module:
    return Holder()


class Crashes(nn.Module):
    def forward(self, x):
        ctypes.string_at(0)  # native code that reads address 0: a segmentation fault
        return x


class Hangs(nn.Module):
    def forward(self, x):
        time.sleep(600)
        return x


def build_crashing() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), Crashes())


def build_hanging() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), Hangs())


def test_a_forward_that_raises_names_the_module_path_and_removes_the_hooks() -> None:
    model = Holder()
    with pytest.raises(ForwardRaised, match=r"raised in inner\.1 \(Explodes\): ValueError: shape mismatch") as info:
        capture(model, (torch.randn(2, 4),), {})
    assert "in forward" in info.value.trace and "raise ValueError" in info.value.trace
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())
    assert model.training


def test_cli_forward_that_raises_is_exit_1_naming_the_path() -> None:
    result = invoke("scan", f"{Path(__file__)}:build_exploding", "--input", "2,4:BC")
    assert result.exit_code == 1
    assert "raised in inner.1 (Explodes): ValueError: shape mismatch in my layer" in result.output
    assert "Traceback" in result.output


@pytest.mark.parametrize("model, says", [
    ("build_crashing", "was killed by signal SIGSEGV (a segmentation fault"),
    ("build_hanging", "timed out after 1 s while building the model and running its sample forward"),
])
def test_a_forward_that_crashes_or_hangs_is_exit_1_not_a_crash_of_the_command(model: str, says: str) -> None:
    # Note [a scan surveys its model in the worker that checks it]: before, the command died with
    # the segfault, without a word, and hung with the forward
    result = invoke("scan", f"{Path(__file__)}:{model}", "--input", "2,4:BC", "--timeout", "1")
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"layercheck: error: {Path(__file__)}:{model}: "), result.output
    assert says in last, result.output


def test_the_command_imports_no_torch_and_no_model_in_its_own_process(tmp_path: Path) -> None:
    probe = ("import sys\nfrom layercheck.cli.commands import app\n"
             "try:\n    app(sys.argv[1:], prog_name='layercheck')\n"
             "except SystemExit as exc:\n    print('exit', exc.code)\n"
             "print('imported:', 'torch' in sys.modules, any('tiny_lm' in name for name in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe, "scan", TINY, *INPUTS, "--check", "signatures", "--no-store",
                           "--write-specs", str(tmp_path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.splitlines()[-2:] == ["exit 0", "imported: False False"], done.stdout + done.stderr
    assert len(list(tmp_path.glob("*.yaml"))) == 7  # the survey wrote the specs, in the worker


def test_no_isolate_surveys_and_checks_in_the_command_process() -> None:
    result = invoke("scan", TINY, *INPUTS, "--check", "signatures", "--no-isolate")
    assert result.exit_code == 0, result.output
    assert "model scan: 7 kinds of layer (16 calls): 7 passed" in result.output


@pytest.mark.parametrize("args, message", [
    (("--input", "2,6:BT dtype=int64 values=0:50"), "does not take 1 positional input"),
    ((*INPUTS, "--input", "2,6:BT"), "does not take 3 positional inputs"),
    (("--input", "2,6:BQ", "--input", "2,6:BT dtype=bool"), "--input"),
    ((), "give the model's sample inputs"),
])
def test_bad_sample_inputs_are_exit_2_with_one_line(args: tuple[str, ...], message: str) -> None:
    result = invoke("scan", TINY, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


# -- which layers, once per kind -------------------------------------------------------------------

def test_layers_defined_outside_torch_once_per_kind_blocks_after_their_layers() -> None:
    model = tiny_lm.build()
    found = kinds(chosen(capture(model, sample(), {})))
    by_path = {k.path: k for k in found}
    assert set(by_path) == {"", "blocks.0", "blocks.0.attn", "blocks.0.attn.rotary", "blocks.0.mlp",
                            "blocks.0.mlp/SiLUFn", "blocks.0.norm1"}
    assert by_path["blocks.0.norm1"].paths == ["blocks.0.norm1", "blocks.0.norm2", "blocks.1.norm1",
                                               "blocks.1.norm2", "norm"]
    order = [k.path for k in found]
    position = order.index
    assert position("blocks.0.attn.rotary") < position("blocks.0.attn") < position("blocks.0") < position("")
    # a block whose layer inside is configured otherwise is a kind of its own
    planted = {k.path for k in kinds(chosen(capture(tiny_lm.build(bug="grad"), sample(), {})))}
    assert {"blocks.0", "blocks.1", "blocks.0.mlp", "blocks.1.mlp"} <= planted


def test_include_and_exclude_by_class_and_path() -> None:
    calls = capture(tiny_lm.build(), sample(), {})
    with_torch = {c.path for c in chosen(calls, include=["torch.nn"])}
    assert {"embed", "head", "blocks.0.attn.qkv"} <= with_torch
    without = {c.path for c in chosen(calls, exclude=["RMSNorm", "blocks.*.attn*"])}
    assert not any("norm" in p or "attn" in p for p in without) and "blocks.0.mlp" in without


class Stateful:
    """An object with state of its own: what a layer's call cannot be replayed with."""


class TakesAnObject(nn.Module):
    def forward(self, x, cache):
        return x * 2


class UsesIt(nn.Module):
    def __init__(self):
        super().__init__()
        self.odd = TakesAnObject()

    def forward(self, x):
        return self.odd(x, Stateful()) + x


def test_a_layer_called_with_an_object_is_skipped_with_the_reason_and_the_others_run() -> None:
    report = layercheck.check_model(UsesIt(), torch.randn(3, 4), checks=["gradients"])
    found = rows(report)
    assert found["odd"]["status"] == "skipped"
    assert "Stateful argument, which cannot be replayed" in found["odd"]["reason"]
    assert found[""]["status"] == "passed"


# -- layouts ----------------------------------------------------------------------------------------

def test_layouts_inferred_from_the_batch_and_the_time_of_the_model_input(tmp_path: Path) -> None:
    result = invoke("scan", TINY, *INPUTS, "--check", "signatures", "--write-specs", str(tmp_path),
                    "--format", "json")
    assert result.exit_code == 0, result.output
    found = {row["path"]: row for row in json.loads(result.stdout)["scan"]}
    assert found["blocks.0.attn.rotary"]["layouts"] == ["2,2,6,8:BUTC", "2,2,6,8:BUTC", "2,6:BT"]
    assert found["blocks.0.norm1"]["layouts"] == ["2,6,16:BTC"]
    assert found["blocks.0.mlp/SiLUFn"]["layouts"] == ["2,6,32:BTC"]
    assert "blocks.0.attn.rotary (Rotary): 2,2,6,8:BUTC 2,2,6,8:BUTC 2,6:BT" in result.stderr


def test_inputs_file_layouts_follow_the_batch_and_the_time(tmp_path: Path) -> None:
    torch.save(sample(), tmp_path / "sample.pt")
    result = invoke("scan", TINY, "--inputs", str(tmp_path / "sample.pt"), "--check", "signatures",
                    "--format", "json")
    assert result.exit_code == 0, result.output
    found = {row["path"]: row for row in json.loads(result.stdout)["scan"]}
    assert found["blocks.0.attn.rotary"]["layouts"] == ["2,2,6,8:BUTC", "2,2,6,8:BUTC", "2,6:BT"]
    assert found["blocks.0.norm1"]["layouts"] == ["2,6,16:BTC"]
    assert found["blocks.0.mlp/SiLUFn"]["layouts"] == ["2,6,32:BTC"]
    assert "raised" not in result.stderr


def test_tensor_inputs_whose_second_dimension_is_a_width_label_no_time() -> None:
    model = Gated(False)
    report = layercheck.check_model(model, torch.randn(4, 8), torch.ones(4, 8), checks=["signatures"])
    assert report.passed
    assert rows(report)["gate"]["layouts"] == ["4,8:BC", "4,8:BC"]  # the forward at 9 wide raised: no T


# -- verdicts -------------------------------------------------------------------------------------

def test_cli_clean_model_passes_with_a_tree_and_a_json_scan_section(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = invoke("scan", TINY, *INPUTS, *FAST, "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "model scan: 7 kinds of layer (16 calls): 7 passed" in result.output
    assert "blocks.0.norm1 (RMSNorm) x5" in result.output
    report = load(out.read_text())
    found = rows(report)
    assert found["blocks.0.norm1"]["count"] == 5 and found["blocks.0.norm1"]["class"].endswith("tiny_lm.RMSNorm")
    assert all(row["status"] == "passed" for row in found.values())
    assert all(r.status.value == "passed" for r in report.results if r.check == "gradients")


@pytest.mark.parametrize("bug, path, check", [("batch", "blocks.1.norm1", "observations"),
                                              ("grad", "blocks.1.mlp/SiLUFn", "gradients[float64]")])
def test_cli_planted_bug_fails_naming_the_layer_path_and_the_check(tmp_path: Path, bug: str, path: str,
                                                                    check: str) -> None:
    result = invoke("scan", TINY, "--kwarg", f"bug={bug}", *INPUTS, *FAST, "--write-specs", str(tmp_path),
                    "--format", "json")
    assert result.exit_code == 1, result.output
    found = {row["path"]: row for row in json.loads(result.stdout)["scan"]}
    failed = {p for p, row in found.items() if row["status"] == "failed"}
    assert path in failed and check in found[path]["failed"]
    assert {p for p in failed if p != path} <= {"", "blocks.1", "blocks.1.mlp"}  # blocks around it, nothing else
    assert all(path in found[p]["inside"] for p in failed if p != path)  # a block says which layer inside fails
    # the spec written is the reproduce command: run alone it fails the same check
    spec = found[path]["spec"]
    alone = invoke("run", spec, "--check", check.partition("[")[0], "--format", "json")
    assert alone.exit_code == 1
    assert any(r.check == check.partition("[")[0] and r.status.value == "failed"
               for r in load(alone.stdout).results)


def test_api_check_model_and_assert_model_valid() -> None:
    model = tiny_lm.build(bug="batch")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(AssertionError, match=r"blocks\.1\.norm1 \(RMSNorm\): observations"):
        layercheck.assert_model_valid(model, *sample(), checks=["observations"])
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    report = layercheck.check_model(tiny_lm.build(), "2,6:BT dtype=int64 values=0:50", "2,6:BT dtype=bool values=0.8",
                                    checks=["observations"])
    assert report.passed and rows(report)["blocks.0.norm1"]["layouts"] == ["2,6,16:BTC"]


def test_model_spec_with_inputs_file_and_weights(tmp_path: Path) -> None:
    torch.save(dict(zip(("input_ids", "attention_mask"), sample())), tmp_path / "sample.pt")
    torch.save(tiny_lm.build(bug="batch").state_dict(), tmp_path / "weights.pt")
    (tmp_path / "model.yaml").write_text(f"model: {TINY}\nkwargs: {{bug: batch}}\ninputs_file: sample.pt\n"
                                         "weights: weights.pt\nexclude: [GatedMLP, SiLUFn]\n")
    result = invoke("scan", str(tmp_path / "model.yaml"), "--check", "observations", "--format", "json")
    assert result.exit_code == 1, result.output
    found = {row["path"]: row for row in json.loads(result.stdout)["scan"]}
    assert "blocks.0.mlp" not in found and found["blocks.1.norm1"]["status"] == "failed"
    assert found["blocks.0.norm1"]["layouts"] == ["2,6,16:BTC"]  # no layout given: batch and time inferred


@pytest.mark.slow
def test_clean_model_passes_every_default_check() -> None:
    result = invoke("scan", TINY, *INPUTS)
    assert result.exit_code == 0, result.output
    assert "7 passed" in result.output


def test_every_report_format_names_the_layers_by_their_path(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    outputs = [tmp_path / name for name in ("r.json", "r.xml", "r.md")]
    result = invoke("scan", TINY, "--kwarg", "bug=batch", *INPUTS, "--check", "observations",
                    *(arg for path in outputs for arg in ("--output", str(path))))
    assert result.exit_code == 1, result.output
    report = load(outputs[0].read_text())
    assert "blocks.1.norm1 (RMSNorm)" in [run.target for run in report.runs]
    suites = {s.get("name"): s for s in ET.fromstring(outputs[1].read_text()).findall("testsuite")}
    assert suites["blocks.1.norm1 (RMSNorm)"].get("failures") == "1"
    assert suites["blocks.0.norm1 (RMSNorm)"].get("failures") == "0"
    markdown = outputs[2].read_text()
    assert "**Model scan**: 9 kinds of layer (16 calls): 3 failed, 6 passed" in markdown
    assert "failed `blocks.1.norm1 (RMSNorm)  2,6,16:BTC  observations`" in markdown


# -- specs with captured inputs ------------------------------------------------------------------

def test_a_layer_spec_reads_its_inputs_from_inputs_file(tmp_path: Path) -> None:
    from layercheck.parent.errors import SpecError
    from layercheck.parent.spec import load_spec
    from layercheck.target.subject import Target

    positions = torch.tensor([[3, 1, 0]])
    torch.save([torch.tensor([[0.5, -2.0, 7.0]]), positions], tmp_path / "in.pt")
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text("layer: torch.nn:Identity\ninputs_file: in.pt\n"
                         "inputs: [{layout: '1,3:BC'}, {layout: '1,3:BT', dtype: int64}]\n")
    spec = load_spec(spec_file)
    target = Target(nn.Identity, spec.inputs)
    x, ids = target.inputs(torch.float32)
    assert x.dtype == torch.float32 and x.tolist() == [[0.5, -2.0, 7.0]] and torch.equal(ids, positions)
    spec_file.write_text("layer: torch.nn:Identity\ninputs_file: in.pt\n"
                         "inputs: [{layout: '1,3:BC', values: positive}]\n")
    with pytest.raises(SpecError, match="values: an input read from inputs_file: has the values saved there"):
        load_spec(spec_file)
    spec_file.write_text("layer: torch.nn:Identity\ninputs_file: nowhere.pt\ninputs: [{layout: '1,3:BC'}]\n")
    with pytest.raises(SpecError, match="inputs_file: no such file"):
        load_spec(spec_file)


def test_a_norm_over_the_batch_fails_even_where_the_captured_observations_have_one_statistic(tmp_path: Path) -> None:
    # the two captured observations have the same mean square, so a mean over a batch made of
    # them again ([a, b, b, a]) equals each one's: the observations beyond them must differ
    (tmp_path / "norm.py").write_text("import torch\n\nclass Norm(torch.nn.Module):\n"
                                      "    def forward(self, x):\n"
                                      "        return x * torch.rsqrt(x.pow(2).mean() + 1e-6)\n")
    a = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(0))
    torch.save([torch.cat([a, a.flip(-1)])], tmp_path / "in.pt")
    (tmp_path / "s.yaml").write_text("layer: norm.py:Norm\ninputs_file: in.pt\ninputs: [{layout: '2,6,16:BTC'}]\n")
    result = invoke("run", str(tmp_path / "s.yaml"), "--check", "observations", "--format", "json", "--no-store")
    assert result.exit_code == 1, result.output
    found = {r.check: r for r in load(result.stdout).runs[0].results}
    assert "depends on the other observations" in found["observations"].message


def test_a_saved_layer_that_is_not_one_is_an_error_run(tmp_path: Path) -> None:
    torch.save({"something": 1}, tmp_path / "odd.pt")
    (tmp_path / "s.yaml").write_text("layer: odd.pt\ninputs: [{layout: '2,3:BC'}]\n")
    result = invoke("run", str(tmp_path / "s.yaml"), "--format", "json")
    assert result.exit_code == 1
    assert "not a layer saved by layercheck scan" in load(result.stdout).runs[0].error


def test_html_report_holds_the_tree_linking_each_layer_to_its_run() -> None:
    from layercheck.parent.result import Report, RunReport
    from layercheck.reporting.html import render
    from layercheck.reporting.scan_tree import ScanEntry, arrange

    runs = [RunReport(target="/s/1_norm.yaml", kind="module", inputs=[], seed=0, seconds=0.1, results=[]),
            RunReport(target="/s/2_model.yaml", kind="module", inputs=[], seed=0, seconds=0.2, results=[])]
    entries = [ScanEntry("norm", "m.RMSNorm", ("norm",), ("2,4:BC",), spec="/s/1_norm.yaml"),
               ScanEntry("", "m.Net", ("",), ("2,4:BC",), spec="/s/2_model.yaml"),
               ScanEntry("odd", "m.Odd", ("odd",), (), skipped="called with a m.Cache argument")]
    report = arrange(Report(runs=runs, environment={}, version="0", seconds=0.3), entries)
    page = render(report)
    assert "Model scan" in page and '<a href="#run-1"><code>norm (RMSNorm)  2,4:BC</code></a>' in page
    assert "odd (Odd)  skipped: called with a m.Cache argument" in page
    assert [run.target for run in report.runs] == ["norm (RMSNorm)", "(model) (Net)"]


def test_html_tree_opens_the_branches_that_fail_and_folds_the_others() -> None:
    from layercheck.parent.result import CheckResult, Report, RunReport, Status
    from layercheck.reporting.html import render
    from layercheck.reporting.scan_tree import ScanEntry, arrange

    def run(spec: str, status: Status) -> RunReport:
        return RunReport(target=spec, kind="module", inputs=[], seed=0, seconds=0.1,
                         results=[CheckResult("gradients", "float64", status, 0.1)])

    specs = {"": "/s/5_model.yaml", "a": "/s/2_a.yaml", "a.norm": "/s/1_a_norm.yaml", "b": "/s/4_b.yaml",
             "b.norm": "/s/3_b_norm.yaml"}
    failing = {"", "b", "b.norm"}
    runs = [run(spec, Status.FAILED if path in failing else Status.PASSED) for path, spec in specs.items()]
    entries = [ScanEntry(path, f"m.{cls}", (path,), (), spec=specs[path])
               for path, cls in (("", "Net"), ("a", "Block"), ("a.norm", "Norm"), ("b", "Gate"),
                                 ("b.norm", "Other"))]
    page = render(arrange(Report(runs=runs, environment={}, version="0", seconds=0.5), entries))
    tree = page[page.index('<section class="scan">'):page.index("</section>")]
    folds = re.findall(r"<details( open)?[^>]*><summary>.*?<code>([^<]*)</code>", tree)
    assert [(bool(opened), text.split()[0]) for opened, text in folds] == [(True, "(model)"), (False, "a"),
                                                                             (True, "b")]
    assert tree.index("a.norm (Norm)") < tree.index("b (Gate)")  # the tree's order, the passed branch folded
    assert "<code>b.norm (Other)  gradients[float64]</code>" in tree  # a leaf: a line of its own


# -- the draw into the tails on captured inputs ----------------------------------------------------

class ClampedSigmoidFn(torch.autograd.Function):
    """A sigmoid whose backward is computed from its output clamped to [0.01, 0.99]: right within
    about ±4.6, wrong beyond (Note [tails])."""

    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        y = y.clamp(0.01, 0.99)
        return grad * y * (1 - y)


class Gate(nn.Module):
    def __init__(self, wrong: bool) -> None:
        super().__init__()
        self.wrong = wrong

    def forward(self, x, mask):
        gate = ClampedSigmoidFn.apply(x) if self.wrong else torch.sigmoid(x)
        return gate * mask


class Gated(nn.Module):
    def __init__(self, wrong: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.gate = Gate(wrong)

    def forward(self, x, mask):
        return self.gate(self.proj(x), mask)


@pytest.mark.parametrize("wrong", [False, True])
def test_captured_floating_inputs_are_drawn_into_the_tails(wrong: bool) -> None:
    torch.manual_seed(0)
    model = Gated(wrong)
    x = torch.randn(4, 8)
    mask = (torch.rand(4, 8) < 0.7).to(torch.float32)
    assert float(model.proj(x).detach().abs().max()) < 3  # the captured values lie where the wrong backward is right
    report = layercheck.check_model(model, x, mask, checks=["gradients"])
    found = rows(report)
    if not wrong:
        assert report.passed, found
        return
    assert found["gate"]["status"] == "failed" and "gradients[float64]" in found["gate"]["failed"]
    failure = next(r for r in report.results if r.check == "gradients" and r.status.value == "failed")
    assert "scaled by 4" in str(failure.message) + str(failure.details)

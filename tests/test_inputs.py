"""Inputs as real layers need them: integer, boolean and ranged tensors, constant inputs and
keyword inputs, from a spec and from the command line, validated before anything runs and
carried into reports and reproduce commands."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.parent.inputs import parse_input
from layercheck.parent.layout import Layout
from layercheck.parent.spec import parse_spec
from layercheck.target.loading import resolve
from layercheck.target.seeding import PARALLEL_DRAW, standard_normal
from layercheck.target.subject import Target

runner = CliRunner()


def _run(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["run", *args, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def test_the_readme_embedding_example_runs_from_the_command_line() -> None:
    code, report = _run("torch.nn:Embedding", "--arg", "1000", "--arg", "64", "--layout",
                        "8,32:BT dtype=int64 values=0:1000")
    assert code == 0, [r["message"] for r in report["runs"][0]["results"] if r["status"] == "failed"]
    assert report["runs"][0]["inputs"] == [{"size": [8, 32], "format": "BT", "dtype": "int64", "values": "0:1000"}]


def test_a_boolean_keyword_mask_and_a_plain_keyword_value_reach_the_call() -> None:
    code, report = _run("torch.nn:MultiheadAttention", "--arg", "8", "--arg", "2", "--kwarg", "batch_first=true",
                        "--layout", "3,4,8:BTC", "--layout", "3,4,8:BTC", "--layout", "3,4,8:BTC",
                        "--call-kwarg", "key_padding_mask=3,4:BT dtype=bool values=0.25",
                        "--call-kwarg", "need_weights=false", "--check", "observations")
    assert code == 0
    results = {r["check"]: r for r in report["runs"][0]["results"]}
    assert results["observations"]["status"] == "passed", results["observations"]["message"]
    assert report["runs"][0]["inputs"][-1]["name"] == "key_padding_mask"


def test_a_reproduce_command_carries_the_input_descriptions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "leaky.py").write_text((Path(__file__).parent / "zoo" / "observations_mask_leaks.py").read_text())
    monkeypatch.chdir(tmp_path)
    code, report = _run("leaky.py:MaskedPool", "--layout", "3,5,4:BTC",
                        "--call-kwarg", "mask=3,5:BT dtype=bool values=0.7")
    assert code == 1
    failed = next(r for r in report["runs"][0]["results"] if r["status"] == "failed")
    command = failed["details"]["reproduce"]
    assert "--call-kwarg 'mask=3,5:BT dtype=bool values=0.7'" in command
    words = shlex.split(command)
    again_code, again = _run(*words[2:])
    assert again_code == 1
    assert [r["message"] for r in again["runs"][0]["results"] if r["status"] == "failed"] == [failed["message"]]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"layout": "3,5:BT", "dtype": "int8"}, "inputs[0].dtype: unknown dtype 'int8'"),
        ({"layout": "3,5:BT", "dtype": "int64"}, "inputs[0].values: int64 inputs need a range of integers"),
        ({"layout": "3,5:BT", "dtype": "int64", "values": {"low": 0}}, "inputs[0].values.high: missing"),
        ({"layout": "3,5:BT", "dtype": "int64", "values": {"low": 0, "high": 10}, "requires_grad": True},
         "inputs[0].requires_grad: int64 inputs take no gradient"),
        ({"layout": "3,5:BT", "values": {"low": 2, "high": 1}}, "inputs[0].values: the range [2, 1) is empty"),
        ({"layout": "3,5:BT", "dtype": "bool", "values": {"p": 2}}, "inputs[0].values.p: 2 is not a probability"),
        ({"layout": "3,5:BT", "values": "sideways"}, "inputs[0].values: 'sideways': expected LOW:HIGH"),
        ({"layout": "3,5:BT", "grad": False}, "inputs[0].grad: unknown key"),
    ],
)
def test_invalid_input_entries_name_the_file_the_key_and_what_was_expected(tmp_path: Path, entry: dict,
                                                                          message: str) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump({"layer": "torch.nn:Tanh", "inputs": [entry]}))
    result = runner.invoke(app, ["run", str(spec)])
    assert result.exit_code == 2, result.output
    assert f"{spec}: {message}" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--layout", "3,5:BT dtype=int64"], "int64 inputs need a range of integers"),
        (["--layout", "3,5:BT colour=red"], "'colour=red' is not a qualifier"),
        (["--layout", "3,5:BT grad=maybe"], "grad=maybe: expected grad=no"),
        (["--layout", "3,5:BT", "--call-kwarg", "mask"], "--call-kwarg 'mask': expected NAME=VALUE"),
    ],
)
def test_invalid_input_descriptions_on_the_command_line_exit_2(argv: list[str], message: str) -> None:
    result = runner.invoke(app, ["run", "torch.nn:Tanh", *argv])
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_keyword_inputs_are_refused_for_an_autograd_function(tmp_path: Path) -> None:
    layer = Path(__file__).parent.parent / "layers" / "srelu_function.py"
    code, report = _run(str(layer), "--layout", "2,3:BC", "--layout", "1,3:UC", "--layout", "1,3:UC",
                        "--layout", "1,3:UC", "--layout", "1,3:UC", "--call-kwarg", "scale=2")
    assert code == 1
    assert "Fn.apply takes no keyword arguments" in report["runs"][0]["error"]


def test_a_spec_with_integer_boolean_positive_and_keyword_inputs_round_trips() -> None:
    spec = parse_spec({
        "layer": "x.py:L",
        "inputs": [{"layout": "8,32:BT", "dtype": "int64", "values": {"low": 0, "high": 1000}},
                   {"layout": "4,16:BC", "values": "positive"},
                   {"layout": "4,16:BC", "requires_grad": False}],
        "call_kwargs": {"mask": {"layout": "4,16:BC", "dtype": "bool", "values": {"p": 0.2}}, "dim": -1},
    })
    described = [s.describe() for s in spec.inputs]
    assert described == ["8,32:BT dtype=int64 values=0:1000", "4,16:BC values=positive", "4,16:BC grad=no",
                         "4,16:BC dtype=bool values=0.2"]
    assert [parse_input(text) for text in described[:3]] == list(spec.inputs[:3])
    assert spec.inputs[3].name == "mask" and spec.constants == {"dim": -1}


def test_large_standard_normal_inputs_are_drawn_in_parallel_with_the_same_values_on_any_machine() -> None:
    """A large draw is split into fixed parts, so its values depend on the seed and size only:
    the same with one thread as with several; small draws are torch.randn from the seed as before."""
    size = (PARALLEL_DRAW // 4 + 3, 4)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = standard_normal(size, 11)
        torch.set_num_threads(2)
        beside = standard_normal(size, 11)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(alone, beside) and not torch.equal(alone, standard_normal(size, 12))
    assert abs(float(alone.mean())) < 0.01 and abs(float(alone.std()) - 1) < 0.01
    small = standard_normal((5, 3), 11)
    assert torch.equal(small, torch.randn((5, 3), generator=torch.Generator().manual_seed(11), dtype=torch.float64))
    # no part repeats another input's draw: SReLUFunction's thresholds are inputs 1 and 3, drawn
    # from the seeds next to x's; an element of x equal to one sits on a kink
    root = Path(__file__).resolve().parent.parent
    layouts = [Layout.parse("24,24,20,128:SSCB"), *[Layout.parse("1,1,20,1:UUCU")] * 4]
    x, *thresholds = Target(resolve("layers/srelu_function.py", base_dir=root), layouts).base_inputs()
    assert not any(bool(torch.isin(t, x).any()) for t in thresholds)

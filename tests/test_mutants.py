"""The mutation benchmark (benchmarks/mutants.py) on one tiny Function written here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conftest import ROOT

SOURCE = '''import torch


class SquaredReLU(torch.autograd.Function):
    """y = w * relu(x) ** 2, with one weight per feature."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return w * torch.where(x > 0, x * x, 0.0)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        grad_x = grad * w * torch.where(x > 0, 2 * x, 0.0)
        grad_w = (grad * torch.where(x > 0, x * x, 0.0)).sum(0, keepdim=True)
        return grad_x, grad_w
'''
FORWARD = "        return w * torch.where(x > 0, x * x, 0.0)\n"


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmark_mutants", ROOT / "benchmarks" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_mutants_of_a_tiny_function(tmp_path: Path) -> None:
    bench = load_benchmark()
    path = tmp_path / "squared_relu.py"
    path.write_text(SOURCE)
    mutants = bench.mutants_of(SOURCE, path)

    assert {"sign", "scale", "dims", "compare", "swap_return", "drop_grad_output", "inplace"} <= {
        m.operator for m in mutants}
    assert all(FORWARD in m.source and m.source != SOURCE for m in mutants)  # backward only, one edit each
    assert len({m.source for m in mutants}) == len(mutants)

    original = bench.Original("squared_relu.py:SquaredReLU", (path,), "SquaredReLU", path, ("4,3:BC", "1,3:UC"))
    judge = bench.Bench(original, tmp_path / "work", seed=0)
    assert judge.fast == judge.slow == "passed"

    # relu(x)² has derivative 0 at 0 from either side: where x >= 0 takes the same values
    same = judge.judge(next(m for m in mutants if m.operator == "compare" and m.after == "x >= 0"))
    assert same.equivalent
    assert same.caught_by == () and same.fast == same.slow == "passed"  # no false alarm

    flipped = judge.judge(next(m for m in mutants if m.operator == "sign" and m.before == "grad_x"))
    assert not flipped.equivalent
    assert "gradients[float64]" in flipped.caught_by
    assert flipped.fast == flipped.slow == "failed"


CLASSMETHOD_SOURCE = '''import torch


class Scaled(torch.autograd.Function):
    @classmethod
    def forward(cls, ctx, x):
        return 3 * x

    @classmethod
    def backward(cls, ctx, grad):
        return 3 * grad
'''


def test_a_classmethod_backward_is_mutated_with_its_incoming_gradient_after_cls_and_ctx(tmp_path: Path) -> None:
    """entmax writes its Functions with classmethods: ``(cls, ctx, grad)``."""
    bench = load_benchmark()
    mutants = bench.mutants_of(CLASSMETHOD_SOURCE, tmp_path / "scaled.py")
    assert {m.operator for m in mutants} >= {"sign", "scale", "drop_grad_output"}
    dropped = [m.after for m in mutants if m.operator == "drop_grad_output"]
    assert "torch.ones_like(grad)" in dropped and not any("ctx" in a or "cls" in a for a in dropped)


def test_third_party_sources_are_found_without_importing_their_package() -> None:
    bench = load_benchmark()
    found = bench._source_of("email.mime.text")
    assert found is not None and found.name == "text.py" and found.is_file()
    assert bench._source_of("email.no_such_module") is None
    assert bench._source_of("no_such_package_here.module") is None


SLICED_SOURCE = '''import torch


class Cropped(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x[:, :2] * 3

    @staticmethod
    def backward(ctx, grad):
        full = torch.zeros(grad.shape[0], 4)
        full[:, :2] = 3 * grad
        return full.transpose(0, 1)[:, :2].t()
'''


def test_a_returned_slice_is_mutated_as_one_gradient_not_as_its_index(tmp_path: Path) -> None:
    """mambapy's scan returns ``Q.transpose(2, 1)[:, :L]``: the slice's tuple is no gradient."""
    bench = load_benchmark()
    mutants = bench.mutants_of(SLICED_SOURCE, tmp_path / "cropped.py")
    returned = [m for m in mutants if m.before.startswith("full.transpose")]
    assert {m.operator for m in returned} >= {"sign", "scale"}
    assert all("-(:" not in m.source and "0.5 * :" not in m.source for m in mutants)


BLOCK_SOURCE = '''import torch
from torch import nn


class Block(nn.Module):
    def backward_pass(self, y, dy):
        x = y - 1
        return x, 2 * dy

    def helper(self, y):
        return y * 3
'''


def test_a_reversible_block_s_backward_pass_is_mutated_and_no_other_method(tmp_path: Path) -> None:
    """revtorch and reformer-pytorch rebuild a block's input and gradient in an instance method
    backward_pass; its incoming gradient comes after self and the block's output."""
    bench = load_benchmark()
    mutants = bench.mutants_of(BLOCK_SOURCE, tmp_path / "block.py")
    assert mutants and all(m.line in (7, 8) for m in mutants), [(m.line, m.after) for m in mutants]
    assert "torch.ones_like(dy)" in [m.after for m in mutants if m.operator == "drop_grad_output"]


def test_mutants_of_the_named_classes_only(tmp_path: Path) -> None:
    # a module of many Functions (PyPose's forty Lie group operations): an original names the
    # ones its layer goes through, and only their backward passes are mutated
    bench = load_benchmark()
    other = SOURCE.replace("class SquaredReLU", "class Doubled").replace("2 * x, 0.0", "4 * x, 0.0")
    source = SOURCE + "\n\n" + other.split("import torch\n", 1)[1]
    path = tmp_path / "two.py"
    every = bench.mutants_of(source, path)
    named = bench.mutants_of(source, path, ["Doubled"])
    start = source.index("class Doubled")
    first_line = source[:start].count("\n") + 1
    assert named and len(named) < len(every)
    assert all(m.line > first_line for m in named)
    assert {m.source for m in named} <= {m.source for m in every}

"""A fuzzer over spec files: random YAML structures, valid specs with wrong types, unicode and
huge numbers put in, empty, binary and broken files, and directories, FIFOs and symlink loops
named like specs. Every case exits 2 with one line on stderr per problem, or runs (exit 0 or 1, a JSON
report on stdout); none ends in a traceback. The seed is fixed: a failure names its case,
which the same seed writes again."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from layercheck.cli.commands import app

SEED = 20240611
CASES = 300

TEXT = "abcxyzBCSTU019:,./_-  ßü中文🙂\t\u200b\\'\""
LAYOUTS = ["4,3:BC", "4,3,5:BCU", "0,3:BC", "-1,3:BC", "3:Z", "3,3:CC", "ü,ö:BC", "4,3", ":", "", "4,,3:BCU",
           "1000000,1000000:BC", f"{10**30},2:BC", "2.5,3:BC", "4,3:bc", "4 , 3 : BC", "1" * 400 + ":B"]
LAYERS = ["torch.nn:Tanh", "torch.nn:Linear", "torch.nn", "torch.nn:NoSuchLayer", "no_such_module_xyz:Layer",
          "missing.py:Layer", "missing.py", ":", "::", "a:b:c", "/", "", " ", "ü:ß", "torch.nn:Tanh:extra",
          "../../../../etc/passwd:Layer", "layer.py:Layer"]
CHECK_IDS = ["signatures", "gradients", "dtype:float16", "nope", "", "dtype:float99", "ünï"]
KEYS = ["layer", "args", "kwargs", "inputs", "checks", "seed", "tolerance", "layout", "skip", "enable", "size",
        "format", "float32", "gradients.float64", "ünïcode", ""]

LAYER_FILE = """
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        return x * 2
"""


def text(rng: random.Random) -> str:
    return "".join(rng.choice(TEXT) for _ in range(rng.randint(0, 12)))


def scalar(rng: random.Random) -> Any:
    return rng.choice([
        lambda: rng.randint(-10, 10), lambda: 10 ** rng.randint(10, 40), lambda: -(10**30), lambda: 2**63,
        lambda: rng.random() * 10 ** rng.randint(-300, 308), lambda: float("nan"), lambda: float("inf"),
        lambda: True, lambda: None, lambda: "", lambda: text(rng), lambda: rng.choice(LAYOUTS),
        lambda: rng.choice(LAYERS), lambda: rng.choice(CHECK_IDS),
    ])()


def value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 3 or roll < 0.5:
        return scalar(rng)
    if roll < 0.75:
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice([*KEYS, text(rng), rng.randint(-3, 3), None]): value(rng, depth + 1)
            for _ in range(rng.randint(0, 4))}


def valid_spec(rng: random.Random) -> dict[str, Any]:
    return {"layer": rng.choice(["torch.nn:Tanh", "layer.py:Layer"]),
            "inputs": [{"layout": rng.choice(["4,3:BC", "2,3,5:BCU"])}],
            "args": [], "kwargs": {}, "checks": {"skip": [], "enable": []}, "seed": rng.randint(0, 9), "tolerance": {}}


def mutated(rng: random.Random) -> dict[str, Any]:
    """A valid spec with one to three of its values replaced, removed, or keys added."""
    spec = valid_spec(rng)
    for _ in range(rng.randint(1, 3)):
        holder: Any = spec
        path = rng.choice([["layer"], ["args"], ["kwargs"], ["inputs"], ["inputs", 0], ["inputs", 0, "layout"],
                           ["checks"], ["checks", "skip"], ["checks", "enable"], ["seed"], ["tolerance"],
                           [rng.choice(KEYS)], ["inputs", 0, "layout", "size"]])
        try:
            for key in path[:-1]:
                holder = holder[key]
            action = rng.random()
            if action < 0.15 and isinstance(holder, dict):
                holder.pop(path[-1], None)
            elif action < 0.3 and path[-1] == "layout":
                holder[path[-1]] = {"size": value(rng, 2), "format": value(rng, 2)}
            elif action < 0.45 and path[-1] == "tolerance":
                holder[path[-1]] = {rng.choice(["float32", "gradients.float64", "nope.float32", "float8", 1]):
                                    scalar(rng)}
            else:
                holder[path[-1]] = value(rng, 1)
        except (KeyError, IndexError, TypeError):
            continue
    return spec


def extreme(rng: random.Random) -> dict[str, Any]:
    """A spec of the right types with values at their edges: huge seeds, big layouts, unicode
    and huge constructor arguments, tolerances near the ends of the floats."""
    spec = valid_spec(rng)
    spec["seed"] = rng.choice([0, 2**32 - 1, 2**32, 2**63, 10**30] if rng.random() < 0.3 else [0, 2**32 - 1])
    edges = ["1000,1000:BC", "1,1:BC", "1:B", "3:U", "2,1,1,1,1,1,1,1:BUUUUUUU"]
    spec["inputs"] = [{"layout": rng.choice([*edges, "5000,1000:BC", *LAYOUTS] if rng.random() < 0.3 else edges)}
                      for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.5:
        spec["layer"] = "torch.nn:Linear"
        spec["args"] = rng.choice([[1, 2], [10**30, 2], ["ü", 2], [1.5, 2], [-1, 2]])
        spec["kwargs"] = rng.choice([{}, {"bias": False}, {"ü": 1}, {"bias": "yes"}])
    spec["tolerance"] = rng.choice([{}, {"float32": 1e-300}, {"float64": 1e308}, {"gradients.float32": "1e-5"}])
    return spec


def raw_text(rng: random.Random) -> str:
    tokens = ["{", "}", "[", "]", ": ", "- ", "&a ", "*a ", "!!python/object:os.system ", "%YAML 1.2\n", "---\n",
              "...\n", "\t", "\n", "layer", "inputs", "'", '"', "#", "|", ">", "?", "!!binary ", "<<: ", "\ufeff"]
    return "".join(rng.choice([*tokens, text(rng)]) for _ in range(rng.randint(0, 30)))


def write_case(rng: random.Random, path: Path) -> str:
    """Write one random spec file; its kind, for the failure message."""
    kind = rng.choice(["structure", "mutated", "mutated", "extreme", "raw", "binary", "empty"])
    if kind in ("structure", "mutated", "extreme"):
        make = {"structure": value, "mutated": mutated, "extreme": extreme}[kind]
        path.write_text(yaml.safe_dump(make(rng), allow_unicode=True))
    elif kind == "raw":
        path.write_text(raw_text(rng), encoding="utf-8")
    elif kind == "binary":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))))
    else:
        path.write_text(rng.choice(["", " ", "\n\n", "---\n", "~\n", "null\n", "[]\n", "{}\n"]))
    return kind


def odd_paths(folder: Path) -> dict[str, Callable[[], Path]]:
    """Things named like specs that are not spec files."""

    def directory() -> Path:
        (folder / "dir.yaml").mkdir()
        return folder / "dir.yaml"

    def folder_with_a_directory_named_like_a_spec() -> Path:
        (folder / "outer" / "inner.yaml").mkdir(parents=True)
        (folder / "outer" / "inner.yaml" / "real.yaml").write_text(yaml.safe_dump(valid_spec(random.Random(0))))
        return folder / "outer"

    def symlink_loop() -> Path:
        os.symlink("loop.yaml", folder / "loop.yaml")
        return folder / "loop.yaml"

    def folder_with_a_symlink_loop() -> Path:
        (folder / "looped").mkdir()
        os.symlink(folder / "looped", folder / "looped" / "again")
        os.symlink("self.yaml", folder / "looped" / "self.yaml")
        return folder / "looped"

    def dangling_symlink() -> Path:
        os.symlink(folder / "nowhere.yaml", folder / "dangling.yaml")
        return folder / "dangling.yaml"

    def fifo() -> Path:
        os.mkfifo(folder / "fifo.yaml")  # reading it would wait for a writer forever
        return folder / "fifo.yaml"

    def folder_with_a_fifo() -> Path:
        (folder / "piped").mkdir()
        os.mkfifo(folder / "piped" / "fifo.yml")
        return folder / "piped"

    return {f.__name__: f for f in (directory, folder_with_a_directory_named_like_a_spec, symlink_loop,
                                    folder_with_a_symlink_loop, dangling_symlink, fifo, folder_with_a_fifo)}


def assert_exits_2_with_one_line_or_runs(path: Path, what: str) -> int:
    invoked = CliRunner().invoke(app, ["run", str(path), "--format", "json", "--no-isolate", "--check", "signatures",
                                       "--max-memory", "1GB", "--timeout", "20"])
    output = f"{what}: {path.read_bytes()[:300]!r}" if path.is_file() else what
    assert invoked.exception is None or isinstance(invoked.exception, SystemExit), (output, invoked.exception)
    assert "Traceback" not in invoked.stdout + invoked.stderr, output
    if invoked.exit_code == 2:
        assert invoked.stdout == "", output
        # one line per problem of the spec (every problem is said at once), each naming the file
        first, *more = invoked.stderr.strip().splitlines() or [""]
        assert first.startswith("layercheck: error: "), (output, invoked.stderr)
        assert all(line.startswith(f"{path}: ") for line in more), (output, invoked.stderr)
    else:
        assert invoked.exit_code in (0, 1), (output, invoked.exit_code, invoked.stderr)
        assert json.loads(invoked.stdout)["runs"], output
    return invoked.exit_code


# The everyday tier feeds the first 40 of the cases (a few seconds); the slow tier all of them.
@pytest.mark.parametrize("cases", [40, pytest.param(CASES, marks=pytest.mark.slow)])
def test_random_spec_files_exit_2_with_one_line_or_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       cases: int) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "layer.py").write_text(LAYER_FILE)
    rng = random.Random(SEED)
    kinds: dict[str, int] = {}
    exits: dict[int, int] = {}
    for case in range(cases):
        path = tmp_path / f"case{case}.yaml"
        kind = write_case(rng, path)
        kinds[kind] = kinds.get(kind, 0) + 1
        code = assert_exits_2_with_one_line_or_runs(path, f"case {case} ({kind}, seed {SEED})")
        exits[code] = exits.get(code, 0) + 1
        path.unlink()
    assert len(kinds) == 6  # every kind of case was tried
    assert exits.get(2, 0) > cases / 2 and exits.get(0, 0) + exits.get(1, 0) > cases / 20, exits  # and both ways out


@pytest.mark.parametrize("name", list(odd_paths(Path())))
def test_paths_named_like_specs_exit_2_with_one_line_or_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            name: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "layer.py").write_text(LAYER_FILE)
    assert_exits_2_with_one_line_or_runs(odd_paths(tmp_path)[name](), name)

"""What a user waits for before anything is checked, and what --jobs buys: every figure from
fresh ``layercheck`` processes, measured side by side in this run.

    python benchmarks/startup.py [--repeat 5] [--targets 10]

- ``--help``, ``layercheck checks`` and a usage error (a mistyped check id): none of them
  imports torch;
- the first progress line: from starting ``layercheck run SPEC`` to the first byte of its
  progress display (stderr on a pseudo-terminal, as in a shell);
- a folder of ``--targets`` small specs (the bundled layers and torch.nn built-ins) checked
  serially and with ``--jobs 2``, alternating, so that a machine busy with something else
  slows both alike.

Medians over ``--repeat`` rounds.
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, "-m", "layercheck"]

# Small targets, different enough that a folder of them is what a project's specs look like.
TARGETS = [
    ("prelu", f"{ROOT}/layers/prelu.py:PReLU", "4,4,3,2:SSCB", {"num_channels": 3, "channel_dim": 2}),
    ("srelu", f"{ROOT}/layers/srelu.py:SReLU", "4,4,3,2:SSCB", {"num_channels": 3, "channel_dim": 2}),
    ("tanh", "torch.nn:Tanh", "4,3:BC", {}),
    ("linear", "torch.nn:Linear", "4,3:BC", {"in_features": 3, "out_features": 2}),
    ("conv", "torch.nn:Conv2d", "2,3,6,6:BCSS", {"in_channels": 3, "out_channels": 4, "kernel_size": 3}),
    ("batchnorm", "torch.nn:BatchNorm2d", "4,3,5,5:BCSS", {"num_features": 3}),
    ("layernorm", "torch.nn:LayerNorm", "4,6:BC", {"normalized_shape": 6}),
    ("gelu", "torch.nn:GELU", "4,3:BC", {}),
    ("dropout", "torch.nn:Dropout", "4,3:BC", {"p": 0.3}),
    ("prelu_torch", "torch.nn:PReLU", "4,3,5:BCU", {"num_parameters": 3}),
    ("softplus", "torch.nn:Softplus", "4,3:BC", {}),
    ("embedding", "torch.nn:Embedding", "4,5:BT dtype=int64 values=0:10", {"num_embeddings": 10, "embedding_dim": 3}),
]


def timed(args: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def first_progress(args: list[str], cwd: Path) -> float:
    """Seconds from starting ``args`` to the first byte it writes to its terminal's stderr."""
    parent, child = pty.openpty()
    start = time.perf_counter()
    process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=child, stdin=subprocess.DEVNULL,
                               env={**os.environ, "COLUMNS": "100"})
    os.close(child)
    try:
        ready, _, _ = select.select([parent], [], [], 600)
        seen = time.perf_counter() - start if ready else float("nan")
    finally:
        process.kill()
        process.wait()
        os.close(parent)
    return seen


def write_specs(folder: Path, count: int) -> None:
    for name, layer, layout, kwargs in TARGETS[:count]:
        text, _, qualifiers = layout.partition(" ")
        entry: dict[str, object] = {"layout": text}
        for word in qualifiers.split():
            key, _, value = word.partition("=")
            low, _, high = value.partition(":")
            entry[key] = {"low": int(low), "high": int(high)} if key == "values" else value
        (folder / f"{name}.yaml").write_text(yaml.safe_dump({"layer": layer, "kwargs": kwargs, "inputs": [entry]}))


def median(fn: Callable[[], float], repeat: int) -> float:
    return statistics.median(fn() for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--targets", type=int, default=10)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="layercheck-startup-"))
    try:
        write_specs(folder, options.targets)
        one = str(sorted(folder.glob("*.yaml"))[0])
        rows = [
            ("layercheck --help", median(lambda: timed([*COMMAND, "--help"], folder), options.repeat)),
            ("layercheck checks", median(lambda: timed([*COMMAND, "checks"], folder), options.repeat)),
            ("a usage error (--check gradiens)",
             median(lambda: timed([*COMMAND, "run", one, "--check", "gradiens"], folder), options.repeat)),
            ("run: to the first progress line", median(lambda: first_progress([*COMMAND, "run", one], folder),
                                                       options.repeat)),
        ]
        serial: list[float] = []
        parallel: list[float] = []
        for _ in range(max(1, options.repeat // 2)):
            serial.append(timed([*COMMAND, "run", str(folder), "-q"], folder))
            parallel.append(timed([*COMMAND, "run", str(folder), "-q", "--jobs", "2"], folder))
        print(f"start-up (median of {options.repeat}, fresh processes, {os.cpu_count()} CPUs):")
        for what, seconds in rows:
            print(f"  {what:<36} {seconds:6.2f} s")
        count = len(list(folder.glob("*.yaml")))
        print(f"a folder of {count} small specs (median of {len(serial)}, alternating):")
        print(f"  serial                               {statistics.median(serial):6.2f} s")
        print(f"  --jobs 2                             {statistics.median(parallel):6.2f} s")
        print(f"  --jobs 2 / serial                    {statistics.median(parallel) / statistics.median(serial):6.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

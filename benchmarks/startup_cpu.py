"""CPU time of layercheck's start-up against ``python -c "import torch"``, side by side, and how
soon a run's first line shows.

    python benchmarks/startup_cpu.py [--repeat 5] [--tree OTHER_CHECKOUT]

Each command runs in a fresh process; its CPU time is the user+sys time of the whole process
tree (fork servers and workers included: this process is made their subreaper, so the ones
that outlive their parent are reaped and counted too). The commands run in turn, round after
round, so that a machine busy with something else slows all of them alike; the figures are
medians, and the ratios are to ``import torch``'s median. ``--tree`` runs the same commands
with another checkout first on PYTHONPATH as well (e.g. main's), for a before/after table.

The first line: wall seconds from starting ``layercheck run specs/srelu.yaml`` to its first line
naming the target ("specs/srelu.yaml" on stderr, a pseudo-terminal as in a shell).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pty
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COMMANDS = {
    "import torch": ["-c", "import torch"],
    "run layers/srelu.py 8,16:BC": ["-m", "layercheck", "run", "layers/srelu.py:SReLU", "--layout", "8,16:BC"],
    "run specs/srelu.yaml": ["-m", "layercheck", "run", "specs/srelu.yaml"],
    "usage error: missing file": ["-m", "layercheck", "run", "nosuchfile.py", "--layout", "8,16:BC"],
    "usage error: class typo": ["-m", "layercheck", "run", "layers/srelu.py:SReLu", "--layout", "8,16:BC"],
    "usage error: bad layout": ["-m", "layercheck", "run", "layers/srelu.py:SReLU", "--layout", "8,16:BQ"],
    "usage error: check id": ["-m", "layercheck", "run", "specs/srelu.yaml", "--check", "gradiens"],
    "checks": ["-m", "layercheck", "checks"],
    "checks gradients": ["-m", "layercheck", "checks", "gradients"],
}


def _subreaper() -> None:
    try:
        ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of our children come to us
    except (OSError, AttributeError):
        pass


def cpu(args: list[str], tree: Path) -> tuple[float, float]:
    """(CPU seconds of the whole process tree, wall seconds) of one run."""
    before = os.times()
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, *args], cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    wall = time.perf_counter() - start
    while True:  # reap what outlived it (a fork server) and count it
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    after = os.times()
    return after.children_user + after.children_system - before.children_user - before.children_system, wall


FIRST_LINE = (["-m", "layercheck", "run", "specs/srelu.yaml"], b"specs/srelu.yaml")


def first_line(tree: Path) -> float:
    """Wall seconds from starting the run to the first output that names its target."""
    args, needle = FIRST_LINE
    parent, child = pty.openpty()
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, *args], cwd=tree, stdout=subprocess.DEVNULL, stderr=child,
                               stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "100"})
    os.close(child)
    seen, shown = b"", float("nan")
    try:
        while needle not in seen:
            ready, _, _ = select.select([parent], [], [], 600)
            chunk = os.read(parent, 4096) if ready else b""
            if not chunk:
                break
            seen += chunk
        else:
            shown = time.perf_counter() - start
    except OSError:  # the terminal closed: the run ended without naming it
        pass
    finally:
        process.kill()
        process.wait()
        os.close(parent)
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tree", type=Path, action="append", default=[])
    options = parser.parse_args()
    _subreaper()
    trees = [ROOT, *options.tree]
    times: dict[tuple[Path, str], list[tuple[float, float]]] = {}
    for _ in range(options.repeat):
        for tree in trees:
            for name, args in COMMANDS.items():
                times.setdefault((tree, name), []).append(cpu(args, tree))
            times.setdefault((tree, "first line"), []).append((float("nan"), first_line(tree)))
    print(f"CPU time (user+sys of the process tree), median of {options.repeat}, {os.cpu_count()} CPUs; "
          "ratio to import torch")
    for tree in trees:
        base = statistics.median(c for c, _ in times[(tree, "import torch")])
        print(f"{tree}:")
        for name in COMMANDS:
            c = statistics.median(c for c, _ in times[(tree, name)])
            w = statistics.median(w for _, w in times[(tree, name)])
            print(f"  {name:<30} {c:6.2f} s CPU  {c / base:5.2f}x   ({w:5.2f} s wall)")
        shown = statistics.median(w for _, w in times[(tree, "first line")])
        print(f"  {'first line of run specs/srelu.yaml':<30} {shown:6.2f} s wall after the command started")


if __name__ == "__main__":
    main()

"""What isolation costs: the default suite on small targets checked in worker processes (the
default) and in this process (``--no-isolate``), both measured in this run.

    python benchmarks/isolation.py [--targets 8] [--repeat 3]

- cold: one ``python -m layercheck run SPEC`` each way, a fresh interpreter every time (an
  isolated run also starts the fork server, which imports torch once more);
- warm: one run of one target from a process whose fork server is running already (what a
  test suite calling the command line in-process pays), each way;
- per target: the time a run of N targets takes beyond a run of one, divided by N - 1, each
  way (workers are reused from target to target);
- crash: a run whose first check kills its worker, against the same run whose layer raises
  instead (a fresh worker takes over).

Medians over ``--repeat`` rounds; the modes alternate within a round, so that a machine
busy with something else slows both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from layercheck.engine import runner  # noqa: E402
from layercheck.parent import isolation  # noqa: E402
from layercheck.parent.spec import TargetSpec, load_spec  # noqa: E402

CRASHES = """
import os
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            os._exit(3)
        return x
"""

RAISES = CRASHES.replace("os._exit(3)", "raise ValueError('no predict')")


def spec_file(folder: Path, name: str, layer: str, layout: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"layer": layer, "inputs": [{"layout": layout}]}))
    return path


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def cli(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "layercheck", "run", *args, "--quiet"], check=False, env=env,
                   capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="layercheck-bench-"))
    prelu = spec_file(folder, "prelu", f"{ROOT / 'layers' / 'prelu.py'}:PReLU", "4,3,5:BCU")
    (folder / "crashes.py").write_text(CRASHES)
    (folder / "raises.py").write_text(RAISES)
    crashes, raises = (load_spec(spec_file(folder, name, f"{name}.py:Layer", "4,3:BC")) for name in ("crashes",
                                                                                                    "raises"))
    one = [load_spec(prelu)]
    many = one * args.targets
    options = runner.Options()
    isolated: Callable[[list[TargetSpec]], object] = lambda specs: isolation.run(  # noqa: E731
        [runner.TargetPlan.of(spec, options) for spec in specs], options)
    in_process: Callable[[list[TargetSpec]], object] = lambda specs: runner.run(  # noqa: E731
        [runner.TargetPlan.of(spec, options) for spec in specs], options)
    in_process(one)
    isolated(one)  # the fork server starts, and this process pays its one-time costs
    rows: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for mode, fn in (("isolated", isolated), ("in-process", in_process)):
            flag = () if mode == "isolated" else ("--no-isolate",)
            rows.setdefault(f"cold {mode}", []).append(timed(lambda: cli(str(prelu), *flag)))  # noqa: B023
            rows.setdefault(f"warm {mode}", []).append(timed(lambda: fn(one)))  # noqa: B023
            n = timed(lambda: fn(many))  # noqa: B023
            rows.setdefault(f"per target {mode}", []).append((n - rows[f"warm {mode}"][-1]) / (args.targets - 1))
        rows.setdefault("crash: a fresh worker", []).append(timed(lambda: isolated([crashes])))
        rows.setdefault("crash: the layer raises instead", []).append(timed(lambda: isolated([raises])))
    print(f"PReLU 4,3,5:BCU, default suite, {args.targets} targets per run, median of {args.repeat}:")
    for name, times in rows.items():
        print(f"  {name:34s} {statistics.median(times):7.3f} s")
    for what in ("cold", "warm", "per target"):
        extra = statistics.median(rows[f"{what} isolated"]) - statistics.median(rows[f"{what} in-process"])
        print(f"  isolation costs ({what}):{'':12s}{extra:+7.3f} s")


if __name__ == "__main__":
    main()

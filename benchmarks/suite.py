"""Cost of the whole default suite on the bundled SReLU, as a multiple of one float64
forward+backward of the layer, both measured in this run (the issue's target: at most 25x).

    python benchmarks/suite.py [--layout 24,24,20,128:SSCB] [--repeat 5] [--threads N] [--cpu-time] [--count]

Prints each check's median time and ratio, and the median ratio of the whole suite; with
``--count``, also the forwards of the layer each check makes (in a warm run): at the full size
in float32 and in float64 (a finite difference's evaluation is one), on fewer observations (the
runner's sample of the batch, a batch of one), and on ``meta``. The
first run of a process also pays one-time costs that are not the suite's (the first
allocations; before the runner borrowed lazytorch's short ways, torch imported ``torch._dynamo``
the first time an operation ran on the meta device, about a second); the cold run is printed
separately and the ratio is taken over the warm runs. ``benchmarks/goals.py`` prints every cost
goal beside its figure. On a machine shared
with other work, ``--cpu-time --threads 1`` times everything in this process's CPU time, which
the others' load hardly moves.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from layercheck.engine import runner  # noqa: E402
from layercheck.engine.runner import run_target  # noqa: E402
from layercheck.parent.layout import Layout  # noqa: E402
from layercheck.parent.registry import select  # noqa: E402
from layercheck.parent.result import RunReport  # noqa: E402
from layercheck.target.loading import resolve  # noqa: E402
from layercheck.target.subject import Target  # noqa: E402


def forward_backward_seconds(cls: type, layout: Layout, *, repeat: int) -> float:
    """Median time of one float64 forward+backward (input and parameters) of the layer."""
    target = Target(cls, [layout])
    subject = target.build(dtype=torch.float64)
    times = []
    for _ in range(repeat + 1):  # the first one warms up the allocator and kernels
        inputs = subject.inputs(requires_grad=True)
        start = time.perf_counter()
        out = subject.forward(inputs)
        torch.autograd.grad(out, [*inputs, *(p for _, p in subject.parameters())], torch.ones_like(out))
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def suite(cls: type, layout: Layout) -> RunReport:
    return run_target(Target(cls, [layout], name="layers/srelu.py:SReLU"), select())


@contextlib.contextmanager
def counting_forwards(cls: type, layout: Layout) -> Iterator[dict[tuple[str, str], collections.Counter[str]]]:
    """The layer's forwards per check and variant while the block runs, by kind: "float32" and
    "float64" at the full size, "fewer" observations, "meta"."""
    counts: dict[tuple[str, str], collections.Counter[str]] = collections.defaultdict(collections.Counter)
    current = [("(runner)", "")]
    full = layout.numel
    original_forward, original_run_check = cls.forward, runner.run_check

    def forward(self: Any, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        kind = ("meta" if x.device.type == "meta" else str(x.dtype).removeprefix("torch.") if x.numel() == full
                else "fewer")
        counts[current[-1]][kind] += 1
        return original_forward(self, x, *args, **kwargs)

    def run_check(info: Any, ctx: Any, **kwargs: Any) -> Any:
        current.append((info.id, ctx.variant))
        try:
            return original_run_check(info, ctx, **kwargs)
        finally:
            current.pop()

    cls.forward, runner.run_check = forward, run_check  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        cls.forward, runner.run_check = original_forward, original_run_check  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", default="24,24,20,128:SSCB")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time in this process's CPU time, not wall time (a shared machine; with --threads 1)")
    parser.add_argument("--count", action="store_true", help="count the layer's forwards per check (a warm run)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cpu_time:
        time.perf_counter = time.process_time  # the runner and this script time with perf_counter
    layout = Layout.parse(args.layout)
    cls = resolve("layers/srelu.py:SReLU", base_dir=ROOT)

    cold = suite(cls, layout)
    cold_reference = forward_backward_seconds(cls, layout, repeat=3)
    # Each repetition measures the reference right before the suite, so a change in the
    # machine's load between them moves both: the ratio is per repetition, then the median.
    references, runs = [], []
    for _ in range(args.repeat):
        references.append(forward_backward_seconds(cls, layout, repeat=3))
        runs.append(suite(cls, layout))
    ratios = [run.seconds / ref for run, ref in zip(runs, references)]
    reference = statistics.median(references)

    clock = "CPU time" if args.cpu_time else "wall time"
    print(f"SReLU {layout}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.repeat} repetitions, "
          f"{clock}")
    print(f"one float64 forward+backward: {reference * 1e3:.1f} ms (median)")
    print(f"{'check':<24}{'variant':<10}{'status':<9}{'ms':>9}{'x f+b':>8}")
    rows = [(r.check, r.variant, r.status.value) for r in runs[0].results]
    per_check = []
    for i, (check, variant, status) in enumerate(rows):
        ratio = statistics.median(run.results[i].seconds / ref for run, ref in zip(runs, references))
        seconds = statistics.median(run.results[i].seconds for run in runs)
        per_check.append(ratio)
        print(f"{check:<24}{variant:<10}{status:<9}{seconds * 1e3:>9.1f}{ratio:>8.1f}")
    overhead = statistics.median((run.seconds - sum(r.seconds for r in run.results)) / ref
                                 for run, ref in zip(runs, references))
    print(f"{'runner overhead':<43}{'':>9}{overhead:>8.1f}")
    print(f"whole suite: {statistics.median(run.seconds for run in runs):.3f} s = {statistics.median(ratios):.1f} x "
          f"one float64 forward+backward (median of {args.repeat}; range {min(ratios):.1f}-{max(ratios):.1f}; "
          "target <= 25)")
    print(f"first (cold) run in this process: {cold.seconds:.3f} s = {cold.seconds / cold_reference:.1f} x")
    if args.count:
        with counting_forwards(cls, layout) as counts:
            suite(cls, layout)
        kinds = ("float32", "float64", "fewer", "meta")
        print(f"\nthe layer's forwards per check (a warm run): at the full size {layout} in float32 and float64, "
              "on fewer observations, on meta")
        print(f"{'check':<24}{'variant':<10}" + "".join(f"{kind:>9}" for kind in kinds))
        for (check, variant), counted in counts.items():
            print(f"{check:<24}{variant:<10}" + "".join(f"{counted[kind]:>9}" for kind in kinds))
        print(f"{'total':<34}" + "".join(f"{sum(c[kind] for c in counts.values()):>9}" for kind in kinds))


if __name__ == "__main__":
    main()

"""Each check's time and peak memory on the bundled SReLU at two sizes, as multiples of one
float64 forward+backward of the same layer measured side by side in this run, and how the
suite's peak memory grows from the small size to the large one (issue 18).

    python benchmarks/cost.py [--small 24,24,20,128:SSCB] [--large 48,48,20,128:SSCB] [--repeat 3]

The first suite of the process runs cold, before anything else has touched torch, at the small
size: it is the first target of a process (start-up included). Then, per size and repetition,
one float64 forward+backward is measured right before a warm suite, and every ratio is per
repetition, then the median. Memory is the growth of the process's resident set above what it
held when the block began (``limits.measure_peak``), with small allocations returned to the
system as large ones are (``limits.track_freed_memory``), so that it follows what is alive.
``--cpu-time`` times in this process's CPU time instead of wall time (issue 12's measure).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from layercheck import limits  # noqa: E402

limits.track_freed_memory()  # before torch allocates anything

import torch  # noqa: E402

from layercheck.layout import Layout  # noqa: E402
from layercheck.loading import resolve  # noqa: E402
from layercheck.registry import select  # noqa: E402
from layercheck.result import RunReport  # noqa: E402
from layercheck.runner import run_target  # noqa: E402
from layercheck.subject import Target  # noqa: E402

MB = 1e6


@dataclass
class Measured:
    """One size: per repetition, the forward+backward's seconds and peak, and the suite's."""

    fb_seconds: list[float] = field(default_factory=list)
    fb_peak: list[float] = field(default_factory=list)
    suites: list[RunReport] = field(default_factory=list)
    suite_seconds: list[float] = field(default_factory=list)
    suite_peak: list[int] = field(default_factory=list)


def forward_backward(cls: type, layout: Layout, clock: Callable[[], float]) -> tuple[float, float]:
    """One float64 forward+backward of the layer (inputs and parameters): the median seconds of
    three after a warm-up, and its peak memory (bytes above what the process held)."""
    target = Target(cls, [layout])
    subject = target.build(dtype=torch.float64)
    times, peaks = [], []
    for _ in range(4):
        with limits.measure_peak() as peak:
            inputs = subject.inputs(requires_grad=True)
            start = clock()
            out = subject.forward(inputs)
            torch.autograd.grad(out, [*inputs, *(p for _, p in subject.parameters())], torch.ones_like(out))
            times.append(clock() - start)
            del out, inputs
        peaks.append(peak.host or 0)
    return statistics.median(times[1:]), statistics.median(peaks[1:])


def suite(cls: type, layout: Layout, clock: Callable[[], float]) -> tuple[RunReport, float, int]:
    """The default suite on one target: its report, seconds and peak memory (bytes above what
    the process held when it began)."""
    limits.reset_highest()
    start_rss = limits.resident() or 0
    start = clock()
    report = run_target(Target(cls, [layout], name="layers/srelu.py:SReLU"), select())
    seconds = clock() - start
    return report, seconds, (limits.highest_resident() or 0) - start_rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", default="24,24,20,128:SSCB")
    parser.add_argument("--large", default="48,48,20,128:SSCB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu-time", action="store_true", help="time in this process's CPU time")
    parser.add_argument("--in-process", action="store_true", help="leave out the layercheck run command")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.cpu_time:
        time.perf_counter = time.process_time  # the runner times each check with perf_counter
    cls = resolve("layers/srelu.py:SReLU", base_dir=ROOT)
    sizes = {"small": Layout.parse(args.small), "large": Layout.parse(args.large)}

    _, cold_seconds, _ = suite(cls, sizes["small"], clock)
    measured = {name: Measured() for name in sizes}
    for _ in range(args.repeat):
        for name, layout in sizes.items():
            m = measured[name]
            seconds, peak = forward_backward(cls, layout, clock)
            m.fb_seconds.append(seconds)
            m.fb_peak.append(peak)
            report, seconds, peak = suite(cls, layout, clock)
            m.suites.append(report)
            m.suite_seconds.append(seconds)
            m.suite_peak.append(peak)

    clock_name = "CPU time" if args.cpu_time else "wall time"
    print(f"SReLU, torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.repeat} repetitions, "
          f"{clock_name}; x f+b: a multiple of one float64 forward+backward of the same size (medians)")
    for name, layout in sizes.items():
        m = measured[name]
        print(f"{name} {layout}: one float64 forward+backward {statistics.median(m.fb_seconds) * 1e3:.1f} ms, "
              f"{statistics.median(m.fb_peak) / MB:.1f} MB")
    header = "".join(f"{name + ' ms':>10}{'x f+b':>7}{name + ' MB':>10}{'x f+b':>7}" for name in sizes)
    print(f"{'check':<25}{'variant':<9}{'status':<8}{header}{'MB growth x':>13}")
    first = measured["small"].suites[0]
    for i, result in enumerate(first.results):
        row = f"{result.check:<25}{result.variant:<9}{result.status.value:<8}"
        peaks: dict[str, float] = {}
        for name, m in measured.items():
            times = [run.results[i].seconds for run in m.suites]
            ratio = statistics.median(t / fb for t, fb in zip(times, m.fb_seconds))
            peak = statistics.median(run.results[i].peak_memory or 0 for run in m.suites)
            peaks[name] = peak
            row += (f"{statistics.median(times) * 1e3:>10.1f}{ratio:>7.1f}{peak / MB:>10.1f}"
                    f"{peak / statistics.median(m.fb_peak):>7.1f}")
        print(row + f"{_growth(peaks, measured):>13.1f}")
    row = f"{'whole suite':<42}"
    peaks = {}
    for name, m in measured.items():
        ratio = statistics.median(s / fb for s, fb in zip(m.suite_seconds, m.fb_seconds))
        peaks[name] = statistics.median(m.suite_peak)
        row += (f"{statistics.median(m.suite_seconds) * 1e3:>10.1f}{ratio:>7.1f}{peaks[name] / MB:>10.1f}"
                f"{peaks[name] / statistics.median(m.fb_peak):>7.1f}")
    print(row + f"{_growth(peaks, measured):>13.1f}")
    small, large = measured["small"], measured["large"]
    fb_growth = statistics.median(large.fb_peak) - statistics.median(small.fb_peak)
    suite_growth = peaks["large"] - peaks["small"]
    print(f"peak memory growth {args.small} -> {args.large}: one forward+backward {fb_growth / MB:+.1f} MB, "
          f"the suite {suite_growth / MB:+.1f} MB = {suite_growth / fb_growth:.1f} x (target <= 2)")
    for name, layout in sizes.items():
        m = measured[name]
        estimate = limits.estimate([layout])
        print(f"--max-memory estimate at {layout}: {estimate / MB:.1f} MB, measured peak "
              f"{statistics.median(m.suite_peak) / MB:.1f} MB (ratio {estimate / statistics.median(m.suite_peak):.2f}; "
              "target within 1.5x)")
    fb = statistics.median(small.fb_seconds)
    print(f"first target of this process ({args.small}, cold, in-process as check_layer runs it): "
          f"{cold_seconds:.3f} s = {cold_seconds / fb:.1f} x (target <= 15); later targets: "
          f"{statistics.median(s / f for s, f in zip(small.suite_seconds, small.fb_seconds)):.1f} x (target <= 8)")
    if not args.cpu_time and not args.in_process:
        one, two = command_line_checks(args.small)
        print(f"layercheck run with two targets ({args.small}; a worker from the fork server, which imported "
              f"torch._dynamo beside the command's own start-up): the checks of the first target {one:.3f} s = "
              f"{one / fb:.1f} x, of the second {two:.3f} s = {two / fb:.1f} x")


def command_line_checks(layout: str) -> tuple[float, float]:
    """``layercheck run`` on SReLU twice in one cold command: the seconds its checks took in
    the worker, for the first target and the second."""
    done = subprocess.run([sys.executable, "-m", "layercheck", "run", "layers/srelu.py:SReLU", "layers/srelu.py:SReLU",
                           "--layout", layout, "--format", "json"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    runs = json.loads(done.stdout)["runs"]
    first, second = (sum(r["seconds"] for r in run["results"]) for run in runs)
    return first, second


def _growth(peaks: dict[str, float], measured: dict[str, Measured]) -> float:
    """How much faster a peak grows from the small size to the large one than one forward+backward's."""
    fb = statistics.median(measured["large"].fb_peak) - statistics.median(measured["small"].fb_peak)
    return (peaks["large"] - peaks["small"]) / fb if fb > 0 else float("nan")


if __name__ == "__main__":
    main()

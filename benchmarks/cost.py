"""Each check's time and peak memory on the bundled SReLU at two sizes, as multiples of one
float64 forward+backward of the same layer measured side by side in this run, and how the
suite's peak memory grows from the small size to the large one (issue 18).

    python benchmarks/cost.py [--small 24,24,20,128:SSCB] [--large 48,48,20,128:SSCB] [--repeat 3]

Two passes, each in a process of its own and each measuring its reference beside the suites.
Time: the first suite of the process runs cold, before anything else has touched torch, at the
small size (the first target of a process, start-up included); then, per size and repetition,
one float64 forward+backward right before a warm suite; every ratio is per repetition, then the
median. Memory: the same in a child process whose allocator gives every block of 1 MiB or more
back to the system when it is freed (``limits.track_freed_memory``), so that the growth of the
resident set (``limits.measure_peak``) follows what is alive; that costs time (every large
allocation faults its pages in afresh: one forward+backward takes three times as long), so no
time is read there. ``--cpu-time`` times in this process's CPU time instead of wall time
(issue 12's measure).

``--on cuda`` times the same with the layer and its inputs on that device, as ``layercheck run
--on cuda`` runs them (issue 19): each check and the whole suite as multiples of one float64
forward+backward on the device (the clock waits for the device), the cold first target, and
``layercheck run --on cuda`` as a command (its wall time and its checks'). No memory pass there:
the resident set does not see the device's memory. On a machine with CUDA the script runs that
pass after the CPU figures, in a process of its own (so its first target is cold too).
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

from layercheck.parent import limits  # noqa: E402

MEMORY_PASS = "--memory-pass" in sys.argv
if MEMORY_PASS:
    limits.track_freed_memory()  # before torch allocates anything

import torch  # noqa: E402

from layercheck.engine.runner import run_target  # noqa: E402
from layercheck.parent.layout import Layout  # noqa: E402
from layercheck.parent.registry import select  # noqa: E402
from layercheck.parent.result import CheckResult, RunReport  # noqa: E402
from layercheck.target.loading import resolve  # noqa: E402
from layercheck.target.subject import Target  # noqa: E402

MB = 1e6


@dataclass
class Measured:
    """One size: per repetition, the forward+backward's seconds and peak, and the suite's."""

    fb_seconds: list[float] = field(default_factory=list)
    fb_peak: list[float] = field(default_factory=list)
    suites: list[RunReport] = field(default_factory=list)
    suite_seconds: list[float] = field(default_factory=list)
    suite_peak: list[int] = field(default_factory=list)


def forward_backward(cls: type, layout: Layout, clock: Callable[[], float],
                     on: str | None = None) -> tuple[float, float]:
    """One float64 forward+backward of the layer (inputs and parameters): the median seconds of
    three after a warm-up, and its peak memory (bytes above what the process held)."""
    target = Target(cls, [layout], on=on)
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


def suite(cls: type, layout: Layout, clock: Callable[[], float],
          on: str | None = None) -> tuple[RunReport, float, int]:
    """The default suite on one target: its report, seconds and peak memory (bytes above what
    the process held when it began)."""
    limits.reset_highest()
    start_rss = limits.resident() or 0
    start = clock()
    report = run_target(Target(cls, [layout], name="layers/srelu.py:SReLU", on=on), select())
    seconds = clock() - start
    return report, seconds, (limits.highest_resident() or 0) - start_rss


def measure(cls: type, sizes: dict[str, Layout], repeat: int, clock: Callable[[], float],
            on: str | None = None) -> tuple[float, dict[str, Measured]]:
    """The cold first suite's seconds, then per size the repetitions."""
    _, cold_seconds, _ = suite(cls, sizes["small"], clock, on)
    measured = {name: Measured() for name in sizes}
    for _ in range(repeat):
        for name, layout in sizes.items():
            m = measured[name]
            seconds, peak = forward_backward(cls, layout, clock, on)
            m.fb_seconds.append(seconds)
            m.fb_peak.append(peak)
            report, seconds, peak = suite(cls, layout, clock, on)
            m.suites.append(report)
            m.suite_seconds.append(seconds)
            m.suite_peak.append(peak)
    return cold_seconds, measured


def memory_pass(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """The memory figures, from a child process that runs this script with ``--memory-pass``:
    per size, the forward+backward's and the suite's peaks, and each check's (by check:variant)."""
    command = [sys.executable, "-W", "ignore", __file__, "--memory-pass", "--small", args.small, "--large", args.large,
               "--repeat", str(args.repeat)]
    done = subprocess.run(command, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    figures: dict[str, dict[str, list[float]]] = json.loads(done.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", default="24,24,20,128:SSCB")
    parser.add_argument("--large", default="48,48,20,128:SSCB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu-time", action="store_true", help="time in this process's CPU time")
    parser.add_argument("--in-process", action="store_true", help="leave out the layercheck run command")
    parser.add_argument("--on", help="time with the layer on this device, as layercheck run --on (e.g. cuda)")
    parser.add_argument("--memory-pass", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.on:
        device_figures(args)
        return
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.cpu_time:
        time.perf_counter = time.process_time  # the runner times each check with perf_counter
    cls, sizes = layer_and_sizes(args)
    if args.memory_pass:
        _, measured = measure(cls, sizes, args.repeat, clock)
        print(json.dumps({name: {"fb": m.fb_peak, "suite": m.suite_peak,
                                 **{_key(r): [run.results[i].peak_memory or 0 for run in m.suites]
                                    for i, r in enumerate(m.suites[0].results)}}
                          for name, m in measured.items()}))
        return
    memory = memory_pass(args)
    cold_seconds, measured = measure(cls, sizes, args.repeat, clock)

    clock_name = "CPU time" if args.cpu_time else "wall time"
    print(f"SReLU, torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.repeat} repetitions, "
          f"{clock_name}; x f+b: a multiple of one float64 forward+backward of the same size (medians)")
    fb_peak = {name: statistics.median(memory[name]["fb"]) for name in sizes}
    fb_growth = fb_peak["large"] - fb_peak["small"]
    for name, layout in sizes.items():
        print(f"{name} {layout}: one float64 forward+backward {statistics.median(measured[name].fb_seconds) * 1e3:.1f} "
              f"ms, {fb_peak[name] / MB:.1f} MB")
    header = "".join(f"{name + ' ms':>10}{'x f+b':>7}{name + ' MB':>10}{'x f+b':>7}" for name in sizes)
    print(f"{'check':<25}{'variant':<9}{'status':<8}{header}{'MB growth x':>13}")
    first = measured["small"].suites[0]
    for i, result in enumerate(first.results):
        row = f"{result.check:<25}{result.variant:<9}{result.status.value:<8}"
        peaks: dict[str, float] = {}
        for name, m in measured.items():
            times = [run.results[i].seconds for run in m.suites]
            ratio = ratio_to_fb(times, m)
            peaks[name] = statistics.median(memory[name][_key(result)])
            row += (f"{statistics.median(times) * 1e3:>10.1f}{ratio:>7.1f}{peaks[name] / MB:>10.1f}"
                    f"{peaks[name] / fb_peak[name]:>7.1f}")
        print(row + f"{(peaks['large'] - peaks['small']) / fb_growth:>13.1f}")
    row = f"{'whole suite':<42}"
    peaks = {}
    for name, m in measured.items():
        ratio = ratio_to_fb(m.suite_seconds, m)
        peaks[name] = statistics.median(memory[name]["suite"])
        row += (f"{statistics.median(m.suite_seconds) * 1e3:>10.1f}{ratio:>7.1f}{peaks[name] / MB:>10.1f}"
                f"{peaks[name] / fb_peak[name]:>7.1f}")
    suite_growth = peaks["large"] - peaks["small"]
    print(row + f"{suite_growth / fb_growth:>13.1f}")
    print(f"peak memory growth {args.small} -> {args.large}: one forward+backward {fb_growth / MB:+.1f} MB, "
          f"the suite {suite_growth / MB:+.1f} MB = {suite_growth / fb_growth:.1f} x (target <= 2)")
    for name, layout in sizes.items():
        estimate = limits.estimate([layout])
        print(f"--max-memory estimate at {layout}: {estimate / MB:.1f} MB, measured peak {peaks[name] / MB:.1f} MB "
              f"(ratio {estimate / peaks[name]:.2f}; target within 1.5x)")
    small = measured["small"]
    fb = statistics.median(small.fb_seconds)
    print(f"first target of this process ({args.small}, cold, in-process as check_layer runs it): "
          f"{cold_seconds:.3f} s = {cold_seconds / fb:.1f} x (target <= 15); later targets: "
          f"{ratio_to_fb(small.suite_seconds, small):.1f} x (target <= 8)")
    if not args.cpu_time and not args.in_process:
        (one, two), _ = command_line(args.small, targets=2)
        print(f"layercheck run with two targets ({args.small}; a worker from the fork server, which imported "
              f"torch._dynamo beside the command's own start-up): the checks of the first target {one:.3f} s = "
              f"{one / fb:.1f} x, of the second {two:.3f} s = {two / fb:.1f} x")
    if torch.cuda.is_available() and not args.cpu_time:
        print()
        sys.stdout.flush()
        subprocess.run([sys.executable, "-W", "ignore", __file__, "--on", "cuda", "--small", args.small, "--large",
                        args.large, "--repeat", str(args.repeat)], check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})


def device_figures(args: argparse.Namespace) -> None:
    """The time figures with the layer and its inputs on ``args.on`` (``--on``): no memory pass."""
    device = torch.device(args.on)

    def clock() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    cls, sizes = layer_and_sizes(args)
    cold_seconds, measured = measure(cls, sizes, args.repeat, clock, on=args.on)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    print(f"SReLU with --on {args.on} ({where}), torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s), "
          f"{args.repeat} repetitions, wall time; x f+b: a multiple of one float64 forward+backward of the same size "
          "on the same device (medians)")
    for name, layout in sizes.items():
        print(f"{name} {layout}: one float64 forward+backward {statistics.median(measured[name].fb_seconds) * 1e3:.2f}"
              " ms")
    print(f"{'check':<25}{'variant':<9}{'status':<8}" + "".join(f"{name + ' ms':>10}{'x f+b':>7}" for name in sizes))
    rows = [(f"{r.check:<25}{r.variant:<9}{r.status.value:<8}", [[run.results[i].seconds for run in m.suites]
                                                                  for m in measured.values()])
            for i, r in enumerate(measured["small"].suites[0].results)]
    rows.append((f"{'whole suite':<42}", [m.suite_seconds for m in measured.values()]))
    for label, per_size in rows:
        print(label + "".join(f"{statistics.median(times) * 1e3:>10.1f}"
                              f"{ratio_to_fb(times, m):>7.1f}"
                              for times, m in zip(per_size, measured.values())))
    small = measured["small"]
    fb = statistics.median(small.fb_seconds)
    print(f"first target of this process ({args.small}, cold, in-process): {cold_seconds:.3f} s = "
          f"{cold_seconds / fb:.1f} x; later targets {statistics.median(small.suite_seconds):.3f} s = "
          f"{ratio_to_fb(small.suite_seconds, small):.1f} x")
    (checks,), wall = command_line(args.small, targets=1, on=args.on)
    print(f"layercheck run layers/srelu.py --layout {args.small} --on {args.on}: the process {wall:.2f} s "
          f"(target < 5 s on one H100), its checks {checks:.2f} s (target < 2 s)")


def layer_and_sizes(args: argparse.Namespace) -> tuple[type, dict[str, Layout]]:
    """The bundled SReLU and the two layouts it is measured at."""
    return resolve("layers/srelu.py:SReLU", base_dir=ROOT), {"small": Layout.parse(args.small),
                                                             "large": Layout.parse(args.large)}


def ratio_to_fb(seconds: list[float], m: Measured) -> float:
    """The median, over the repetitions, of each time as a multiple of that repetition's one
    float64 forward+backward."""
    return statistics.median(t / fb for t, fb in zip(seconds, m.fb_seconds))


def _key(result: CheckResult) -> str:
    return f"{result.check}:{result.variant}"


def command_line(layout: str, targets: int, on: str | None = None) -> tuple[list[float], float]:
    """``layercheck run`` on SReLU ``targets`` times in one cold command: the seconds its checks
    took in the worker, per target, and the command's wall time."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "layercheck", "run", *["layers/srelu.py:SReLU"] * targets,
                           "--layout", layout, "--jobs", "1", "--format", "json", *(["--on", on] if on else [])],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          check=True)
    wall = time.perf_counter() - start
    runs = json.loads(done.stdout)["runs"]
    return [sum(r["seconds"] for r in run["results"]) for run in runs], wall


if __name__ == "__main__":
    main()

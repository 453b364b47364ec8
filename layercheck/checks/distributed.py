"""The layer under data-parallel and sharded training (opt-in): two local ranks of
torch.distributed (gloo, loopback only), DDP and FSDP2.

The check itself never joins a process group: it holds the rendezvous (a ``TCPStore`` on a
free loopback port the operating system picks, port 0), starts two rank processes
(:func:`layercheck.support.ranks.rank_main`) that rebuild the layer by name, and judges what
they write back.
The ranks die with the process that started them, and are killed and reaped when the check
ends, fails or runs out of time; the store's port is closed with it.
"""

from __future__ import annotations

import datetime
import math
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from layercheck._sdk_internal import Target
from layercheck.parent.invocation import class_reference
from layercheck.sdk import (
    CheckError,
    CheckFailed,
    CheckSkipped,
    Context,
    Mode,
    Tolerance,
    check,
    relative_difference,
)
from layercheck.support.ranks import STEPS, STORE_HOST, WORLD, unused_in

_OUTPUT_TAIL = 1_500
# where layercheck itself is imported from, for the ranks' `python -c`
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_UNUSED_FIX = ("Fix: let every parameter take part in every step's loss on every rank (restructure the branch, or "
               "add 0 * parameter.sum() to the output on the path that skips it), or wrap the model in "
               "DistributedDataParallel(..., find_unused_parameters=True), which finds them each step at a cost")
_SYNC_FIX = ("where the global batch's statistics are meant, synchronise them across ranks "
             "(torch.nn.SyncBatchNorm.convert_sync_batchnorm(model), or an all_reduce of the statistics in forward "
             "as SyncBatchNorm does)")


def _applies(target: Target) -> str | None:
    if target.home.type != "cpu":
        return "the ranks run on the CPU (gloo); the layer is checked on another device (--on)"
    if target.kind != "module":
        return "operations (autograd.Function, operators, functions) hold no parameters for DDP or FSDP to synchronise"
    sizes = target.batch_sizes
    if not sizes:
        return "no input has a B (batch) dimension to split over the ranks"
    if len(sizes) > 1:
        return f"the inputs' B dimensions differ in size ({', '.join(map(str, sorted(sizes)))})"
    if min(sizes) < WORLD:
        return f"a batch of {min(sizes)} cannot be split over {WORLD} ranks"
    return None


@check(
    "distributed",
    title="on two local ranks (gloo): DDP's all-reduced gradients equal one process's on the whole batch, every "
          "parameter gets a gradient on every rank, buffers agree; FSDP2 matches and rebuilds from meta",
    default=False,
    requires=("forward_runs", "backward_runs"),
    applies=_applies,
    tolerances=(Tolerance("float64", 1e-7, "relative difference (norm) between a distributed run's outputs or "
                                           "gradients and one process's on the whole batch"),),
)
def distributed(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Starts two ranks on this machine (torch.distributed, gloo, a free loopback port) that each
    build the layer as every check does (float64), take one half of the batch and run:

    - **DDP** (``DistributedDataParallel``, its defaults): after one training forward and backward
      (a seeded random loss), the all-reduced gradients must equal one process's gradients of the
      whole batch, for a layer whose observations are independent; a layer whose training forward
      mixes the batch's observations without communicating (batch statistics, as BatchNorm) gets a
      note naming SyncBatchNorm-style synchronisation instead, and one that communicates (it meant
      the global batch) must equal the whole batch's outputs too. Three steps: a parameter that
      gets no gradient on some rank or some step makes DDP raise; it is named with the fix. Every
      buffer must agree across the ranks after a step (the note names those of a layer with batch
      statistics).
    - **FSDP2** (``torch.distributed.fsdp.fully_shard``), where this torch has it: outputs and
      gradients equal the unsharded run's; a tensor attribute that aliases a parameter (a view or
      ``.data`` taken in ``__init__``) is named, since sharding replaces the parameter and leaves the
      alias stale; built on the meta device, sharded, ``to_empty`` and ``reset_parameters``, the
      parameters must be drawn like the eager ones (none left as uninitialised memory).

    Why: these fail only once a model is trained on several processes, where a run costs most;
    DDP's "Expected to have finished reduction in the prior iteration" is the best-known. Skipped
    with the reason where two processes cannot start here, or torch lacks gloo. Fix: let every
    parameter take part in every step on every rank, reduce batch statistics across the ranks,
    read parameters at call time (no alias kept from ``__init__``), and set every parameter in
    ``reset_parameters``.
    """
    unavailable = _unavailable()
    if unavailable is not None:
        raise CheckSkipped(unavailable)
    module = ctx.fresh().module
    assert module is not None
    if not [p for p in module.parameters() if p.requires_grad]:
        raise CheckSkipped("the layer has no trainable parameter: DDP and FSDP have nothing to synchronise")
    _assert_no_aliases(module)
    reference = _reference_of(ctx.target)
    if reference is None:
        raise CheckSkipped("another process cannot import this layer by name (a class defined inside a function, or "
                           "an instance handed to the Python API): each rank must build it; name its class in a file "
                           "or module")
    ranks = _run_ranks(ctx, reference)
    return _Verdict(ctx, ranks).judge()


# -- where two ranks can run ----------------------------------------------------------------------


def _unavailable() -> str | None:
    """Why two gloo ranks cannot run here, or None."""
    import torch.distributed as dist

    if not dist.is_available():
        return "this torch build has no torch.distributed"
    if not dist.is_gloo_available():
        return "this torch build lacks the gloo backend, which runs ranks on the CPU"
    if sys.platform in ("emscripten", "wasi"):
        return "this platform cannot start the two rank processes"
    if _loopback() is None:
        return "no loopback network interface (lo) to connect the two ranks on"
    return None


def _loopback() -> str | None:
    """The loopback interface's name (gloo's GLOO_SOCKET_IFNAME): the ranks talk on it only."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    return next((name for name in names if name in ("lo", "lo0")), None)


def _reference_of(target: Target) -> str | None:
    if target.instance is not None:
        return None
    return class_reference(getattr(target.cls, "_init_fn", target.cls))


# -- aliases of parameters ------------------------------------------------------------------------


def _assert_no_aliases(module: nn.Module) -> None:
    aliases = _aliases(module)
    if not aliases:
        return
    attr, owner = aliases[0]
    listed = ", ".join(f"{a!r} of {p!r}" for a, p in aliases)
    raise CheckFailed(
        f"attribute {attr!r} shares the memory of parameter {owner!r} (a view or .data taken once: {listed}): FSDP2's "
        "fully_shard replaces every parameter with its shard (as .to() and load_state_dict(assign=True) replace it), "
        "and the layer keeps computing with the stale unsharded tensor, so the parameter gets no gradient. Fix: "
        f"derive it from the parameter in forward ({attr.split('.')[-1]} = self.{owner.split('.')[-1]}.t() there), "
        "or make it a property", tensor=f"attribute {attr!r}", attribute=attr, parameter=owner)


def _aliases(module: nn.Module) -> list[tuple[str, str]]:
    """(attribute, parameter) for every plain tensor attribute (or one in a list, tuple or dict)
    that shares a parameter's memory: a view or ``.data`` taken once, which outlives the parameter
    when FSDP (or ``.to()``, ``load_state_dict(assign=True)``) replaces it."""
    owners: dict[int, str] = {}
    for name, p in module.named_parameters():
        if p.device.type != "meta":
            owners.setdefault(p.untyped_storage().data_ptr(), name)
    found = []
    for prefix, sub in module.named_modules():
        for key, value in vars(sub).items():
            if key.startswith("_") and key in ("_parameters", "_buffers", "_modules"):
                continue
            for where, t in _tensor_attributes(key, value):
                if isinstance(t, nn.Parameter) or t.device.type == "meta":
                    continue
                owner = owners.get(t.untyped_storage().data_ptr())
                if owner is not None:
                    found.append((f"{prefix}.{where}" if prefix else where, owner))
    return found


def _tensor_attributes(key: str, value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield key, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if isinstance(item, torch.Tensor):
                yield f"{key}[{i}]", item
    elif isinstance(value, dict):
        for k, item in value.items():
            if isinstance(item, torch.Tensor):
                yield f"{key}[{k!r}]", item


# -- the parent's side: start, wait, clean up -------------------------------------------------------


@dataclass
class _Ranks:
    """What the two ranks wrote back, and how the run went."""

    results: list[dict[str, Any]]
    port: int
    seconds: float
    logs: list[str] = field(default_factory=list)


def _run_ranks(ctx: Context, reference: str) -> _Ranks:
    import torch.distributed as dist

    target = ctx.target
    folder = tempfile.mkdtemp(prefix="layercheck-distributed-")
    job: dict[str, Any] = {"reference": reference, "specs": target.specs, "args": target.args, "kwargs": target.kwargs,
           "constants": target.constants, "seed": target.seed, "sys_path": list(sys.path), "timeout": _pg_timeout()}
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    start = time.perf_counter()
    store = None
    try:
        job["launched"] = time.perf_counter()  # CLOCK_MONOTONIC: one clock for every process of this machine
        with open(os.path.join(folder, "job.pkl"), "wb") as f:
            pickle.dump(job, f)
        store = dist.TCPStore(STORE_HOST, 0, None, is_master=True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=job["timeout"]))
        port = int(store.port)
        env = {**os.environ, "GLOO_SOCKET_IFNAME": _loopback() or "lo", "TORCH_DISTRIBUTED_DEBUG": "INFO",
               "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)}
        for rank in range(WORLD):
            log = os.path.join(folder, f"rank{rank}.log")
            logs.append(log)
            with open(log, "wb") as out:
                try:
                    procs.append(subprocess.Popen(
                        [sys.executable, "-c", "from layercheck.support.ranks import rank_main; rank_main()",
                         folder, str(rank), str(port)],
                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd()))
                except OSError as exc:
                    raise CheckSkipped(f"the rank processes cannot be started here ({type(exc).__name__}: {exc})"
                                       ) from None
        for proc in procs:
            proc.wait()  # the check's time limit interrupts this; the finally below kills what is left
        results = []
        for rank, proc in enumerate(procs):
            path = os.path.join(folder, f"rank{rank}.pkl")
            if not os.path.exists(path):
                raise CheckError(f"rank {rank} of the distributed run ended (exit status {proc.returncode}) without "
                                 f"writing its result; it wrote:\n{_tail(logs[rank])}")
            with open(path, "rb") as f:
                results.append(pickle.load(f))
        return _Ranks(results, port, time.perf_counter() - start, [_tail(log) for log in logs])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        del store  # closes the port
        shutil.rmtree(folder, ignore_errors=True)


def _pg_timeout() -> float:
    """How long a rank waits for the other in a collective: a rank that died makes the other
    fail at once (its socket closes); this bounds a rank stuck in the layer."""
    return 60.0


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return text if len(text) <= _OUTPUT_TAIL else "..." + text[-_OUTPUT_TAIL:]


# -- judging ------------------------------------------------------------------------------------------


class _Verdict:
    """The parent's reading of the two ranks' results."""

    def __init__(self, ctx: Context, ranks: _Ranks) -> None:
        self.ctx = ctx
        self.ranks = ranks
        self.r = ranks.results
        self.tol = ctx.tolerance("float64")
        timing = self.r[0].get("timing", {})
        self.details: dict[str, Any] = {"ranks": WORLD, "backend": "gloo", "port": ranks.port,
                                        "seconds": round(ranks.seconds, 2),
                                        "rank_seconds": {k: round(v, 2) for k, v in timing.items()}}

    def judge(self) -> tuple[str, dict[str, Any]]:
        try:
            return self._judge()
        except CheckFailed as failure:
            failure.details = {**self.details, **failure.details}  # how the run went, failed or not
            raise

    def _judge(self) -> tuple[str, dict[str, Any]]:
        for rank, result in enumerate(self.r):
            if result.get("setup_error"):
                raise CheckError(f"rank {rank} could not set up the distributed run: {result['setup_error']}")
        lost = [i for i, part in enumerate(self.r[0]["reference_slice"]) if part is None]
        if lost:
            raise CheckSkipped(f"output {lost[0]} has no dimension that follows the batch (it reduces over it): a "
                               "rank's output on its part of the batch cannot be compared with the whole batch's")
        mode = self.r[0]["mode"]
        independent = all(self._close(res["solo"]["outputs"], res["reference_slice"]) is None for res in self.r)
        communicates = any(res["solo"]["collectives"] for res in self.r)
        self.details.update(mode=mode, independent=independent, communicates=communicates)
        said = [self._ddp(independent, communicates)]
        said.append(self._fsdp(independent or communicates))
        said.append(self._meta())
        mode_text = " (eval-mode forward: the training forward is random)" if mode != Mode.FORWARD.value else ""
        return f"on {WORLD} ranks (gloo){mode_text}: " + "; ".join(s for s in said if s), self.details

    # -- DDP

    def _ddp(self, independent: bool, communicates: bool) -> str:
        self._unused()
        for rank, res in enumerate(self.r):
            error = res["ddp"].get("error")
            if error:
                raise CheckFailed(f"under DistributedDataParallel, rank {rank} raised {error}", rank=rank)
        grads_ref = self.r[0]["reference"]["grads"]
        if independent or communicates:
            if communicates and not independent:
                for rank, res in enumerate(self.r):
                    where = self._close(res["ddp"]["outputs"], res["reference_slice"])
                    if where is not None:
                        name, diff = where
                        raise CheckFailed(
                            f"the layer communicates across ranks in its training forward ({res['solo']['collectives']}"
                            f" collective call(s) on rank {rank}), so it means the global batch, but under DDP "
                            f"{name} on rank {rank}'s half of the batch differs from one process's on the whole "
                            f"batch by {diff:.3g} (relative, tolerance {self.tol:g}): per-rank batch statistics where "
                            "the global batch was meant. Fix: reduce every statistic over the ranks (sums and counts "
                            "with all_reduce, then divide by the global count), as torch.nn.SyncBatchNorm does",
                            tensor=name, rank=rank)
            worst = 0.0
            for name, expected in grads_ref.items():
                got = self.r[0]["ddp"]["grads"].get(name)
                if got is None:
                    continue  # _unused named it
                diff = relative_difference(got * WORLD, expected)
                worst = max(worst, diff)
                if not diff <= self.tol:
                    raise CheckFailed(
                        f"under DDP (each rank on half of the batch), the all-reduced gradient of parameter {name!r} "
                        f"times {WORLD} differs from one process's gradient on the whole batch by {diff:.3g} "
                        f"(relative, tolerance {self.tol:g})", tensor=f"parameter {name!r}", difference=diff)
            self.details["ddp_gradient_difference"] = worst
            text = f"DDP's all-reduced gradients equal one process's on the whole batch (within {worst:.1e})"
        else:
            text = "DDP ran (gradients not compared: batch statistics)"
            self.ctx.note("the training forward mixes the batch's observations (batch statistics) and does not "
                          "communicate across ranks: under DDP each rank computes them on its own part of the batch, "
                          "so outputs and gradients differ from one process's on the whole batch; " + _SYNC_FIX)
        diverged = self._diverged_buffers()
        if diverged:
            listed = ", ".join(f"{name!r} ({diff:.3g})" for name, diff in diverged)
            if independent or communicates:
                name = diverged[0][0]
                raise CheckFailed(
                    f"after one DDP step, buffer(s) {listed} differ between rank 0 and rank 1 (relative): they are "
                    "updated from each rank's own data. DDP copies rank 0's buffers to every rank at the next forward "
                    "(broadcast_buffers=True), so the other ranks' updates are lost, and without that the replicas "
                    "drift apart. Fix: all_reduce the update across ranks before applying it (as SyncBatchNorm "
                    "does), or update the buffer from values every rank shares",
                    tensor=f"buffer {name!r}", buffers=[n for n, _ in diverged])
            self.ctx.note(f"buffers that differ across ranks after one DDP step: {listed} (each rank's batch "
                          "statistics; DDP copies rank 0's to every rank at the next forward)")
            text += "; buffers differ across ranks (see the note)"
        elif any(self.r[0]["ddp"]["buffers"]):
            text += "; buffers agree across ranks"
        return text + f"; every parameter got a gradient on every rank in {STEPS} steps"

    def _unused(self) -> None:
        """Fail naming the parameters a rank left without a gradient in some step."""
        for step in range(STEPS):
            per_rank = [unused_in(res, step) for res in self.r]
            for rank, unused in enumerate(per_rank):
                if not unused:
                    continue
                others = [r for r, u in enumerate(per_rank) if u is not None and r != rank and set(unused) - set(u)]
                how = f" (rank {others[0]} used them)" if others else ""
                raised = next((res["ddp"]["error"] for res in self.r if res["ddp"].get("error")
                               and "finished reduction" in res["ddp"]["error"]), None)
                ddp = (f" DDP raised: {raised.split('. ')[0]}." if raised else
                       " DDP raises 'Expected to have finished reduction in the prior iteration before starting a new "
                       "one' at the next step")
                names = ", ".join(repr(n) for n in unused)
                raise CheckFailed(
                    f"under DistributedDataParallel, parameter(s) {names} got no gradient on rank {rank} in step "
                    f"{step + 1}{how}.{ddp}. {_UNUSED_FIX}", tensor=f"parameter {unused[0]!r}", rank=rank,
                    step=step + 1, unused=list(unused))

    def _diverged_buffers(self) -> list[tuple[str, float]]:
        a, b = self.r[0]["ddp"]["buffers"], self.r[1]["ddp"]["buffers"]
        diverged = []
        for name, x in a.items():
            y = b.get(name)
            if x is None or y is None:
                continue
            if x.is_floating_point():
                diff = relative_difference(y, x)
                if not diff <= self.tol:
                    diverged.append((name, diff))
            elif not torch.equal(x, y):
                diverged.append((name, math.inf))
        return diverged

    # -- FSDP2

    def _fsdp(self, comparable: bool) -> str:
        fsdp = self.r[0]["fsdp"]
        if fsdp.get("unsupported"):
            self.ctx.note(f"FSDP2 not checked: {fsdp['unsupported']}")
            return ""
        for rank, res in enumerate(self.r):
            if res["fsdp"].get("error"):
                raise CheckFailed(f"under FSDP2 (fully_shard), rank {rank} raised {res['fsdp']['error']}", rank=rank)
        if not comparable:
            return "FSDP2 (fully_shard) ran"
        for rank, res in enumerate(self.r):
            where = self._close(res["fsdp"]["outputs"], res["reference_slice"])
            if where is not None:
                name, diff = where
                raise CheckFailed(f"under FSDP2 (fully_shard), {name} on rank {rank}'s half of the batch differs from "
                                  f"the unsharded layer's by {diff:.3g} (relative, tolerance {self.tol:g})",
                                  tensor=name, rank=rank)
        for name, expected in self.r[0]["reference"]["grads"].items():
            got = fsdp["grads"].get(name)
            if got is None:
                raise CheckFailed(f"under FSDP2 (fully_shard), parameter {name!r} got no gradient, where the unsharded "
                                  "layer gives it one: forward does not use the sharded parameter (a tensor taken from "
                                  "it before sharding?)", tensor=f"parameter {name!r}")
            diff = relative_difference(got * WORLD, expected)
            if not diff <= self.tol:
                raise CheckFailed(f"under FSDP2 (fully_shard), the reduced gradient of parameter {name!r} times "
                                  f"{WORLD} differs from one process's gradient on the whole batch by {diff:.3g} "
                                  f"(relative, tolerance {self.tol:g})", tensor=f"parameter {name!r}", difference=diff)
        return "FSDP2 (fully_shard) outputs and gradients equal the unsharded run's"

    def _meta(self) -> str:
        meta = self.r[0]["meta"]
        if meta.get("skipped"):
            self.ctx.note(f"FSDP2 initialisation from meta not checked: {meta['skipped']}")
            return ""
        if meta.get("error"):
            raise CheckFailed(f"built on the meta device, sharded (fully_shard), to_empty and reset_parameters: "
                              f"{meta['error']}")
        eager = self.r[0]["reference"]["parameters"]
        for name, value in meta["parameters"].items():
            if bool(torch.isnan(value).any()):
                raise CheckFailed(
                    f"built on the meta device, sharded (fully_shard), to_empty and reset_parameters, parameter "
                    f"{name!r} keeps what to_empty left (uninitialised memory): reset_parameters does not set it. "
                    "Fix: set every parameter in reset_parameters (the meta-device initialisation FSDP2 uses)",
                    tensor=f"parameter {name!r}")
            problem = _drawn_unlike(value, eager[name])
            if problem:
                raise CheckFailed(f"built on the meta device, sharded (fully_shard), to_empty and reset_parameters, "
                                  f"parameter {name!r} {problem}", tensor=f"parameter {name!r}")
        unset = [name for name, value in meta["buffers"].items() if bool(torch.isnan(value).any())]
        if unset:
            self.ctx.note(f"built on meta and rebuilt by to_empty + reset_parameters, buffer(s) {', '.join(unset)} "
                          "keep uninitialised memory: set them in reset_parameters")
        return "built on meta, sharded, to_empty + reset_parameters draw the parameters like the eager layer's"

    # -- comparing

    def _close(self, got: Sequence[torch.Tensor | None], expected: Sequence[torch.Tensor | None]
               ) -> tuple[str, float] | None:
        """None when every output agrees within the tolerance; else (output name, difference)."""
        for i, (g, e) in enumerate(zip(got, expected)):
            if g is None or e is None:
                continue
            diff = relative_difference(g, e)
            if not diff <= self.tol:
                return (f"output {i}" if len(got) > 1 else "the output"), diff
        return None


def _drawn_unlike(value: torch.Tensor, eager: torch.Tensor) -> str | None:
    """Why a parameter rebuilt from meta is not drawn like the eager one: a constant one must
    be that constant; a random one must spread like it (a factor of 3 on the standard deviation,
    loose enough for small tensors)."""
    if value.shape != eager.shape:
        return f"has size {tuple(value.shape)} where the eager layer's has {tuple(eager.shape)}"
    e, v = eager.double(), value.double()
    if e.numel() < 2 or bool((e == e.flatten()[0]).all()):
        if not torch.equal(v, e):
            return (f"is not the constant the eager layer holds ({float(e.flatten()[0]):g}); largest difference "
                    f"{float((v - e).abs().max()):.3g}")
        return None
    se, sv = float(e.std()), float(v.std())
    if not (se / 3 <= sv <= se * 3) or not math.isfinite(sv):
        return (f"spreads with standard deviation {sv:.3g} where the eager layer's spreads with {se:.3g}: "
                "reset_parameters does not draw it as the constructor does")
    return None



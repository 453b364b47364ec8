"""One rank of the distributed check (:mod:`layercheck.checks.distributed`): the process the
check starts twice (``python -c "from layercheck.support.ranks import rank_main; rank_main()"``),
which rebuilds the layer by name and runs it alone on its half of the batch, under DDP and under
FSDP2, and writes what it saw back for the check to judge. Its constants are the check's too.
"""

from __future__ import annotations

import datetime
import os
import pickle
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from layercheck.target.subject import Mode, Target
from layercheck.target.tensors import Outputs

WORLD = 2
STORE_HOST = "127.0.0.1"
STEPS = 3  # DDP raises for a parameter left without a gradient at the step after: an odd step needs a third


def rank_main() -> None:
    """Entry point of one rank: ``python -c '...rank_main()' FOLDER RANK PORT``."""
    folder, rank, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    from layercheck.engine.serve import _die_with_parent

    _die_with_parent()
    with open(os.path.join(folder, "job.pkl"), "rb") as f:
        job = pickle.load(f)
    sys.path[:0] = [p for p in job["sys_path"] if p not in sys.path]
    torch.set_num_threads(1)
    result: dict[str, Any] = {"rank": rank}
    try:
        _Rank(job, rank, port, result).run()
    except Exception as exc:
        result.setdefault("setup_error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-4)}")
    with open(os.path.join(folder, f"rank{rank}.pkl.tmp"), "wb") as f:
        pickle.dump(result, f)
    os.replace(os.path.join(folder, f"rank{rank}.pkl.tmp"), os.path.join(folder, f"rank{rank}.pkl"))
    # a rank whose peer is gone must not wait in the process group's teardown
    sys.stdout.flush()
    os._exit(0)


class _Rank:
    """One rank's runs: the reference (whole batch, one process), then in the process group the
    layer alone on this rank's half, DDP and FSDP2, and FSDP2's initialisation from meta."""

    def __init__(self, job: dict[str, Any], rank: int, port: int, result: dict[str, Any]) -> None:
        from layercheck.target.loading import resolve

        self.job, self.rank, self.port, self.result = job, rank, port, result
        self.target = Target(resolve(job["reference"]), job["specs"], args=job["args"], kwargs=job["kwargs"],
                             seed=job["seed"], constants=job["constants"])
        self.mode = Mode.FORWARD

    def run(self) -> None:
        import torch.distributed as dist

        timing = self.result["timing"] = {"started": time.perf_counter() - self.job["launched"]}
        self._reference()
        store = dist.TCPStore(STORE_HOST, self.port, None, is_master=False,
                              timeout=datetime.timedelta(seconds=self.job["timeout"]))
        dist.init_process_group("gloo", store=store, rank=self.rank, world_size=WORLD,
                                timeout=datetime.timedelta(seconds=self.job["timeout"]))
        for phase in (self._solo, self._ddp, self._fsdp, self._meta):
            name = phase.__name__.strip("_")
            start = time.perf_counter()
            phase()
            timing[name] = time.perf_counter() - start
            if self.result.get(name, {}).get("error"):
                return  # this rank ends now, so that a rank waiting for it in a collective fails at once too

    # the whole batch in one process (before the process group exists: a layer that synchronises
    # when torch.distributed is initialised computes here as one process does)
    def _reference(self) -> None:
        subject = self.target.build(dtype=torch.float64)
        module = subject.module
        assert module is not None
        parameters = {n: p.detach().clone() for n, p in module.named_parameters()}
        inputs = subject.inputs(requires_grad=True)
        subject.forward(inputs)
        if subject.drew_random:  # dropout-like: a half of the batch draws other numbers than the whole
            self.mode = Mode.EVAL
            subject = self.target.build(dtype=torch.float64)
            inputs = subject.inputs(requires_grad=True)
        outputs = self._floating(subject.call(self.mode, inputs))
        self.cotangents = [_normal(tuple(y.shape), self.job["seed"] * 1_000_003 + 7_919 * (i + 1))
                           for i, y in enumerate(outputs)]
        torch.autograd.backward(outputs, self.cotangents)
        assert subject.module is not None
        self.result["mode"] = self.mode.value
        self.result["reference"] = {
            "grads": {n: p.grad.detach().clone() for n, p in subject.module.named_parameters()
                      if p.requires_grad and p.grad is not None},
            "parameters": parameters,
        }
        self.full = [y.detach() for y in outputs]
        self.inputs = self.target.inputs(torch.float64)
        self.result["reference_slice"] = [None] * len(outputs)  # filled once this rank's output sizes are known

    def _half_inputs(self) -> list[torch.Tensor]:
        halves = []
        for spec, x in zip(self.target.specs, self.inputs):
            dim = spec.layout.batch_dim
            part = x if dim is None else x.tensor_split(WORLD, dim)[self.rank]
            part = part.clone()
            if spec.takes_grad:
                part.requires_grad_(True)
            halves.append(part)
        return halves

    def _slices(self, outputs: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor | None], list[torch.Tensor]]:
        """This rank's part of the whole batch's outputs and of their cotangents, per output
        (None where an output has no dimension that follows the batch)."""
        slices: list[torch.Tensor | None] = []
        cots = []
        for full, cot, mine in zip(self.full, self.cotangents, outputs):
            dim = _batch_dim(full.shape, mine.shape)
            if dim is None:
                slices.append(None)
                cots.append(torch.zeros(mine.shape, dtype=mine.dtype))
                continue
            slices.append(full.tensor_split(WORLD, dim)[self.rank])
            cots.append(cot.tensor_split(WORLD, dim)[self.rank].clone())
        return slices, cots

    def _solo(self) -> None:
        """The layer alone on this rank's half: does its training forward mix observations, and
        does it communicate?"""
        import torch.distributed as dist

        subject = self.target.build(dtype=torch.float64)
        before = _collectives(dist)
        outputs = self._floating(subject.call(self.mode, self._half_inputs()))
        collectives = _collectives(dist) - before
        slices, self.half_cotangents = self._slices(outputs)
        torch.autograd.backward(outputs, [c.clone() for c in self.half_cotangents])
        assert subject.module is not None
        unused = [n for n, p in subject.module.named_parameters() if p.requires_grad and p.grad is None]
        self.result["reference_slice"] = slices
        self.result["solo"] = {"outputs": [y.detach() for y in outputs], "collectives": collectives, "unused": unused}

    def _ddp(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        subject = self.target.build(dtype=torch.float64)
        module = subject.module
        assert module is not None
        record: dict[str, Any] = {"unused": {}, "grads": {}, "buffers": {}, "outputs": []}
        self.result["ddp"] = record
        try:
            model = DistributedDataParallel(module)
            for step in range(STEPS):
                for p in module.parameters():
                    p.grad = None
                inputs = self._half_inputs()
                module.train(self.mode is Mode.FORWARD)
                positional, keywords = self.target.split(inputs)
                outputs = self._floating(model(*positional, **keywords))
                torch.autograd.backward(outputs, [c.clone() for c in self.half_cotangents])
                record["unused"][step] = [n for n, p in module.named_parameters()
                                          if p.requires_grad and p.grad is None]
                if step == 0:
                    record["outputs"] = [y.detach() for y in outputs]
                    record["grads"] = {n: p.grad.detach().clone() for n, p in module.named_parameters()
                                       if p.grad is not None}
                    record["buffers"] = {n: b.detach().clone() for n, b in module.named_buffers()}
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"

    def _fsdp(self) -> None:
        record: dict[str, Any] = {"grads": {}, "outputs": []}
        self.result["fsdp"] = record
        try:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            self.mesh = init_device_mesh("cpu", (WORLD,))
        except Exception as exc:
            record["unsupported"] = f"this torch has no FSDP2 on the CPU ({type(exc).__name__}: {exc})"
            return
        subject = self.target.build(dtype=torch.float64)
        module = subject.module
        assert module is not None
        try:
            fully_shard(module, mesh=self.mesh)
            outputs = self._floating(subject.call(self.mode, self._half_inputs()))
            torch.autograd.backward(outputs, [c.clone() for c in self.half_cotangents])
            record["outputs"] = [y.detach() for y in outputs]
            record["grads"] = {n: _full(p.grad) for n, p in module.named_parameters() if p.grad is not None}
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"

    def _meta(self) -> None:
        from layercheck.target.building import initialize
        from layercheck.target.seeding import seeded

        record: dict[str, Any] = {"parameters": {}, "buffers": {}}
        self.result["meta"] = record
        if self.result["fsdp"].get("unsupported"):
            record["skipped"] = "no FSDP2 here"
            return
        from torch.distributed.fsdp import fully_shard

        try:
            with torch.device("meta"):
                layer = self.target.construct()
                assert layer is not None
                initialize(layer, self.target, self.target.seed)
            layer = layer.to(torch.float64)
        except Exception as exc:
            record["skipped"] = f"the layer cannot be built on the meta device ({type(exc).__name__}: {exc})"
            return
        lacking = [name or type(m).__name__ for name, m in layer.named_modules()
                   if _owns_tensors(m) and not callable(getattr(m, "reset_parameters", None))]
        if lacking and not callable(getattr(layer, "reset_parameters", None)):
            record["skipped"] = f"{', '.join(lacking[:3])} owns parameters or buffers but defines no reset_parameters"
            return
        try:
            fully_shard(layer, mesh=self.mesh)
            layer.to_empty(device="cpu")
            with torch.no_grad():
                for t in [*layer.parameters(), *layer.buffers()]:
                    if t.dtype.is_floating_point:
                        _local(t).fill_(float("nan"))  # to_empty's memory is undefined: make a forgotten tensor visible
                with seeded(self.target.seed):
                    for m in layer.modules():
                        reset = getattr(m, "reset_parameters", None)
                        if callable(reset):
                            reset()
            record["parameters"] = {n: _full(p) for n, p in layer.named_parameters()}
            record["buffers"] = {n: _full(b) for n, b in layer.named_buffers() if b.is_floating_point()}
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"

    def _floating(self, raw: Any) -> list[torch.Tensor]:
        return [y for y in Outputs.of(raw).floating if y.requires_grad]


def unused_in(result: dict[str, Any], step: int) -> list[str] | None:
    """The parameters a rank left without a gradient in a DDP step; None where it did not finish
    the step (it waited for another rank), except the first, which the rank's run alone tells."""
    unused = result["ddp"]["unused"].get(step)
    if unused is None and step == 0:
        return list(result["solo"]["unused"])
    return None if unused is None else list(unused)


def _batch_dim(full: Sequence[int], half: Sequence[int]) -> int | None:
    """The one dimension in which an output on a part of the batch is shorter than on the whole."""
    if len(full) != len(half):
        return None
    differ = [d for d, (a, b) in enumerate(zip(full, half)) if a != b]
    return differ[0] if len(differ) == 1 else None


def _collectives(dist: Any) -> int:
    """Collective calls made in the default process group so far (gloo counts them)."""
    try:
        return int(dist.distributed_c10d._get_default_group()._get_sequence_number_for_group())
    except Exception:
        return 0


def _normal(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    from layercheck.target.seeding import standard_normal

    return standard_normal(shape, seed)


def _local(t: Any) -> torch.Tensor:
    """A DTensor's shard on this rank (its memory), or the tensor itself."""
    return t.to_local() if callable(getattr(t, "to_local", None)) else t


def _full(t: Any) -> torch.Tensor:
    """A DTensor gathered whole from every rank (a collective), or a copy of the tensor."""
    whole = t.full_tensor() if callable(getattr(t, "full_tensor", None)) else t
    return whole.detach().clone()


def _owns_tensors(module: nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False))

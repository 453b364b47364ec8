"""``layercheck scan`` on real models from the libraries the benchmarks use, with tiny configurations:

    PYTHONPATH=.:/tmp/tails-site:/tmp/tails-vision python benchmarks/scan_models.py [--only NAME] [--jobs N]

- ``llama``: transformers' LlamaForCausalLM, 2 layers, hidden 32 (RMSNorm, rotary embedding,
  attention with a padding mask and position ids, gated MLP), on token ids and a padding mask;
- ``llama_planted``: the same with one bug planted in one layer (a post-attention RMSNorm whose
  variance is taken over the whole batch), which ``observations`` must find there;
- ``convnext``: timm's ConvNeXt with small widths (LayerNorm2d, its Mlp, GELU, the classifier head);
- ``xtransformers``: x-transformers' TransformerWrapper over a 2-layer Decoder with rotary
  embeddings and a GLU feed-forward.

Each model is scanned by the command line (``layercheck scan benchmarks/scan_models.py:NAME``, the
default checks, a JSON report), and its cost is set beside one forward and backward of the same
model on the same sample input, both in CPU time (this process's, and the scan's processes'
together), measured in one run. The model factories are importable by the workers (the saved
layers' classes are imported from here). Prints a row per model and every layer that did not pass.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from third_party import torchvision_importable  # noqa: E402

torchvision_importable()  # timm needs torchvision's Python; its C extension does not load beside a CPU torch


def llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False,
                         attn_implementation="eager")
    return LlamaForCausalLM(config)


def llama_planted() -> nn.Module:
    """The same Llama with one bug planted in one layer: the second layer's post-attention RMSNorm
    takes its variance over the whole batch, not each token (``observations`` must fail there)."""
    model = llama()
    norm = model.model.layers[1].post_attention_layernorm
    leaking = BatchLeakingRMSNorm(norm.weight.shape[0])
    leaking.load_state_dict(norm.state_dict())
    model.model.layers[1].post_attention_layernorm = leaking
    return model


try:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm as _RMSNorm
except ImportError:  # transformers not installed: the model is left out
    _RMSNorm = nn.Module  # type: ignore[misc, assignment]


class BatchLeakingRMSNorm(_RMSNorm):  # type: ignore[misc, valid-type]
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.float().pow(2).mean()  # the bug: .mean(-1, keepdim=True) is right
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon)).to(hidden_states.dtype)


def convnext() -> nn.Module:
    from timm.models.convnext import ConvNeXt

    return ConvNeXt(depths=(1, 1, 2, 1), dims=(8, 16, 24, 32), num_classes=10)


def xtransformers() -> nn.Module:
    from x_transformers import Decoder, TransformerWrapper

    return TransformerWrapper(num_tokens=100, max_seq_len=32, attn_layers=Decoder(
        dim=32, depth=2, heads=4, attn_dim_head=8, rotary_pos_emb=True, ff_glu=True))


TOKENS = "2,8:BT dtype=int64 values=0:100"
PADDING = "2,8:BT dtype=bool values=0.8"
# where a planted bug must be found: model -> (path, check)
PLANTED = {"llama_planted": ("model.layers.1.post_attention_layernorm", "observations")}
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[str, ...], str]] = {
    "llama": (llama, (TOKENS, PADDING), "transformers"),
    "llama_planted": (llama_planted, (TOKENS, PADDING), "transformers"),
    "convnext": (convnext, ("2,3,32,32:BCSS",), "timm"),
    "xtransformers": (xtransformers, (TOKENS,), "x-transformers"),
}


def forward_backward_cpu(name: str, rounds: int = 5) -> float:
    """The median CPU time of one forward and backward of the model on its sample input."""
    from layercheck.parent.inputs import parse_input
    from layercheck.scan.model import drawn_inputs

    factory, layouts, _ = MODELS[name]
    model = factory()
    args, kwargs = drawn_inputs([parse_input(text) for text in layouts], 0)
    times = []
    for _ in range(rounds):
        start = time.process_time()
        out = model(*args, **kwargs)
        out = out.logits if hasattr(out, "logits") else out
        out.float().sum().backward()
        times.append(time.process_time() - start)
    return sorted(times)[len(times) // 2]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def scan(name: str, jobs: int) -> tuple[dict, float, float]:
    """The scan's JSON report, its wall time and the CPU time of its processes."""
    _, layouts, _ = MODELS[name]
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        command = [sys.executable, "-m", "layercheck", "scan", f"{Path(__file__)}:{name}", "--quiet",
                   "--jobs", str(jobs), "--output", str(report)]
        for text in layouts:
            command += ["--input", text]
        cpu, wall = children_cpu(), time.perf_counter()
        subprocess.run(command, check=False, env={**os.environ, "COLUMNS": "200"}, stdout=subprocess.DEVNULL)
        wall, cpu = time.perf_counter() - wall, children_cpu() - cpu
        return json.loads(report.read_text()), wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(MODELS), action="append")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__}, "
          + ", ".join(f"{MODELS[n][2]} {importlib.metadata.version(MODELS[n][2])}" for n in args.only or MODELS))
    unexplained = 0
    for name in args.only or MODELS:
        one = forward_backward_cpu(name)
        report, wall, cpu = scan(name, args.jobs)
        rows = report["scan"]
        counts = {status: sum(row["status"] == status for row in rows) for status in ("passed", "failed", "error",
                                                                                       "skipped")}
        print(f"{name}: {len(rows)} kinds of layer ({sum(r['count'] for r in rows)} calls): "
              + ", ".join(f"{n} {s}" for s, n in counts.items())
              + f"; {wall:.0f} s wall, {cpu:.0f} s CPU = {cpu / one:.0f} x one forward+backward "
              f"({one * 1e3:.1f} ms CPU)")
        planted = PLANTED.get(name)
        for row in rows:
            if planted and row["path"] == planted[0]:
                found = planted[1] in row["failed"]
                unexplained += not found
                print(f"  planted bug in {planted[0]}: {'found by' if found else 'MISSED by'} {planted[1]}")
            if row["status"] != "passed":
                unexplained += row["status"] != "skipped" and not planted  # around a planted bug blocks fail too
                print(f"  {row['status']}: {row['path'] or '(model)'} ({row['class']}): "
                      f"{', '.join(row['failed']) or row['reason']}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())

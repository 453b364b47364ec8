"""layercheck's default suite on layers of libraries nobody on the team wrote, where installed.

    python benchmarks/third_party.py [--seeds 3] [--only NAME] [--larger]

Each layer is built (with ``torch.manual_seed`` per seed, so its initial weights differ too)
and checked at small layouts with the default suite, once per seed. The layers are meant to be
correct, so a failed check is a false alarm, or a property the layer genuinely lacks: those
are listed in FINDINGS with a written reason (several are bugs upstream, with the issue that
reports them) and printed beside the failures they explain. False alarms layercheck is known
to give still (KNOWN_FALSE_ALARMS, with what is known of them) are counted apart. Anything else
is unexplained, and the script exits 1. ``--larger`` checks every layer again at larger layouts
(B 8x, S 4x, T 8x: 16,8,24,24:BCSS for an image, past the size where the logic checks run on a
sample of the batch).
Libraries that are not installed are named and left out; to install them
beside a CPU torch without pulling another torch:

    pip install --no-deps entmax sparsemax memory-efficient-attention-pytorch einops monai \
        transformers huggingface_hub safetensors tokenizers regex tqdm x-transformers \
        loguru rotary-embedding-torch local-attention hyper-connections vector-quantize-pytorch \
        einx frozendict torch-einops-utils pytorch_wavelets PyWavelets mambapy snntorch norse nir nirtorch \
        h5py spikingjelly performer-pytorch reformer-pytorch axial-positional-embedding revtorch memcnn \
        pytorch-tabnet kornia kornia_rs geotorch nflows conformer axial-attention lambda-networks siren-pytorch \
        nystrom-attention product-key-memory colt5-attention linformer torch_geometric xxhash psutil e3nn \
        opt_einsum opt_einsum_fx ncps gpytorch linear_operator jaxtyping wadler_lindig xlstm packaging \
        torchdiffeq scipy torchsde trampoline roma torch-struct fft-conv-pytorch pytorch-tcn kan-gpt pykan \
        pyro-ppl zuko normflows torch-harmonics peft accelerate torchao segmentation-models-pytorch vit-pytorch \
        neuraloperator tensorly tensorly-torch diffusers ultralytics opencv-python-headless open_clip_torch ftfy \
        wcwidth lightly diffsort julius nnAudio rational-activations qpth cvxpy clarabel highspy osqp qdldl scs \
        sparsediffpy torchdeq torchcde geoopt pypose seaborn torch-dct pytorch-msssim auraloss \
        asteroid-filterbanks geomloss egnn-pytorch En-transformer taylor-series-linear-attention \
        mlp-mixer-pytorch res-mlp-pytorch g-mlp-pytorch soft-moe-pytorch st-moe-pytorch beartype \
        mixture-of-experts Mega-pytorch gated-state-spaces-pytorch h-transformer-1d perceiver-pytorch \
        linear-attention-transformer bidirectional-cross-attention sru torchkbnufft pytorch-crf FrEIA \
        speechbrain hyperpyyaml ruamel.yaml pytorch-metric-learning scikit-learn joblib threadpoolctl narwhals \
        cloudpickle pandas matplotlib cycler fonttools kiwisolver pyparsing python-dateutil six pillow

(timm needs torchvision: ``pip install --no-deps timm torchvision``. The torchvision wheels on
PyPI are built for a CUDA torch; beside a CPU torch their C extension does not load, and
:func:`torchvision_importable` lets their Python import all the same.)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.machinery
import importlib.util
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]  # layercheck, and the catalogue beside

from catalogue.third_party_adapters import Built, _speechbrain, torchvision_importable  # noqa: E402
from catalogue.third_party_findings import FINDINGS, KNOWN_FALSE_ALARMS  # noqa: E402
from catalogue.third_party_layers import LAYERS  # noqa: E402

from layercheck import check_layer  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="initialisations and check seeds per layer (0..N-1)")
    parser.add_argument("--only", help="the layers whose name contains this")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--larger", action="store_true",
                        help="every B dimension 8x, S 4x, T 8x: images then take the checks that run on a sample "
                             "of the batch (a layer that predicts at its own sizes only is left out)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torchvision_importable()
    # torchkbnufft compiles TorchScript functions as it is imported, which fails once torch_geometric.nn has
    # been imported in the process (index_select's dim read as a str): it is imported first
    with contextlib.suppress(ImportError):
        importlib.import_module("torchkbnufft")
    warnings.simplefilter("ignore")
    start = time.perf_counter()
    missing: dict[str, str] = {}
    fixed: list[str] = []  # --larger: layers that predict only at their own sizes
    counts = {"layers": 0, "runs": 0, "passed": 0, "explained": 0, "pending": 0, "unexplained": 0}
    for layer in LAYERS:
        if args.only and args.only not in layer.name:
            continue
        if layer.library.split(".")[0] in missing:
            continue
        try:
            library = _speechbrain(layer.library) if layer.library == "speechbrain" else importlib.import_module(
                layer.library)
        except Exception as exc:  # not installed, or a dependency missing
            missing[layer.library.split(".")[0]] = f"{type(exc).__name__}: {exc}"
            continue
        layouts = tuple(larger(text) for text in layer.layouts) if args.larger else layer.layouts
        call_kwargs = {key: larger(value) if args.larger and isinstance(value, str) else value
                       for key, value in layer.call_kwargs.items()}
        if args.larger and not predicts(layer.make(library), layouts, call_kwargs) and predicts(
                layer.make(library), layer.layouts, layer.call_kwargs):
            fixed.append(layer.name)
            continue
        counts["layers"] += 1
        for seed in range(args.seeds):
            counts["runs"] += 1
            torch.manual_seed(seed)
            try:
                report = run_layer(layer.make(library), layouts, seed=seed, call_kwargs=call_kwargs)
            except Exception as exc:
                print(f"{layer.name} (seed {seed}): setup raised {type(exc).__name__}: {exc}")
                counts["unexplained"] += 1
                continue
            failed = [(f"{r.check}[{r.variant}]" if r.variant else r.check, r.message)
                      for r in report.results if r.status.value in ("failed", "error")]
            # a layer layercheck could not set up (copy, build) has no results: never a pass
            failed += [("setup", run.error) for run in report.runs if run.error]
            if not failed:
                counts["passed"] += 1
                continue
            unexplained = [(check, message) for check, message in failed
                           if (layer.name, check) not in FINDINGS and (layer.name, check) not in KNOWN_FALSE_ALARMS]
            pending = [check for check, _ in failed if (layer.name, check) in KNOWN_FALSE_ALARMS]
            counts["unexplained" if unexplained else "pending" if pending else "explained"] += 1
            for check, message in failed:
                known, alarm = FINDINGS.get((layer.name, check)), KNOWN_FALSE_ALARMS.get((layer.name, check))
                why = (f"explained: {known}" if known else f"FALSE ALARM (fix pending): {alarm}" if alarm
                       else f"UNEXPLAINED: {message[:300]}")
                print(f"{layer.name} (seed {seed}) {check}: {why}")
    print()
    print(f"torch {torch.__version__}; {counts['layers']} layers x {args.seeds} seeds = {counts['runs']} runs: "
          f"{counts['passed']} pass every default check, {counts['explained']} fail with a written reason, "
          f"{counts['pending']} known false alarms (fix pending), {counts['unexplained']} unexplained "
          f"({time.perf_counter() - start:.0f} s)")
    for library, why in missing.items():
        print(f"left out: {library} ({why.splitlines()[0][:120]})")
    if fixed:
        print(f"left out at the larger sizes ({len(fixed)}, they predict only at their own): {', '.join(fixed)}")
    return 1 if counts["unexplained"] else 0


def run_layer(layer: nn.Module | Built, layouts: tuple[str, ...], **options: Any) -> Any:
    if isinstance(layer, Built):
        return check_layer(layer.cls, *layouts, kwargs=layer.kwargs, **options)
    return check_layer(layer, *layouts, **options)


def predicts(layer: nn.Module | Built, layouts: tuple[str, ...], call_kwargs: dict[str, Any]) -> bool:
    """Whether layercheck's predict_runs passes the layer at these layouts."""
    torch.manual_seed(0)
    trial = run_layer(layer, layouts, checks=["predict_runs"], call_kwargs=call_kwargs)
    return all(r.status.value == "passed" for r in trial.results) and not any(run.error for run in trial.runs)


def larger(text: str) -> str:
    """A layout with its B dimension 8 times, each S 4 times and T 8 times as large
    (``2,5,8:BTC dtype=...`` -> ``16,40,8:BTC dtype=...``)."""
    head, _, qualifiers = text.partition(" ")
    sizes, _, dims = head.partition(":")
    grown = [int(n) * {"B": 8, "S": 4, "T": 8}.get(d, 1) for n, d in zip(sizes.split(","), dims)]
    return f"{','.join(map(str, grown))}:{dims}" + (f" {qualifiers}" if qualifiers else "")


if __name__ == "__main__":
    sys.exit(main())

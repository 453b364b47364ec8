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
import inspect
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from layercheck import check_layer  # noqa: E402

IMAGE, SEQUENCE, VECTOR = "2,8,6,6:BCSS", "2,5,8:BTC", "4,7:BC"
RGB = "2,3,8,8:BCSS values=0:1"  # an image in [0, 1]
IMAGE8 = "2,8,8,8:BCSS"
SPHERE = "2,3,8,16:BCSS"  # an equiangular grid of 8 latitudes and 16 longitudes
_FOURIER_IMAGE = "2,4,8,8:BCSS"
SEQUENCE8, _TEMB = "2,6,8:BTC", "2,16:BC"  # diffusers' token sequences and time embeddings
VECTOR8 = "4,8:BC"
_METRIC = ("8,6:BC", "8:B dtype=int64 values=0:3")  # embeddings and their labels (three classes)
_GREY16, _GREY32 = "2,1,16,16:BCSS", "2,1,32,32:BCSS"  # MONAI's whole networks
_DINO = {"input_dim": 8, "hidden_dim": 16, "bottleneck_dim": 4, "output_dim": 6}
_AUDIO, _WAVE, _WAVE1024 = "2,1,64:BCT", "2,256:BT", "2,1024:BT"  # julius's and nnAudio's signals
_DEQ_INPUT = "4,6:BC"
_TOKENS = "2,8,16:BTC"


def torchvision_importable() -> None:
    """Let torchvision's Python import where its C extension cannot load (a wheel built for a
    CUDA torch beside a CPU one): its import registers fake kernels for two operators the
    extension defines, and fails when they do not exist. Defining their schemas (nothing here
    calls them) is enough for timm's layers, which need torchvision's FrozenBatchNorm2d only."""
    try:
        import torchvision  # noqa: F401
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc):
            raise
        for name in [name for name in sys.modules if name.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        schemas = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            schemas.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _KEPT.append(schemas)  # a Library's definitions last as long as the object
    except ImportError:
        return


_KEPT: list[Any] = []


@contextlib.contextmanager
def _without_torchaudio() -> Iterator[None]:
    """A stand-in torchaudio while speechbrain's modules import, where torchaudio is not installed (its C
    extension, built for another torch, does not load beside this one: the install line leaves it out).
    SpeechBrain's package imports it to read its version, and some modules for features the layers here do
    not use. Taken away after, so that other libraries still find no torchaudio."""
    if "torchaudio" in sys.modules or importlib.util.find_spec("torchaudio") is not None:
        yield
        return
    stand_in = types.ModuleType("torchaudio")
    stand_in.__version__ = "2.11.0"  # type: ignore[attr-defined]
    stand_in.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
    sys.modules["torchaudio"] = stand_in
    try:
        yield
    finally:
        sys.modules.pop("torchaudio", None)


def _speechbrain(module: str) -> Any:
    with _without_torchaudio():
        return importlib.import_module(module)


@dataclass(frozen=True)
class Built:
    """A layer handed to layercheck as its class and keyword arguments, not as an instance: one
    that cannot be deep-copied (the copy check then says so instead of the run's setup)."""

    cls: type
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Layer:
    name: str
    library: str  # the module that must import for the layer to be checked
    make: Callable[[Any], nn.Module | Built]  # given the imported module
    layouts: tuple[str, ...]
    call_kwargs: dict[str, Any] = field(default_factory=dict)  # as check_layer's: a layout string is a tensor


class _Flow(nn.Module):
    """A normalising-flow transform as a layer: its output and the log-determinant of its Jacobian
    (Pyro's transforms compute that from the pair; normflows' flows return both)."""

    def __init__(self, transform: nn.Module, pyro: bool = False) -> None:
        super().__init__()
        self.transform = transform
        self.pyro = pyro

    def forward(self, x: torch.Tensor) -> Any:
        out = self.transform(x)
        return (out, self.transform.log_abs_det_jacobian(x, out)) if self.pyro else out


class _Sample(nn.Module):
    """A diffusers model, whose forward returns an output dataclass, as a layer: its sample."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.model(*args).sample


class _XSoftmax(nn.Module):
    """SEW-D's masked softmax Function over the last dimension, the mask an input."""

    def __init__(self, function: type) -> None:
        super().__init__()
        self.function = function

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.function.apply(x, mask, -1)


def _rglru(m: Any) -> nn.Module:
    """RecurrentGemma's RG-LRU at width 8, two heads, its parameters drawn (the model's own
    initialisation lives in its PreTrainedModel)."""
    layer = m.RecurrentGemmaRglru(m.RecurrentGemmaConfig(hidden_size=8, lru_width=8, num_attention_heads=2))
    for p, std in ((layer.recurrent_param, 1.0), (layer.input_gate_weight, 0.5), (layer.recurrent_gate_weight, 0.5),
                   (layer.input_gate_bias, 0.1), (layer.recurrent_gate_bias, 0.1)):
        nn.init.normal_(p, 0, std)
    return layer


def _phimoe(m: Any) -> nn.Module:
    """PhiMoE's sparse mixture of experts (top-2 of 4), its parameters drawn."""
    layer = m.PhimoeSparseMoeBlock(m.PhimoeConfig(hidden_size=8, intermediate_size=12, num_local_experts=4,
                                                  num_experts_per_tok=2, input_jitter_noise=0.0,
                                                  router_jitter_noise=0.01))
    for p in layer.parameters():
        nn.init.normal_(p, 0, 0.5)
    return layer


class _LogProb(nn.Module):
    """A zuko flow (a module that builds a distribution) as a layer: the log-density of its input."""

    def __init__(self, flow: nn.Module) -> None:
        super().__init__()
        self.flow = flow

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.flow().log_prob(x)


class _OptNet(nn.Module):
    """OptNet's layer on qpth: argmin_z 1/2 z'Qz + p'z subject to Gz <= h, the input p, and Q
    (= LL' + I/10), G and h (= G z0 + s0, feasible) learned, shared by the batch."""

    def __init__(self, qp: Any, n: int = 5, m: int = 4) -> None:
        super().__init__()
        self.function = qp.QPFunction
        self.L = nn.Parameter(torch.randn(n, n) * 0.3 + torch.eye(n))
        self.G = nn.Parameter(torch.randn(m, n))
        self.z0 = nn.Parameter(torch.zeros(n))
        self.s0 = nn.Parameter(torch.ones(m))

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        q = self.L @ self.L.t() + 0.1 * torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
        e = torch.empty(0, dtype=p.dtype, device=p.device)
        return self.function(verbose=-1)(q, p, self.G, self.G @ self.z0 + self.s0, e, e)


class _DEQ(nn.Module):
    """A deep equilibrium layer on torchdeq: the fixed point of z = tanh(Wz + Ux), W contracting."""

    def __init__(self, torchdeq: Any, **config: Any) -> None:
        super().__init__()
        self.W, self.U = nn.Linear(6, 6, bias=False), nn.Linear(6, 6)
        with torch.no_grad():
            self.W.weight.mul_(0.3)
        self.deq = torchdeq.get_deq(**config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z, _ = self.deq(lambda z: torch.tanh(self.W(z) + self.U(x)), torch.zeros_like(x))
        return z[-1]


class _CDEField(nn.Module):
    def __init__(self, hidden: int, channels: int) -> None:
        super().__init__()
        self.hidden, self.channels = hidden, channels
        self.net = nn.Sequential(nn.Linear(hidden, 8), nn.Tanh(), nn.Linear(8, hidden * channels))

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.net(z).view(*z.shape[:-1], self.hidden, self.channels)


class _NeuralCDE(nn.Module):
    """A neural controlled differential equation on torchcde (its README's model): the input
    series interpolated, the hidden state integrated along it with RK4, the last state out."""

    def __init__(self, torchcde: Any, *, cubic: bool = True, adjoint: bool = False) -> None:
        super().__init__()
        # the library's functions, not the module: a module attribute cannot be deep-copied
        self.coefficients, self.path = ((torchcde.hermite_cubic_coefficients_with_backward_differences,
                                         torchcde.CubicSpline) if cubic
                                        else (torchcde.linear_interpolation_coeffs, torchcde.LinearInterpolation))
        self.cdeint, self.adjoint = torchcde.cdeint, adjoint
        self.initial, self.field = nn.Linear(3, 4), _CDEField(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        coeffs = self.coefficients(x)
        path = self.path(coeffs)
        z0 = self.initial(path.evaluate(path.interval[0]))
        # with the adjoint, the gradient reaches the input through the coefficients only if they are named
        adjoint = {"adjoint_params": (coeffs, *self.field.parameters())} if self.adjoint else {}
        return self.cdeint(X=path, func=self.field, z0=z0, t=path.interval, adjoint=self.adjoint, method="rk4",
                           options={"step_size": 0.25}, **adjoint)[:, -1]


class _LieChain(nn.Module):
    """PyPose's hand-written Lie group Functions chained from Lie algebra vectors r1, r2 and points
    p to points and algebra vectors: X = Exp(r1) Exp(r2)^-1, then X acting on p (as 3- and
    4-vectors), Log(X) and Adj(X) r2."""

    def __init__(self, operation: Any, group: str, algebra: str) -> None:
        super().__init__()
        self.exp = getattr(operation, f"{algebra}_Exp").apply
        self.mul, self.inv, self.act, self.act4, self.log, self.adj = (
            getattr(operation, f"{group}_{op}").apply for op in ("Mul", "Inv", "Act", "Act4", "Log", "AdjXa"))

    def forward(self, r1: torch.Tensor, r2: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.mul(self.exp(r1), self.inv(self.exp(r2)))
        return (self.act(x, p), self.log(x), self.adj(x, r2),
                self.act4(x, torch.cat([p, torch.ones_like(p[..., :1])], -1)))


class _LieOp(nn.Module):
    """One PyPose Lie group operation on plain tensors: the exponential of an so(3) vector (a
    quaternion out), the logarithm of a unit quaternion, or a rotation by a learned so(3) vector."""

    def __init__(self, pypose: Any, op: str) -> None:
        super().__init__()
        self.algebra, self.group, self.op = pypose.so3, pypose.SO3, op
        self.r = nn.Parameter(torch.randn(3)) if op == "rotate" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.op == "Exp":
            return self.algebra(x).Exp().tensor()
        if self.op == "Log":
            return self.group(x / x.norm(dim=-1, keepdim=True)).Log().tensor()
        return self.algebra(self.r).Exp().Act(x)


class _EncoderDecoder(nn.Module):
    """asteroid-filterbanks' encoder and decoder of one filterbank, through each other."""

    def __init__(self, filterbanks: Any, kind: str, **kwargs: Any) -> None:
        super().__init__()
        self.encoder, self.decoder = filterbanks.make_enc_dec(kind, n_filters=16, kernel_size=16, stride=8, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


class _Part(nn.Module):
    """A layer whose call returns its output as an attribute of what it returns (``key``; None:
    it returns the output), or takes its inputs after the first as the keywords ``names``. (A
    tuple's first element: ``_Output``.)"""

    def __init__(self, layer: nn.Module, key: str | None, names: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.layer, self.key, self.names = layer, key, names

    def forward(self, x: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
        out = self.layer(x, **dict(zip(self.names, others))) if self.names else self.layer(x, *others)
        return out if self.key is None else getattr(out, self.key)


class _NUFFT(nn.Module):
    """torchkbnufft's non-uniform FFT of a 2-d image (or its adjoint, of k-space samples) at 12
    k-space points, complex data as real and imaginary parts in a last dimension of two (layercheck
    draws real inputs); the trajectory a buffer, or a parameter (``learned``)."""

    def __init__(self, tkbn: Any, adjoint: bool = False, learned: bool = False) -> None:
        super().__init__()
        self.op = (tkbn.KbNufftAdjoint if adjoint else tkbn.KbNufft)(im_size=(8, 8))
        omega = torch.linspace(-3.0, 3.0, 24).view(2, 12)
        if learned:
            self.omega = nn.Parameter(omega)
        else:
            self.register_buffer("omega", omega)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.view_as_real(self.op(torch.view_as_complex(x.contiguous()), self.omega))


def _freia_subnet(c_in: int, c_out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(c_in, 8), nn.ReLU(), nn.Linear(8, c_out))


class _INN(nn.Module):
    """FrEIA's invertible network of two blocks of a kind on 6 features: its output and the
    log-determinant of its Jacobian."""

    def __init__(self, modules: Any, block: str) -> None:
        super().__init__()
        framework = importlib.import_module("FrEIA.framework")
        self.inn = framework.SequenceINN(6)
        for _ in range(2):
            self.inn.append(getattr(modules, block), subnet_constructor=_freia_subnet)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inn(x)


def _pyro(build: Callable[[Any, Any], nn.Module]) -> Callable[[Any], nn.Module]:
    def make(transforms: Any) -> nn.Module:
        return _Flow(build(transforms, importlib.import_module("pyro.nn")), pyro=True)
    return make


class _LearnedAlphaEntmax(nn.Module):
    def __init__(self, entmax: Any) -> None:
        super().__init__()
        self.bisect = entmax.entmax_bisect  # the function: a module attribute cannot be deep-copied
        self.alpha = nn.Parameter(torch.tensor(1.3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bisect(x, self.alpha, dim=-1)


class _Complex(nn.Module):
    """A layer that takes a complex tensor (an inverse spherical-harmonic transform) on a real
    one whose last dimension holds the real and imaginary parts: layercheck draws real inputs."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(torch.complex(x[..., 0], x[..., 1]))


class _Realised(nn.Module):
    """A layer with a complex output (a spherical-harmonic transform) as a real one: the
    real and imaginary parts stacked in a last dimension."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.view_as_real(self.layer(x))


class _Rotary(nn.Module):
    """rotary-embedding-torch's RotaryEmbedding as its attention uses it: queries and keys of
    shape (batch, heads, sequence, head dim) rotated; with xpos both at once (their scales are
    reciprocal). Built here from keyword arguments, so that layercheck gets the class."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        from rotary_embedding_torch import RotaryEmbedding
        self.rotary = RotaryEmbedding(8, **kwargs)

    def forward(self, q: torch.Tensor, k: torch.Tensor | None = None) -> Any:
        if k is None:
            return self.rotary.rotate_queries_or_keys(q)
        return self.rotary.rotate_queries_and_keys(q, k)


class _LocalAttention(nn.Module):
    """local-attention's LocalAttention: queries, keys and values of shape (batch, heads,
    sequence, head dim) attended within windows."""

    def __init__(self, local_attention: Any, **kwargs: Any) -> None:
        super().__init__()
        self.attention = local_attention.LocalAttention(window_size=2, dim=4, **kwargs)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.attention(q, k, v)


class _HyperConnections(nn.Module):
    """hyper-connections around a linear branch, as its README wires a block: the residual
    stream expanded into two, the hyper-connection (static and dynamic mixing of the streams
    around the branch), the streams reduced back."""

    def __init__(self, hyper_connections: Any, constrained: bool = False, **kwargs: Any) -> None:
        super().__init__()
        make = (hyper_connections.mc_get_init_and_expand_reduce_stream_functions if constrained
                else hyper_connections.get_init_and_expand_reduce_stream_functions)
        init, self.expand, self.reduce = make(2, **kwargs)
        self.block = init(dim=8, branch=nn.Linear(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.reduce(self.block(self.expand(x)))


class _SnnTorchLoop(nn.Module):
    """snntorch's Leaky as its tutorials run it: a linear layer, then the neuron over the time
    steps of a sequence from a state reset at its start; spikes and membrane potentials out."""

    def __init__(self, snntorch: Any, features: int = 8, **kwargs: Any) -> None:
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.lif = snntorch.Leaky(**kwargs)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mem = self.lif.reset_mem()
        spikes, potentials = [], []
        for t in range(x.shape[1]):
            spike, mem = self.lif(self.fc(x[:, t]), mem)
            spikes.append(spike)
            potentials.append(mem)
        return torch.stack(spikes, 1), torch.stack(potentials, 1)


def _spikingjelly(make: Callable[[Any, Any], nn.Module]) -> Callable[[Any], nn.Module]:
    def build(neuron: Any) -> nn.Module:
        return make(neuron, importlib.import_module("spikingjelly.activation_based.surrogate"))
    return build


class _Dense(nn.Module):
    """A gpytorch kernel as a layer: the dense covariance matrix of its input points."""

    def __init__(self, kernel: nn.Module) -> None:
        super().__init__()
        self.kernel = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernel(x).to_dense()


class _Output(nn.Module):
    """A layer that returns a tuple (a recurrent layer's output and final state), as its first element alone
    (one that returns a tensor, as it is: Hugging Face's blocks return either, by version)."""

    def __init__(self, layer: nn.Module, **keywords: Any) -> None:
        super().__init__()
        self.layer = layer
        self.keywords = keywords  # passed on each call (attention_mask=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x, **self.keywords)
        return out if isinstance(out, torch.Tensor) else out[0]


def _constrained(geotorch: Any, constraint: str) -> nn.Module:
    layer = nn.Linear(7, 7 if constraint != "sphere" else 5)
    getattr(geotorch, constraint)(layer, "weight")
    return layer


def _hf(module: str, build: Callable[[Any], nn.Module]) -> Callable[[Any], nn.Module]:
    def make(transformers: Any) -> nn.Module:
        return build(importlib.import_module(f"transformers.models.{module}"))
    return make


def _llama_config(transformers: Any) -> Any:
    return transformers.LlamaConfig(hidden_size=8, intermediate_size=16, num_attention_heads=2,
                                    num_key_value_heads=1, num_hidden_layers=1, vocab_size=10)


_DECODERS = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "gemma": "Gemma", "phi3": "Phi3"}


def _moe(family: str, block: str, config: str, **kwargs: Any) -> Callable[[Any], nn.Module]:
    """A Hugging Face sparse mixture-of-experts block alone. Its experts' weights are made with
    torch.empty and left to the model's initialisation: drawn here as the model draws them
    (normal, std 0.02)."""

    def make(transformers: Any) -> nn.Module:
        module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        layer = getattr(module, block)(getattr(transformers, config)(hidden_size=16, **kwargs))
        with torch.no_grad():
            for parameter in layer.parameters():
                parameter.normal_(0.0, 0.02)
        return _Output(layer)
    return make


_MOES = {  # four experts, two per token; names as the library spells them
    "MixtralSparseMoeBlock (top-2 of 4 experts)": _moe(
        "mixtral", "MixtralSparseMoeBlock", "MixtralConfig", intermediate_size=32, num_local_experts=4,
        num_experts_per_tok=2),
    "Qwen2MoeSparseMoeBlock (shared expert)": _moe(
        "qwen2_moe", "Qwen2MoeSparseMoeBlock", "Qwen2MoeConfig", moe_intermediate_size=8,
        shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=2),
    "Qwen3MoeSparseMoeBlock": _moe(
        "qwen3_moe", "Qwen3MoeSparseMoeBlock", "Qwen3MoeConfig", moe_intermediate_size=8, num_experts=4,
        num_experts_per_tok=2),
    "OlmoeSparseMoeBlock": _moe(
        "olmoe", "OlmoeSparseMoeBlock", "OlmoeConfig", intermediate_size=8, num_experts=4, num_experts_per_tok=2),
    "DeepseekV3MoE (grouped routing, shared expert)": _moe(
        "deepseek_v3", "DeepseekV3MoE", "DeepseekV3Config", moe_intermediate_size=8, n_routed_experts=4,
        num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1),
    "GraniteMoeMoE": _moe(
        "granitemoe", "GraniteMoeMoE", "GraniteMoeConfig", intermediate_size=8, num_local_experts=4,
        num_experts_per_tok=2),
}


def _rotary(rope_scaling: dict[str, Any] | None = None) -> Callable[[Any], nn.Module]:
    """Llama's rotary table (cos and sin of the positions times its frequencies; the hidden
    states read for their dtype and device only), with a RoPE scaling of the config's."""

    def make(transformers: Any) -> nn.Module:
        module = importlib.import_module("transformers.models.llama.modeling_llama")
        extra = {} if rope_scaling is None else {"rope_scaling": rope_scaling}
        return module.LlamaRotaryEmbedding(transformers.LlamaConfig(
            hidden_size=16, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32, **extra))
    return make


class _Decoder(nn.Module):
    """A Hugging Face decoder layer as its model runs it: rotary position embeddings from the
    model's own module, a causal additive mask, no cache; the hidden states out."""

    def __init__(self, transformers: Any, family: str, attention: str = "eager") -> None:
        super().__init__()
        prefix = _DECODERS[family]
        module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        config = getattr(transformers, f"{prefix}Config")(
            hidden_size=16, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=4,
            num_hidden_layers=1, vocab_size=10, max_position_embeddings=64)
        config._attn_implementation = attention
        self.layer = getattr(module, f"{prefix}DecoderLayer")(config, 0)
        self.rotary = getattr(module, f"{prefix}RotaryEmbedding")(config=config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
        steps = x.shape[1]
        mask = torch.full((steps, steps), float("-inf"), dtype=x.dtype, device=x.device).triu(1)[None, None]
        out = self.layer(x, attention_mask=mask, position_ids=positions,
                         position_embeddings=self.rotary(x, positions))
        return out[0] if isinstance(out, tuple) else out


class _Function(nn.Module):
    """A function of the input (roma's mappings) as a layer without parameters."""

    def __init__(self, function: Callable[..., torch.Tensor], **kwargs: Any) -> None:
        super().__init__()
        self.function = function
        self.kwargs = kwargs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.function(x, **self.kwargs)


def _slstm_config(xlstm: Any) -> Any:
    return xlstm.sLSTMLayerConfig(embedding_dim=8, num_heads=2, conv1d_kernel_size=2, backend="vanilla")


def _mlstm_config(xlstm: Any) -> Any:
    return xlstm.mLSTMLayerConfig(embedding_dim=8, num_heads=2, conv1d_kernel_size=2, qkv_proj_blocksize=4,
                                  context_length=5)


def _xlstm_stack(xlstm: Any) -> nn.Module:
    return xlstm.xLSTMBlockStack(xlstm.xLSTMBlockStackConfig(
        mlstm_block=xlstm.mLSTMBlockConfig(mlstm=xlstm.mLSTMLayerConfig(conv1d_kernel_size=2, qkv_proj_blocksize=4,
                                                                       num_heads=2)),
        slstm_block=xlstm.sLSTMBlockConfig(
            slstm=xlstm.sLSTMLayerConfig(backend="vanilla", num_heads=2, conv1d_kernel_size=2),
            feedforward=xlstm.FeedForwardConfig(proj_factor=1.5, act_fn="gelu")),
        context_length=5, num_blocks=2, embedding_dim=8, slstm_at=[1]))


class _Dynamics(nn.Module):
    """The right-hand side f(t, y) of a neural ODE: a small MLP of the state."""

    def __init__(self, features: int = 7, hidden: int = 8) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, features))

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(y)


class _ODEBlock(nn.Module):
    """A neural-ODE block: the state at t=1 of dy/dt = f(y), y(0) = x."""

    def __init__(self, torchdiffeq: Any, adjoint: bool = False, **solver: Any) -> None:
        super().__init__()
        self.func = _Dynamics()
        self.solve = torchdiffeq.odeint_adjoint if adjoint else torchdiffeq.odeint
        self.solver = solver

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.tensor([0.0, 1.0], dtype=x.dtype, device=x.device)
        return self.solve(self.func, x, t, **self.solver)[-1]


class _EventDynamics(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rate = nn.Linear(3, 1)
        self.rest = nn.Linear(3, 2)

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([1.0 + torch.sigmoid(self.rate(y)), torch.tanh(self.rest(y))], -1)


class _ODEEvent(nn.Module):
    """torchdiffeq's odeint_event: the time y[0] reaches 2 (it grows at a rate of at least 1 from
    tanh(x)[0] < 1) and the state then, for one state vector (the event is shared by a whole batch)."""

    def __init__(self, torchdiffeq: Any) -> None:
        super().__init__()
        self.func = _EventDynamics()
        self.odeint_event = torchdiffeq.odeint_event  # the function: the module cannot be deep-copied

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        event_t, solution = self.odeint_event(self.func, torch.tanh(x), torch.tensor(0.0, dtype=x.dtype),
                                              event_fn=lambda t, y: y[0] - 2.0, method="dopri5", rtol=1e-8,
                                              atol=1e-8)
        return torch.cat([event_t.reshape(1), solution[-1]])


class _CommonNoise:
    """A Brownian motion whose every row is one fixed path (so the solve is a deterministic function of the input,
    the same for an observation alone as in a batch): a BrownianInterval of size (1, C), expanded."""

    levy_area_approximation = "none"

    def __init__(self, brownian: Any, batch: int, channels: int, dtype: torch.dtype, device: torch.device) -> None:
        self.bm = brownian(t0=0.0, t1=1.0, size=(1, channels), dtype=dtype, device=device, entropy=1234,
                           levy_area_approximation="none")
        self.shape = (batch, channels)
        self.dtype, self.device = dtype, device

    def __call__(self, ta: Any, tb: Any = None, return_U: bool = False, return_A: bool = False) -> torch.Tensor:
        return self.bm(ta, tb).expand(self.shape)


class _SDE(nn.Module):
    """An SDE with diagonal noise: an MLP drift, and a diffusion whose g_i depends on y_i alone (torchsde's contract
    for noise_type="diagonal")."""

    noise_type = "diagonal"

    def __init__(self, features: int = 7, sde_type: str = "ito") -> None:
        super().__init__()
        self.sde_type = sde_type
        self.drift = nn.Sequential(nn.Linear(features, 8), nn.Tanh(), nn.Linear(8, features))
        self.diffusion_scale = nn.Parameter(torch.randn(features))
        self.diffusion_shift = nn.Parameter(torch.randn(features))

    def f(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.drift(y)

    def g(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 0.3 * torch.sigmoid(self.diffusion_scale * y + self.diffusion_shift)


class _SDEBlock(nn.Module):
    """A neural SDE solved along a fixed Brownian path (common to the batch): the state at t=1."""

    def __init__(self, torchsde: Any, adjoint: bool = False, method: str = "euler", sde_type: str = "ito",
                 **solver: Any) -> None:
        super().__init__()
        self.sde = _SDE(sde_type=sde_type)
        self.brownian = torchsde.BrownianInterval  # the class: the module itself cannot be deep-copied
        self.solve = torchsde.sdeint_adjoint if adjoint else torchsde.sdeint
        self.method = method
        self.solver = solver

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ts = torch.tensor([0.0, 1.0], dtype=x.dtype, device=x.device)
        bm = _CommonNoise(self.brownian, x.shape[0], x.shape[1], x.dtype, x.device)
        return self.solve(self.sde, x, ts, bm=bm, method=self.method, dt=0.125, **self.solver)[-1]


class _StructDistribution(nn.Module):
    """A torch_struct distribution of the input log-potentials as a layer: its log partition and marginals."""

    def __init__(self, torch_struct: Any, name: str) -> None:
        super().__init__()
        self.distribution = getattr(torch_struct, name)

    def forward(self, log_potentials: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        distribution = self.distribution(log_potentials)
        return distribution.partition, distribution.marginals


class _SemiringSum(nn.Module):
    """A torch_struct structure's sum (log partition) under a semiring with a hand-written Function."""

    def __init__(self, struct: Any) -> None:
        super().__init__()
        self.struct = struct

    def forward(self, log_potentials: torch.Tensor) -> torch.Tensor:
        return self.struct.sum(log_potentials)


def _pykan(kan: Any) -> nn.Module:
    # KAN seeds torch itself (seed=1 by default): give it the run's seed; auto_save=False, or it writes ./model
    return kan.KAN([4, 3, 2], grid=3, k=3, seed=torch.initial_seed(), auto_save=False)


def _kan_gpt_attention(efficient_kan: Any) -> nn.Module:
    model = importlib.import_module("kan_gpt.model")
    config = model.GPT.get_default_config()
    config.merge_from_dict({"n_embd": 8, "n_head": 2, "block_size": 5, "attn_pdrop": 0.1, "resid_pdrop": 0.1,
                            "kan_implementation": "EFFICIENT_KAN"})
    return model.CausalSelfAttention(config)


def _qat(module: str, name: str, quantization: Any, *args: Any) -> nn.Module:
    layer: nn.Module = getattr(importlib.import_module(module), name)(
        *args, qconfig=quantization.get_default_qat_qconfig("fbgemm"))
    return layer


def _prepared_qat(quantization: Any) -> nn.Module:
    """A convolution and a ReLU between quantisation stubs, prepared for quantisation-aware training."""
    model = nn.Sequential(quantization.QuantStub(), nn.Conv2d(8, 4, 3), nn.ReLU(), quantization.DeQuantStub())
    model.qconfig = quantization.get_default_qat_qconfig("fbgemm")
    return quantization.prepare_qat(model.train())


_PEFT_BASES: dict[str, Callable[[], nn.Module]] = {
    "an MLP": lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)),
    "a CNN": lambda: nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1)),
}
_PEFT_LAYOUTS = {"an MLP": "4,8:BC", "a CNN": IMAGE}
_VIT_IMAGE = "2,3,16,16:BCSS"


def _shown(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in kwargs.items())


def _vit(module: str, cls: str, **extra: Any) -> nn.Module:
    """A vit-pytorch model with one block of width 16 for 16x16 images in patches of 4."""
    made = getattr(importlib.import_module(f"vit_pytorch.{module}"), cls)
    common = {"image_size": 16, "patch_size": 4, "num_classes": 5, "dim": 16, "depth": 1, "heads": 2,
              "mlp_dim": 16, "dim_head": 8, "channels": 3}
    accepted = inspect.signature(made.__init__).parameters
    layer: nn.Module = made(**{key: value for key, value in common.items() if key in accepted} | extra)
    return layer


LAYERS = [
    Layer("entmax Sparsemax", "entmax", lambda m: m.Sparsemax(dim=-1), (VECTOR,)),
    Layer("entmax Entmax15", "entmax", lambda m: m.Entmax15(dim=-1), (VECTOR,)),
    Layer("entmax EntmaxBisect", "entmax", lambda m: m.EntmaxBisect(alpha=1.4, dim=-1), (VECTOR,)),
    Layer("entmax entmax_bisect, learned alpha", "entmax", _LearnedAlphaEntmax, (VECTOR,)),
    Layer("entmax SparsemaxLoss", "entmax", lambda m: m.SparsemaxLoss(reduction="sum"),
          (VECTOR, "4:B dtype=int64 values=0:7")),
    Layer("entmax Entmax15Loss", "entmax", lambda m: m.Entmax15Loss(reduction="elementwise_mean"),
          (VECTOR, "4:B dtype=int64 values=0:7")),
    Layer("sparsemax Sparsemax", "sparsemax", lambda m: m.Sparsemax(dim=-1), (VECTOR,)),
    *[Layer(f"memory-efficient-attention {name}", "memory_efficient_attention_pytorch",
            lambda m, make=make: make(m), (SEQUENCE,)) for name, make in (
        ("FlashAttention", lambda m: m.FlashAttention(dim=8, heads=2, dim_head=4, q_bucket_size=3,
                                                      k_bucket_size=4)),
        ("FlashAttention causal", lambda m: m.FlashAttention(dim=8, heads=2, dim_head=4, causal=True,
                                                             q_bucket_size=3, k_bucket_size=4)),
        ("CosineSimFlashAttention", lambda m: importlib.import_module(
            "memory_efficient_attention_pytorch.cosine_sim_flash_attention").FlashAttention(
                dim=8, heads=2, dim_head=4, q_bucket_size=3, k_bucket_size=4)),
        ("Attention, memory efficient", lambda m: m.Attention(dim=8, heads=2, dim_head=4, memory_efficient=True,
                                                              q_bucket_size=3, k_bucket_size=4)))],
    Layer("einops Rearrange", "einops.layers.torch", lambda m: m.Rearrange("b c h w -> b (h w) c"), (IMAGE,)),
    Layer("einops Reduce", "einops.layers.torch", lambda m: m.Reduce("b c h w -> b c", "max"), (IMAGE,)),
    Layer("einops EinMix", "einops.layers.torch",
          lambda m: m.EinMix("b t c -> b t d", weight_shape="c d", bias_shape="d", c=8, d=5), (SEQUENCE,)),
    *[Layer(f"monai {name}", "monai.networks.blocks", make, (layout,)) for name, make, layout in (
        ("Swish", lambda m: m.activation.Swish(), IMAGE),
        ("MemoryEfficientSwish", lambda m: m.activation.MemoryEfficientSwish(), IMAGE),
        ("Mish", lambda m: m.activation.Mish(), IMAGE),
        ("Convolution", lambda m: m.Convolution(2, 8, 4, kernel_size=3, norm="batch", act="prelu"), IMAGE),
        ("ResidualUnit", lambda m: m.ResidualUnit(2, 8, 4, norm="instance"), IMAGE),
        ("ChannelSELayer", lambda m: m.ChannelSELayer(2, 8), IMAGE),
        ("SABlock", lambda m: m.SABlock(8, 2), SEQUENCE),
        ("TransformerBlock", lambda m: m.TransformerBlock(8, 16, 2), SEQUENCE),
        ("MLPBlock", lambda m: m.MLPBlock(8, 16), SEQUENCE),
        ("UnetResBlock", lambda m: m.UnetResBlock(2, 8, 4, 3, 1, norm_name="instance"), IMAGE),
        ("UnetBasicBlock", lambda m: m.UnetBasicBlock(2, 8, 4, 3, 1, norm_name="batch"), IMAGE),
        ("SimpleASPP", lambda m: m.SimpleASPP(2, 8, 2), IMAGE),
        ("ResidualSELayer", lambda m: m.ResidualSELayer(2, 8), IMAGE),
        ("CrossAttentionBlock", lambda m: m.CrossAttentionBlock(8, 2), SEQUENCE),
        ("UpSample", lambda m: m.UpSample(2, 8, 3, scale_factor=2, mode="deconv"), IMAGE),
        ("SubpixelUpsample", lambda m: m.SubpixelUpsample(2, 8, 3, scale_factor=2), IMAGE),
        ("ADN", lambda m: m.ADN(ordering="NDA", in_channels=8, act="prelu", norm="batch", norm_dim=2, dropout=0.1),
         IMAGE),
        ("ConvDenseBlock", lambda m: m.ConvDenseBlock(2, 8, (4, 4)), IMAGE),
        ("DownSample", lambda m: m.DownSample(2, 8, 8, scale_factor=2, mode="conv"), IMAGE),
        ("FactorizedIncreaseBlock", lambda m: m.FactorizedIncreaseBlock(8, 8, spatial_dims=2), IMAGE),
        ("FactorizedReduceBlock", lambda m: m.FactorizedReduceBlock(8, 8, spatial_dims=2), IMAGE),
        ("GCN", lambda m: m.GCN(8, 4, 3), IMAGE),
        ("Refine", lambda m: m.Refine(8), IMAGE),
        ("GEGLU", lambda m: m.GEGLU(), SEQUENCE),
        ("LocalNetFeatureExtractorBlock", lambda m: m.LocalNetFeatureExtractorBlock(2, 8, 8), IMAGE),
        ("MaxAvgPool", lambda m: m.MaxAvgPool(2, 2), IMAGE),
        ("MedNeXtBlock", lambda m: m.MedNeXtBlock(8, 8, dim="2d"), IMAGE),
        ("MedNeXtDownBlock", lambda m: m.MedNeXtDownBlock(8, 16, dim="2d"), IMAGE),
        ("MedNeXtUpBlock", lambda m: m.MedNeXtUpBlock(8, 4, dim="2d"), IMAGE),
        ("PatchEmbed", lambda m: m.PatchEmbed(patch_size=2, in_chans=8, embed_dim=8, spatial_dims=2), IMAGE),
        ("RegistrationResidualConvBlock", lambda m: m.RegistrationResidualConvBlock(2, 8, 8, num_layers=2), IMAGE),
        ("ResBlock", lambda m: m.ResBlock(2, 8, norm=("group", {"num_groups": 4})), IMAGE),
        ("SEResNetBottleneck", lambda m: m.SEResNetBottleneck(2, 8, 2, groups=1, reduction=2), IMAGE),
        ("SEResNeXtBottleneck", lambda m: m.SEResNeXtBottleneck(2, 8, 2, groups=2, reduction=2, base_width=64),
         IMAGE),
        ("SpatialAttentionBlock", lambda m: m.SpatialAttentionBlock(2, 8, num_head_channels=4, norm_num_groups=4),
         IMAGE),
        ("SubpixelDownsample", lambda m: m.SubpixelDownsample(2, 8, 2), IMAGE),
        ("UnetOutBlock", lambda m: m.UnetOutBlock(2, 8, 3), IMAGE),
        ("UnetrBasicBlock", lambda m: m.UnetrBasicBlock(2, 8, 4, 3, 1, "instance", res_block=True), IMAGE),
        ("DVF2DDF", lambda m: m.DVF2DDF(num_steps=3), "2,2,8,8:BCSS"))],
    *[Layer(f"monai {name}", "monai.networks", make, layouts) for name, make, layouts in (
        ("PatchEmbeddingBlock", lambda m: m.blocks.PatchEmbeddingBlock(8, 8, 4, 8, 2, proj_type="conv",
                                                                       spatial_dims=2), (IMAGE8,)),
        ("SPADE", lambda m: m.blocks.SPADE(3, 8, kernel_size=3, spatial_dims=2), (IMAGE8, "2,3,8,8:BCSS")),
        ("UnetUpBlock", lambda m: m.blocks.UnetUpBlock(2, 8, 4, 3, 2, 2, norm_name="instance"),
         (IMAGE8, "2,4,16,16:BCSS")),
        ("UnetrUpBlock", lambda m: m.blocks.UnetrUpBlock(2, 8, 4, 3, 2, "instance"), (IMAGE8, "2,4,16,16:BCSS")),
        ("Warp", lambda m: m.blocks.Warp(mode="bilinear", padding_mode="border"), (IMAGE8, "2,2,8,8:BCSS")),
        ("GaussianFilter", lambda m: m.layers.GaussianFilter(2, 1.0), (IMAGE,)),
        ("SavitzkyGolayFilter", lambda m: m.layers.SavitzkyGolayFilter(3, 1, axis=2), (IMAGE,)),
        ("MedianFilter", lambda m: m.layers.MedianFilter(1, spatial_dims=2), (IMAGE,)),
        ("LaplaceFilter", lambda m: m.layers.LaplaceFilter(2, 3), (IMAGE,)),
        ("SharpenFilter", lambda m: m.layers.SharpenFilter(2, 3), (IMAGE,)),
        ("ChannelPad", lambda m: m.layers.ChannelPad(2, 8, 10, mode="pad"), (IMAGE,)),
        ("DropPath", lambda m: m.layers.DropPath(0.3), (IMAGE,)),
        ("VectorQuantizer", lambda m: m.layers.VectorQuantizer(m.layers.EMAQuantizer(2, 16, 8)), (IMAGE,)))],
    # MONAI's networks whole, 2-d and tiny (one grey channel): U-Nets, a residual encoder-decoder, VNet,
    # HighResNet, autoencoders, a classifier and regressor, DenseNet, ResNet, UNETR, SwinUNETR, ViT
    *[Layer(f"monai {name} (whole)", "monai.networks.nets", make, (layout,)) for name, make, layout in (
        ("UNet", lambda m: m.UNet(2, 1, 2, channels=(4, 8, 16), strides=(2, 2), num_res_units=1), _GREY16),
        ("BasicUNet", lambda m: m.BasicUNet(2, 1, 2, features=(4, 4, 8, 8, 16, 4)), _GREY32),
        ("SegResNet", lambda m: m.SegResNet(2, init_filters=8, in_channels=1, out_channels=2, blocks_down=(1, 1),
                                            blocks_up=(1,)), _GREY16),
        ("AttentionUnet", lambda m: m.AttentionUnet(2, 1, 2, channels=(4, 8, 16), strides=(2, 2)), _GREY16),
        ("DynUNet", lambda m: m.DynUNet(2, 1, 2, kernel_size=(3, 3, 3), strides=(1, 2, 2), upsample_kernel_size=(2, 2),
                                        filters=(4, 8, 16)), _GREY16),
        ("VNet", lambda m: m.VNet(2, 1, 2, dropout_prob_down=0.0, dropout_prob_up=(0.0, 0.0)), _GREY32),
        ("HighResNet", lambda m: m.HighResNet(2, 1, 2, layer_params=(
            {"name": "conv_0", "n_features": 4, "kernel_size": 3},
            {"name": "res_1", "n_features": 4, "kernels": (3, 3), "repeat": 1},
            {"name": "conv_1", "n_features": 8, "kernel_size": 1}, {"name": "conv_2", "kernel_size": 1})), _GREY16),
        ("AutoEncoder", lambda m: m.AutoEncoder(2, 1, 1, channels=(4, 8), strides=(2, 2)), _GREY16),
        ("VarAutoEncoder", lambda m: m.VarAutoEncoder(2, (1, 16, 16), 1, 4, channels=(4, 8), strides=(2, 2)),
         _GREY16),
        ("Classifier", lambda m: m.Classifier((1, 16, 16), 3, channels=(4, 8), strides=(2, 2)), _GREY16),
        ("Regressor", lambda m: m.Regressor((1, 16, 16), (2,), channels=(4, 8), strides=(2, 2)), _GREY16),
        ("DenseNet (two blocks)", lambda m: m.DenseNet(2, 1, 3, init_features=8, growth_rate=4, block_config=(2, 2)),
         _GREY32),
        ("ResNet (basic, one block a stage)", lambda m: m.ResNet("basic", [1, 1, 1, 1], [4, 8, 16, 32], spatial_dims=2,
                                                                 n_input_channels=1, num_classes=3), _GREY32),
        ("UNETR", lambda m: m.UNETR(1, 2, (16, 16), feature_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                                    spatial_dims=2, proj_type="conv"), _GREY16),
        ("SwinUNETR", lambda m: m.SwinUNETR(in_channels=1, out_channels=2, feature_size=12, spatial_dims=2,
                                            depths=(1, 1, 1, 1), num_heads=(1, 1, 1, 1)), "2,1,64,64:BCSS"),
        ("ViT", lambda m: m.ViT(1, (16, 16), (4, 4), hidden_size=16, mlp_dim=32, num_layers=1, num_heads=2,
                                spatial_dims=2, classification=True, num_classes=3), _GREY16))],
    *[Layer(f"transformers {name}", "transformers", make, (SEQUENCE,)) for name, make in (
        *[(activation, lambda m, a=activation: getattr(importlib.import_module("transformers.activations"), a)())
          for activation in ("GELUActivation", "NewGELUActivation", "FastGELUActivation", "QuickGELUActivation",
                             "AccurateGELUActivation", "MishActivation", "LaplaceActivation",
                             "ReLUSquaredActivation")],
        ("LlamaRMSNorm", _hf("llama.modeling_llama", lambda m: m.LlamaRMSNorm(8))),
        ("LlamaMLP", lambda t: importlib.import_module("transformers.models.llama.modeling_llama").LlamaMLP(
            _llama_config(t))),
        ("GemmaRMSNorm", _hf("gemma.modeling_gemma", lambda m: m.GemmaRMSNorm(8))),
        ("T5LayerNorm", _hf("t5.modeling_t5", lambda m: m.T5LayerNorm(8))),
        ("BertIntermediate", lambda t: importlib.import_module("transformers.models.bert.modeling_bert")
         .BertIntermediate(t.BertConfig(hidden_size=8, intermediate_size=16, num_attention_heads=2))),
        ("pytorch_utils.Conv1D (GPT-2)",
         lambda t: importlib.import_module("transformers.pytorch_utils").Conv1D(12, 8)))],
    *[Layer(f"transformers LlamaRotaryEmbedding{name}", "transformers", make,
            ("2,5,16:BTC", "2,5:BT dtype=int64 values=0:64")) for name, make in (
        ("", _rotary()),
        (" (llama3 scaling)", _rotary({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
        (" (dynamic NTK scaling)", _rotary({"rope_type": "dynamic", "factor": 2.0})),
        (" (YaRN scaling)", _rotary({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16})))],
    # whole blocks: decoder layers with rotary embeddings and a causal mask, and encoder blocks
    *[Layer(f"transformers {name}", "transformers", make, ("2,6,16:BTC",)) for name, make in (
        *[(f"{_DECODERS[family]}DecoderLayer ({attention})",
           lambda t, f=family, a=attention: _Decoder(t, f, a))
          for family, attention in (("llama", "eager"), ("llama", "sdpa"), ("mistral", "sdpa"), ("qwen2", "sdpa"),
                                    ("gemma", "eager"), ("phi3", "sdpa"))],
        ("BertLayer", lambda t: _Output(importlib.import_module("transformers.models.bert.modeling_bert").BertLayer(
            t.BertConfig(hidden_size=16, intermediate_size=32, num_attention_heads=4, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0)))),
        ("GPT2Block", lambda t: _Output(importlib.import_module("transformers.models.gpt2.modeling_gpt2").GPT2Block(
            t.GPT2Config(n_embd=16, n_head=4, n_layer=1, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)))),
        ("T5Block", lambda t: _Output(importlib.import_module("transformers.models.t5.modeling_t5").T5Block(
            t.T5Config(d_model=16, d_kv=4, d_ff=32, num_heads=4, dropout_rate=0.0), has_relative_attention_bias=True))),
        ("ViTLayer", lambda t: _Output(importlib.import_module("transformers.models.vit.modeling_vit").ViTLayer(
            t.ViTConfig(hidden_size=16, intermediate_size=32, num_attention_heads=4, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)))),
        *_MOES.items(),
        ("WhisperEncoderLayer", lambda t: _Output(importlib.import_module(
            "transformers.models.whisper.modeling_whisper").WhisperEncoderLayer(
            t.WhisperConfig(d_model=16, encoder_attention_heads=4, encoder_ffn_dim=32)), attention_mask=None)),
        ("MambaMixer (PyTorch path)", lambda t: _Output(importlib.import_module(
            "transformers.models.mamba.modeling_mamba").MambaMixer(
            t.MambaConfig(hidden_size=16, state_size=4, expand=2, conv_kernel=3, use_mambapy=False), layer_idx=0))))],
    *[Layer(f"x-transformers {name}", "x_transformers", make, ("2,5,16:BTC",)) for name, make in (
        ("Encoder", lambda m: m.Encoder(dim=16, depth=1, heads=2, attn_dim_head=8)),
        ("Encoder, rotary, GLU", lambda m: m.Encoder(dim=16, depth=1, heads=2, attn_dim_head=8, rotary_pos_emb=True,
                                                     ff_glu=True)),
        ("Decoder", lambda m: m.Decoder(dim=16, depth=1, heads=2, attn_dim_head=8)))],
    *[Layer(f"vector-quantize-pytorch {name}", "vector_quantize_pytorch", make, (SEQUENCE,)) for name, make in (
        ("FSQ", lambda m: m.FSQ(levels=[8, 5, 5], dim=8)),
        ("LFQ", lambda m: m.LFQ(dim=8, codebook_size=256, entropy_loss_weight=0.1)),
        ("VectorQuantize", lambda m: m.VectorQuantize(dim=8, codebook_size=16)),
        ("VectorQuantize, learnable codebook", lambda m: m.VectorQuantize(dim=8, codebook_size=16,
                                                                          learnable_codebook=True, ema_update=False)),
        ("SimVQ", lambda m: m.SimVQ(dim=8, codebook_size=16)),
        ("ResidualFSQ", lambda m: m.ResidualFSQ(dim=8, levels=[8, 5, 5], num_quantizers=2)),
        ("ResidualLFQ", lambda m: m.ResidualLFQ(dim=8, num_quantizers=2, codebook_size=16)),
        ("ResidualVQ", lambda m: m.ResidualVQ(dim=8, num_quantizers=2, codebook_size=16)))],
    Layer("vector-quantize-pytorch LatentQuantize", "vector_quantize_pytorch",
          lambda m: m.LatentQuantize(levels=[5, 5, 8], dim=8), ("2,8,6:BCT",)),
    Layer("pytorch_wavelets DWTForward, zero padding", "pytorch_wavelets",
          lambda m: m.DWTForward(J=1, wave="db2", mode="zero"), ("2,3,8,8:BCSS",)),
    Layer("pytorch_wavelets DWT1DForward, zero padding", "pytorch_wavelets",
          lambda m: m.DWT1DForward(J=2, wave="db3", mode="zero"), ("2,3,16:BCT",)),
    Layer("pytorch_wavelets DWT1DForward, symmetric padding", "pytorch_wavelets",
          lambda m: m.DWT1DForward(J=1, wave="db2", mode="symmetric"), ("2,3,16:BCT",)),
    *[Layer(f"mambapy MambaBlock{suffix}", "mambapy.mamba",
            lambda m, scan=scan: m.MambaBlock(m.MambaConfig(d_model=8, n_layers=1, d_state=4, pscan=scan)),
            (SEQUENCE,)) for suffix, scan in ((", parallel scan", True), (", sequential", False))],
    # spiking neurons: a step forward with a surrogate gradient (Note [surrogate gradients])
    *[Layer(f"snntorch Leaky in a loop{suffix}", "snntorch", lambda m, kw=kw: _SnnTorchLoop(m, beta=0.8, **kw),
            (SEQUENCE,)) for suffix, kw in (("", {}), (", reset to zero", {"reset_mechanism": "zero"}),
                                            (", learned beta and threshold", {"learn_beta": True,
                                                                              "learn_threshold": True}))],
    *[Layer(f"norse {name}", "norse.torch", lambda m, name=name: getattr(m, name)(), (layout,))
      for name, layout in (("LIFBoxCell", VECTOR), ("LIFCell", VECTOR), ("LICell", VECTOR), ("LIF", "5,2,8:TBC"),
                           ("LSNN", "5,2,8:TBC"), ("LIFAdEx", "5,2,8:TBC"))],
    *[Layer(f"spikingjelly {name}", "spikingjelly.activation_based.neuron", _spikingjelly(make), (layout,))
      for name, make, layout in (
          ("LIFNode, multi-step", lambda n, s: n.LIFNode(tau=2.0, surrogate_function=s.ATan(), step_mode="m",
                                                         detach_reset=True), "5,2,8:TBC"),
          ("ParametricLIFNode, multi-step", lambda n, s: n.ParametricLIFNode(step_mode="m"), "5,2,8:TBC"),
          ("IFNode", lambda n, s: n.IFNode(), VECTOR))],
    *[Layer(f"pyro {name}", "pyro.distributions.transforms", _pyro(build), ("6,4:BC",)) for name, build in (
        ("Spline", lambda t, n: t.Spline(4, count_bins=5, bound=3.0)),
        ("Planar", lambda t, n: t.Planar(4)),
        ("Radial", lambda t, n: t.Radial(4)),
        ("AffineAutoregressive", lambda t, n: t.AffineAutoregressive(n.AutoRegressiveNN(4, [8]))),
        ("SplineAutoregressive", lambda t, n: t.SplineAutoregressive(
            4, n.AutoRegressiveNN(4, [8], param_dims=[5, 5, 5, 4]), count_bins=5)),
        ("Sylvester", lambda t, n: t.Sylvester(4, count_transforms=2)),
        ("BatchNorm", lambda t, n: t.BatchNorm(4)))],
    *[Layer(f"normflows {name}", "normflows", lambda m, build=build: _Flow(build(m)), (layout,))
      for name, build, layout in (
          ("Planar", lambda m: m.flows.Planar((4,)), "6,4:BC"),
          ("Radial", lambda m: m.flows.Radial((4,)), "6,4:BC"),
          ("ActNorm (data-dependent initialisation)", lambda m: m.flows.ActNorm((4,)), "6,4:BC"),
          ("MaskedAffineFlow", lambda m: m.flows.MaskedAffineFlow(
              torch.tensor([1.0, 0, 1, 0]), m.nets.MLP([4, 8, 4], init_zeros=False)), "6,4:BC"),
          ("AutoregressiveRationalQuadraticSpline",
           lambda m: m.flows.AutoregressiveRationalQuadraticSpline(4, 1, 8), "6,4:BC"),
          ("CoupledRationalQuadraticSpline", lambda m: m.flows.CoupledRationalQuadraticSpline(4, 1, 8), "6,4:BC"),
          ("Invertible1x1Conv", lambda m: m.flows.Invertible1x1Conv(4), "2,4,3,3:BCSS"),
          ("Invertible1x1Conv, LU", lambda m: m.flows.Invertible1x1Conv(4, use_lu=True), "2,4,3,3:BCSS"))],
    *[Layer(f"zuko {name} log_prob", "zuko", lambda m, build=build: _LogProb(build(m.flows)), (layout,))
      for name, build, layout in (
          ("MAF", lambda f: f.MAF(4, transforms=2, hidden_features=[8]), "6,4:BC"),
          ("NSF", lambda f: f.NSF(4, transforms=2, bins=4, hidden_features=[8]), "6,4:BC"),
          ("NAF", lambda f: f.NAF(4, transforms=1, signal=4, hidden_features=[8]), "6,4:BC"),
          ("RealNVP", lambda f: f.RealNVP(4, transforms=2, hidden_features=[8]), "6,4:BC"),
          ("SOSPF", lambda f: f.SOSPF(4, transforms=1, degree=2, polynomials=2, hidden_features=[8]), "6,4:BC"),
          ("BPF", lambda f: f.BPF(4, transforms=1, degree=4, hidden_features=[8]), "6,4:BC"),
          ("GF", lambda f: f.GF(4, transforms=1, components=3), "6,4:BC"),
          ("CNF", lambda f: f.CNF(4, hidden_features=[8]), "3,4:BC"))],
    Layer("performer-pytorch SelfAttention", "performer_pytorch",
          lambda m: m.SelfAttention(dim=8, heads=2, dim_head=4, nb_features=6), (SEQUENCE,)),
    Layer("reformer-pytorch LSHSelfAttention", "reformer_pytorch",
          lambda m: m.LSHSelfAttention(dim=16, heads=2, bucket_size=2, n_hashes=2), ("2,8,16:BTC",)),
    Layer("reformer-pytorch ReversibleSequence", "reformer_pytorch.reversible",
          lambda m: m.ReversibleSequence(nn.ModuleList([nn.ModuleList([nn.Linear(8, 8), nn.Sequential(
              nn.Linear(8, 8), nn.GELU())]) for _ in range(2)])), ("2,5,16:BTC",)),
    Layer("revtorch ReversibleSequence", "revtorch", lambda m: m.ReversibleSequence(nn.ModuleList([
        m.ReversibleBlock(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.Tanh())) for _ in range(2)])),
          ("3,8:BC",)),
    Layer("memcnn AdditiveCoupling", "memcnn", lambda m: m.InvertibleModuleWrapper(
        m.AdditiveCoupling(nn.Sequential(nn.Linear(4, 4), nn.Tanh())), keep_input=True, keep_input_inverse=True),
          ("3,8:BC",)),
    Layer("memcnn AdditiveCoupling, two backward passes", "memcnn", lambda m: m.InvertibleModuleWrapper(
        m.AdditiveCoupling(nn.Sequential(nn.Linear(4, 4), nn.Tanh())), keep_input=True, keep_input_inverse=True,
        num_bwd_passes=2), ("3,8:BC",)),
    *[Layer(f"pytorch-tabnet {name}", "pytorch_tabnet.tab_network", make, layouts) for name, make, layouts in (
        ("GBN", lambda m: m.GBN(7, virtual_batch_size=2), (VECTOR,)),
        ("AttentiveTransformer", lambda m: m.AttentiveTransformer(4, 7, group_matrix=torch.eye(7), virtual_batch_size=2,
                                                                  mask_type="entmax"), ("4,7:BC", "4,4:BC")),
        ("TabNetNoEmbeddings", lambda m: m.TabNetNoEmbeddings(7, 3, n_d=4, n_a=4, n_steps=2, virtual_batch_size=2),
         (VECTOR,)),
        ("Sparsemax", lambda m: importlib.import_module("pytorch_tabnet.sparsemax").Sparsemax(dim=-1), (VECTOR,)),
        ("Entmax15", lambda m: importlib.import_module("pytorch_tabnet.sparsemax").Entmax15(dim=-1), (VECTOR,)))],
    *[Layer(f"kornia {name}", "kornia", make, layouts) for name, make, layouts in (
        ("GaussianBlur2d", lambda m: m.filters.GaussianBlur2d((3, 3), (1.5, 1.5)), ("2,3,8,8:BCSS",)),
        ("MedianBlur", lambda m: m.filters.MedianBlur((3, 3)), ("2,3,8,8:BCSS",)),
        ("Canny", lambda m: m.filters.Canny(), ("2,3,8,8:BCSS",)),
        ("BilateralBlur", lambda m: m.filters.BilateralBlur(3, 0.1, (1.5, 1.5)), ("2,3,8,8:BCSS",)),
        ("GuidedBlur", lambda m: m.filters.GuidedBlur(3, 0.1), ("2,3,8,8:BCSS", "2,3,8,8:BCSS")),
        ("MaxBlurPool2D", lambda m: m.filters.MaxBlurPool2D(3), ("2,3,8,8:BCSS",)),
        ("RgbToHsv", lambda m: m.color.RgbToHsv(), ("2,3,8,8:BCSS",)),
        ("RgbToLab", lambda m: m.color.RgbToLab(), ("2,3,8,8:BCSS",)),
        ("SIFTDescriptor", lambda m: m.feature.SIFTDescriptor(16, 8, 4), ("3,1,16,16:BCSS",)),
        ("SSIMLoss", lambda m: m.losses.SSIMLoss(5), ("2,3,8,8:BCSS", "2,3,8,8:BCSS")),
        ("FocalLoss", lambda m: m.losses.FocalLoss(alpha=0.5, gamma=2.0, reduction="mean"),
         ("4,5:BC", "4:B dtype=int64 values=0:5")),
        ("DiceLoss", lambda m: m.losses.DiceLoss(), ("2,3,6,6:BCSS", "2,6,6:BSS dtype=int64 values=0:3")),
        ("SpatialSoftArgmax2d", lambda m: m.geometry.subpix.SpatialSoftArgmax2d(), ("2,3,8,8:BCSS",)),
        ("BoxBlur", lambda m: m.filters.BoxBlur((3, 3)), (RGB,)),
        ("Laplacian", lambda m: m.filters.Laplacian(3), (RGB,)),
        ("Sobel", lambda m: m.filters.Sobel(), (RGB,)),
        ("SpatialGradient", lambda m: m.filters.SpatialGradient(), (RGB,)),
        ("UnsharpMask", lambda m: m.filters.UnsharpMask((3, 3), (1.5, 1.5)), (RGB,)),
        ("MotionBlur", lambda m: m.filters.MotionBlur(3, 35.0, 0.5), (RGB,)),
        ("BlurPool2D", lambda m: m.filters.BlurPool2D(3), (RGB,)),
        ("EdgeAwareBlurPool2D", lambda m: m.filters.EdgeAwareBlurPool2D(3), (RGB,)),
        *[(name, lambda m, n=name: getattr(m.color, n)(), (RGB,)) for name in (
            "RgbToGrayscale", "RgbToHls", "RgbToYcbcr", "RgbToYuv", "RgbToXyz", "RgbToLuv", "HlsToRgb", "HsvToRgb",
            "YcbcrToRgb", "RgbToLinearRgb", "LinearRgbToRgb", "Sepia")],
        ("AdjustBrightness", lambda m: m.enhance.AdjustBrightness(0.1), (RGB,)),
        ("AdjustContrast", lambda m: m.enhance.AdjustContrast(0.5), (RGB,)),
        ("AdjustSaturation", lambda m: m.enhance.AdjustSaturation(0.5), (RGB,)),
        ("AdjustHue", lambda m: m.enhance.AdjustHue(0.2), (RGB,)),
        ("AdjustGamma", lambda m: m.enhance.AdjustGamma(1.5), (RGB,)),
        ("AdjustSigmoid", lambda m: m.enhance.AdjustSigmoid(), (RGB,)),
        ("AdjustLog", lambda m: m.enhance.AdjustLog(), (RGB,)),
        ("Invert", lambda m: m.enhance.Invert(), (RGB,)),
        ("JPEGCodecDifferentiable", lambda m: m.enhance.JPEGCodecDifferentiable(),
         ("2,3,16,16:BCSS values=0:1", "2:B values=30:90")),
        ("Rotate", lambda m: m.geometry.transform.Rotate(torch.tensor([10.0])), (RGB,)),
        ("Translate", lambda m: m.geometry.transform.Translate(torch.tensor([[1.0, 2.0]])), (RGB,)),
        ("Shear", lambda m: m.geometry.transform.Shear(torch.tensor([[0.1, 0.2]])), (RGB,)),
        ("Resize", lambda m: m.geometry.transform.Resize((6, 6)), (RGB,)),
        ("Rescale", lambda m: m.geometry.transform.Rescale(0.5), (RGB,)),
        ("PyrDown", lambda m: m.geometry.transform.PyrDown(), (RGB,)),
        ("PyrUp", lambda m: m.geometry.transform.PyrUp(), (RGB,)),
        ("ConvSoftArgmax2d", lambda m: m.geometry.subpix.ConvSoftArgmax2d(), (RGB,)),
        ("BlobHessian", lambda m: m.feature.BlobHessian(), (RGB,)),
        ("CornerHarris", lambda m: m.feature.CornerHarris(0.04), (RGB,)),
        ("CornerGFTT", lambda m: m.feature.CornerGFTT(), (RGB,)),
        ("BlobDoG", lambda m: m.feature.BlobDoG(), ("2,3,2,8,8:BCUSS",)),
        *[(name, lambda m, n=name: getattr(m.feature, n)(pretrained=False), ("2,1,32,32:BCSS",))
          for name in ("HardNet", "TFeat", "SOSNet", "HyNet")],
        ("DenseSIFTDescriptor", lambda m: m.feature.DenseSIFTDescriptor(), ("2,1,16,16:BCSS",)),
        ("SSIM3DLoss", lambda m: m.losses.SSIM3DLoss(3), ("2,1,4,8,8:BCSSS values=0:1",) * 2),
        ("PSNRLoss", lambda m: m.losses.PSNRLoss(1.0), (RGB, RGB)),
        ("TotalVariation", lambda m: m.losses.TotalVariation(), (RGB,)),
        ("TverskyLoss", lambda m: m.losses.TverskyLoss(0.5, 0.5), ("2,3,6,6:BCSS", "2,6,6:BSS dtype=int64 values=0:3")),
        ("LovaszHingeLoss", lambda m: m.losses.LovaszHingeLoss(),
         ("2,1,6,6:BCSS", "2,6,6:BSS dtype=int64 values=0:2")),
        ("LovaszSoftmaxLoss", lambda m: m.losses.LovaszSoftmaxLoss(),
         ("2,3,6,6:BCSS", "2,6,6:BSS dtype=int64 values=0:3")),
        *[(name, lambda m, n=name: getattr(m.losses, n)("mean"), (RGB, RGB))
          for name in ("CharbonnierLoss", "WelschLoss", "CauchyLoss", "GemanMcclureLoss")],
        ("BinaryFocalLossWithLogits", lambda m: m.losses.BinaryFocalLossWithLogits(alpha=0.25, gamma=2.0,
                                                                                 reduction="mean"),
         ("4,5:BC", "4,5:BC dtype=int64 values=0:2")),
        ("ExtractTensorPatches", lambda m: m.contrib.ExtractTensorPatches(3), (RGB,)))],
    *[Layer(f"geotorch {name}", "geotorch", lambda m, name=name: _constrained(m, name), (VECTOR,))
      for name in ("orthogonal", "positive_definite", "sphere")],
    *[Layer(f"nflows {name}", "nflows.transforms", make, (VECTOR,)) for name, make in (
        ("MaskedAffineAutoregressiveTransform", lambda m: m.MaskedAffineAutoregressiveTransform(7, 8)),
        ("MaskedPiecewiseRationalQuadraticAutoregressiveTransform",
         lambda m: m.MaskedPiecewiseRationalQuadraticAutoregressiveTransform(7, 8, tails="linear", tail_bound=3.0)),
        ("LULinear", lambda m: m.LULinear(7)), ("ActNorm", lambda m: m.ActNorm(7)),
        ("HouseholderSequence", lambda m: m.HouseholderSequence(7, 3)))],
    *[Layer(f"lucidrains {name}", library, make, (layout,)) for name, library, make, layout in (
        ("conformer ConformerBlock", "conformer", lambda m: m.ConformerBlock(dim=8, dim_head=4, heads=2,
                                                                           conv_kernel_size=3), SEQUENCE),
        ("axial-attention AxialAttention", "axial_attention",
         lambda m: m.AxialAttention(dim=8, dim_index=1, heads=2, num_dimensions=2), IMAGE),
        ("lambda-networks LambdaLayer", "lambda_networks",
         lambda m: m.LambdaLayer(dim=8, dim_out=8, r=3, dim_k=4, heads=2, dim_u=1), IMAGE),
        ("siren-pytorch SirenNet", "siren_pytorch",
         lambda m: m.SirenNet(dim_in=7, dim_hidden=8, dim_out=3, num_layers=2), VECTOR),
        ("nystrom-attention Nystromformer", "nystrom_attention",
         lambda m: m.Nystromformer(dim=8, dim_head=4, heads=2, depth=1, num_landmarks=2), "2,8,8:BTC"),
        ("product-key-memory PKM", "product_key_memory",
         lambda m: m.PKM(8, heads=2, num_keys=4, topk=2, dim_head=4), SEQUENCE),
        ("linformer Linformer", "linformer", lambda m: m.Linformer(dim=8, seq_len=5, depth=1, heads=2, k=3),
         SEQUENCE))],
    # graph layers: node features (nodes as a U dimension: they are no independent observations)
    # and an edge index
    *[Layer(f"pytorch_geometric {name}", "torch_geometric.nn", make, ("10,8:UC", "2,30:UU dtype=int64 values=0:10"))
      for name, make in (
          ("GCNConv", lambda m: m.GCNConv(8, 6)), ("GATConv", lambda m: m.GATConv(8, 3, heads=2)),
          ("GATv2Conv", lambda m: m.GATv2Conv(8, 3, heads=2)), ("SAGEConv", lambda m: m.SAGEConv(8, 6)),
          ("SAGEConv, max", lambda m: m.SAGEConv(8, 6, aggr="max")),
          ("GINConv", lambda m: m.GINConv(nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 6)))),
          ("TransformerConv", lambda m: m.TransformerConv(8, 3, heads=2)), ("GraphConv", lambda m: m.GraphConv(8, 6)),
          ("ChebConv", lambda m: m.ChebConv(8, 6, K=2)),
          ("EdgeConv", lambda m: m.EdgeConv(nn.Sequential(nn.Linear(16, 6), nn.ReLU()))),
          ("GENConv", lambda m: m.GENConv(8, 6, aggr="softmax", learn_t=True)),
          ("PNAConv", lambda m: m.PNAConv(8, 6, aggregators=["mean", "min", "max", "std"],
                                          scalers=["identity", "amplification"], deg=torch.tensor([0, 2, 4, 3, 1]))),
          ("GatedGraphConv", lambda m: m.GatedGraphConv(8, 2)),
          ("ResGatedGraphConv", lambda m: m.ResGatedGraphConv(8, 6)), ("APPNP", lambda m: m.APPNP(3, 0.1)))],
    Layer("pytorch_geometric GraphNorm", "torch_geometric.nn", lambda m: m.GraphNorm(8), ("10,8:UC",)),
    Layer("pytorch_geometric SoftmaxAggregation", "torch_geometric.nn.aggr",
          lambda m: m.SoftmaxAggregation(learn=True), ("10,8:UC", "10:U dtype=int64 values=0:3")),
    *[Layer(f"e3nn {name}", library, make, layouts) for name, library, make, layouts in (
        ("Linear", "e3nn.o3", lambda m: m.Linear("2x0e+1x1o", "3x0e+2x1o"), ("4,5:BC",)),
        ("FullyConnectedTensorProduct", "e3nn.o3",
         lambda m: m.FullyConnectedTensorProduct("1x0e+1x1o", "1x1o", "2x0e+1x1o+1x2e"), ("4,4:BC", "4,3:BC")),
        ("SphericalHarmonics", "e3nn.o3", lambda m: m.SphericalHarmonics(2, True, normalization="component"),
         ("4,3:BC",)),
        ("Norm", "e3nn.o3", lambda m: m.Norm("2x0e+1x1o"), ("4,5:BC",)),
        ("Gate", "e3nn.nn", lambda m: m.Gate("2x0e", [torch.tanh], "1x0e", [torch.sigmoid], "1x1o"), ("4,6:BC",)))],
    *[Layer(f"ncps {name}", "ncps.torch", lambda m, name=name: _Output(getattr(m, name)(8, 6)), (SEQUENCE,))
      for name in ("CfC", "LTC")],
    *[Layer(f"gpytorch {name}", "gpytorch.kernels", lambda m, make=make: _Dense(make(m)), ("6,3:UC",))
      for name, make in (("ScaleKernel(RBFKernel)", lambda k: k.ScaleKernel(k.RBFKernel())),
                         ("MaternKernel", lambda k: k.MaternKernel(nu=2.5)),
                         ("PeriodicKernel", lambda k: k.PeriodicKernel()))],
    *[Layer(f"timm {name}", "timm.layers", make, (layout,)) for name, make, layout in (
        ("EvoNorm2dB0", lambda m: m.EvoNorm2dB0(8), IMAGE),
        ("EvoNorm2dS0", lambda m: m.EvoNorm2dS0(8, group_size=4), IMAGE),
        ("FilterResponseNormAct2d", lambda m: m.FilterResponseNormAct2d(8), IMAGE),
        ("BatchNormAct2d", lambda m: m.BatchNormAct2d(8), IMAGE),
        ("LayerNorm2d", lambda m: m.LayerNorm2d(8), IMAGE),
        ("SqueezeExcite", lambda m: m.SqueezeExcite(8), IMAGE), ("EcaModule", lambda m: m.EcaModule(8), IMAGE),
        ("SelectiveKernel", lambda m: m.SelectiveKernel(8, 8), IMAGE),
        ("SplitAttn", lambda m: m.SplitAttn(8, 8), IMAGE),
        ("StdConv2d", lambda m: m.StdConv2d(8, 8, 3, padding=1), IMAGE),
        ("ScaledStdConv2d", lambda m: m.ScaledStdConv2d(8, 8, 3, padding=1), IMAGE),
        ("Attention", lambda m: m.Attention(8, num_heads=2), SEQUENCE), ("SwiGLU", lambda m: m.SwiGLU(8, 16), SEQUENCE),
        ("DropPath", lambda m: m.DropPath(0.2), IMAGE), ("DropBlock2d", lambda m: m.DropBlock2d(0.2, 3), IMAGE),
        ("BlurPool2d", lambda m: m.BlurPool2d(8), IMAGE), ("HardMish", lambda m: m.HardMish(), IMAGE),
        ("EvoNorm2dS1", lambda m: m.EvoNorm2dS1(8, group_size=4), IMAGE),
        ("EvoNorm2dS2a", lambda m: m.EvoNorm2dS2a(8, group_size=4), IMAGE),
        ("FilterResponseNormTlu2d", lambda m: m.FilterResponseNormTlu2d(8), IMAGE),
        ("FrozenBatchNormAct2d", lambda m: m.FrozenBatchNormAct2d(8), IMAGE),
        ("GroupNormAct", lambda m: m.GroupNormAct(8, 4), IMAGE),
        ("LayerNormAct2d", lambda m: m.LayerNormAct2d(8), IMAGE),
        ("RmsNorm", lambda m: m.RmsNorm(8), SEQUENCE), ("RmsNorm2d", lambda m: m.RmsNorm2d(8), IMAGE),
        ("SimpleNorm2d", lambda m: m.SimpleNorm2d(8), IMAGE),
        ("SplitBatchNorm2d", lambda m: m.SplitBatchNorm2d(8, num_splits=2), IMAGE),
        ("CecaModule", lambda m: m.CecaModule(8), IMAGE),
        ("EffectiveSEModule", lambda m: m.EffectiveSEModule(8), IMAGE),
        ("GatherExcite, extent 2", lambda m: m.GatherExcite(8, extent=2, use_mlp=False), IMAGE),
        ("GlobalContext", lambda m: m.GlobalContext(8), IMAGE), ("NonLocalAttn", lambda m: m.NonLocalAttn(8), IMAGE),
        ("BatNonLocalAttn", lambda m: m.BatNonLocalAttn(8, block_size=2), "2,8,8,8:BCSS"),
        ("MixedConv2d", lambda m: m.MixedConv2d(8, 8, [3, 5], padding=""), IMAGE),
        ("Conv2dSame", lambda m: m.Conv2dSame(8, 8, 3, stride=2), IMAGE),
        ("AvgPool2dSame", lambda m: m.AvgPool2dSame(3, stride=2), IMAGE),
        ("SpaceToDepth", lambda m: m.SpaceToDepth(4), "2,3,8,8:BCSS"),
        ("DepthToSpace", lambda m: m.DepthToSpace(2), IMAGE),
        ("SelectAdaptivePool2d catavgmax",
         lambda m: m.SelectAdaptivePool2d(pool_type="catavgmax", flatten=True), IMAGE),
        ("LsePlus2d", lambda m: m.LsePlus2d(), IMAGE), ("SimPool2d", lambda m: m.SimPool2d(8, num_heads=2), IMAGE),
        ("AttentionPool2d", lambda m: m.AttentionPool2d(8, feat_size=(6, 6), num_heads=2), IMAGE),
        ("RotAttentionPool2d", lambda m: m.RotAttentionPool2d(8, num_heads=2), IMAGE),
        ("AttentionPoolLatent", lambda m: m.AttentionPoolLatent(8, num_heads=2), SEQUENCE),
        ("Attention2d", lambda m: m.Attention2d(8, num_heads=2), IMAGE),
        ("MultiQueryAttention2d", lambda m: m.MultiQueryAttention2d(8, num_heads=2, key_dim=4, value_dim=4), IMAGE),
        ("DiffAttention", lambda m: m.DiffAttention(8, num_heads=2), SEQUENCE),
        ("AttentionRope", lambda m: m.AttentionRope(8, num_heads=2), SEQUENCE),
        ("GluMlp", lambda m: m.GluMlp(8, 16), SEQUENCE),
        ("GlobalResponseNormMlp", lambda m: m.GlobalResponseNormMlp(8, 16), SEQUENCE),
        ("LayerScale2d", lambda m: m.LayerScale2d(8), IMAGE),
        ("PatchEmbed", lambda m: m.PatchEmbed(img_size=8, patch_size=4, in_chans=3, embed_dim=8), "2,3,8,8:BCSS"),
        # random token dropping: the training output is shorter along the tokens
        ("PatchDropout", lambda m: m.PatchDropout(0.5, num_prefix_tokens=1), SEQUENCE),
        ("PatchDropoutWithIndices", lambda m: m.PatchDropoutWithIndices(0.5, num_prefix_tokens=1), SEQUENCE),
        ("ClNormMlpClassifierHead", lambda m: m.ClNormMlpClassifierHead(8, 5, hidden_size=6), "2,6,6,8:BSSC"),
        ("QuickGELU", lambda m: m.QuickGELU(), IMAGE),
        ("RelPosMlp", lambda m: m.RelPosMlp(window_size=(2, 3), num_heads=2), "2,2,6,6:BUUU"))],
    # timm's hand-written backward passes (memory-efficient activations)
    *[Layer(f"timm {name}", "timm.layers.activations_me", lambda m, name=name: getattr(m, name)(), (IMAGE,))
      for name in ("SwishMe", "MishMe", "HardSigmoidMe", "HardSwishMe", "HardMishMe")],
    Layer("timm CondConv2d (routing weights as a second input)", "timm.layers",
          lambda m: m.CondConv2d(8, 8, 3, padding=1, num_experts=3), (IMAGE, "2,3:BC")),
    # blocks of timm's models
    *[Layer(f"timm {name}", f"timm.models.{module}", make, layouts) for name, module, make, layouts in (
        ("ViT Block (layer scale, drop path)", "vision_transformer",
         lambda m: m.Block(8, 2, qkv_bias=True, init_values=1e-5, drop_path=0.1), (SEQUENCE,)),
        ("ViT ParallelScalingBlock", "vision_transformer", lambda m: m.ParallelScalingBlock(8, 2), (SEQUENCE,)),
        ("ConvNeXtBlock", "convnext", lambda m: m.ConvNeXtBlock(8, ls_init_value=1e-6, drop_path=0.1), (IMAGE,)),
        ("ConvNeXtBlock (conv mlp, GRN)", "convnext", lambda m: m.ConvNeXtBlock(8, conv_mlp=True, use_grn=True),
         (IMAGE,)),
        ("SwinTransformerBlock, shifted", "swin_transformer",
         lambda m: m.SwinTransformerBlock(8, (4, 4), num_heads=2, window_size=2, shift_size=1), ("2,4,4,8:BSSC",)),
        ("EfficientNet InvertedResidual (SE, drop path)", "_efficientnet_blocks",
         lambda m: m.InvertedResidual(8, 8, exp_ratio=2.0, se_layer=m.SqueezeExcite, drop_path_rate=0.1), (IMAGE,)),
        ("UniversalInvertedResidual", "_efficientnet_blocks",
         lambda m: m.UniversalInvertedResidual(8, 8, dw_kernel_size_start=3, exp_ratio=2.0,
                                               layer_scale_init_value=1e-5), (IMAGE,)),
        ("CondConvResidual", "_efficientnet_blocks", lambda m: m.CondConvResidual(8, 8, num_experts=2), (IMAGE,)),
        ("MobileAttention", "_efficientnet_blocks",
         lambda m: m.MobileAttention(8, 8, num_heads=2, key_dim=4, value_dim=4), (IMAGE,)),
        ("ResNet Bottleneck", "resnet", lambda m: m.Bottleneck(8, 2), (IMAGE,)),
        ("EvaBlock (SwiGLU)", "eva", lambda m: m.EvaBlock(8, 2, init_values=1e-5, swiglu_mlp=True), (SEQUENCE,)),
        ("MixerBlock", "mlp_mixer", lambda m: m.MixerBlock(8, 5), (SEQUENCE,)),
        ("BEiT Block (relative position bias)", "beit", lambda m: m.Block(8, 2, window_size=(2, 2), init_values=0.1),
         (SEQUENCE,)),
        ("GhostBottleneck", "ghostnet", lambda m: m.GhostBottleneck(8, 16, 8, se_ratio=0.25), (IMAGE,)),
        ("MetaFormerBlock (pooling)", "metaformer",
         lambda m: m.MetaFormerBlock(8, layer_scale_init_value=1e-5, res_scale_init_value=1.0), (IMAGE,)),
        ("MaxViT PartitionAttentionCl", "maxxvit",
         lambda m: m.PartitionAttentionCl(8, cfg=m.MaxxVitTransformerCfg(dim_head=4, window_size=(4, 4),
                                                                          grid_size=(4, 4))), ("2,8,8,8:BSSC",)),
        ("MobileVitBlock", "mobilevit",
         lambda m: m.MobileVitBlock(8, 8, patch_size=2, num_heads=2, transformer_dim=8, transformer_depth=1),
         ("2,8,8,8:BCSS",)),
        ("CaiT class-attention block (tokens, class token)", "cait", lambda m: m.LayerScaleBlockClassAttn(8, 2),
         (SEQUENCE, "2,1,8:BTC")),
        ("MobileOneBlock", "byobnet", lambda m: m.MobileOneBlock(8, 8, num_conv_branches=2), (IMAGE,)),
        ("FocalNetBlock", "focalnet", lambda m: m.FocalNetBlock(8, focal_level=2, layerscale_value=1e-4), (IMAGE,)),
        ("DaViT ChannelBlock", "davit", lambda m: m.ChannelBlock(8, 2), (IMAGE,)),
        ("LeViT Attention", "levit", lambda m: m.Attention(8, 4, num_heads=2, resolution=4), ("2,16,8:BTC",)),
        ("Sequencer LSTM2d", "sequencer", lambda m: m.LSTM2d(8, 4, bidirectional=True), ("2,4,4,8:BSSC",)))],
    # torchvision's Python layers and model blocks (its C operators cannot load beside a CPU torch)
    *[Layer(f"torchvision {name}", f"torchvision.{module}", make, (layout,)) for name, module, make, layout in (
        ("StochasticDepth (row)", "ops", lambda m: m.StochasticDepth(0.3, "row"), IMAGE),
        ("StochasticDepth (batch)", "ops", lambda m: m.StochasticDepth(0.3, "batch"), IMAGE),
        ("SqueezeExcitation", "ops", lambda m: m.SqueezeExcitation(8, 4), IMAGE),
        ("MLP (LayerNorm, dropout)", "ops", lambda m: m.MLP(8, [16, 8], norm_layer=nn.LayerNorm, dropout=0.1),
         SEQUENCE),
        ("FrozenBatchNorm2d", "ops", lambda m: m.FrozenBatchNorm2d(8), IMAGE),
        ("DropBlock2d", "ops", lambda m: m.DropBlock2d(0.2, 3), IMAGE),
        ("Conv3dNormActivation", "ops", lambda m: m.Conv3dNormActivation(4, 4, 3), "2,4,4,4,4:BCSSS"),
        ("EfficientNet MBConv", "models.efficientnet",
         lambda m: m.MBConv(m.MBConvConfig(2, 3, 1, 8, 8, 1), 0.2, nn.BatchNorm2d), IMAGE),
        ("EfficientNetV2 FusedMBConv", "models.efficientnet",
         lambda m: m.FusedMBConv(m.FusedMBConvConfig(2, 3, 1, 8, 8, 1), 0.2, nn.BatchNorm2d), IMAGE),
        ("ViT EncoderBlock", "models.vision_transformer",
         lambda m: m.EncoderBlock(2, 8, 16, 0.1, 0.1, nn.LayerNorm), SEQUENCE),
        ("SwinTransformerBlock, shifted", "models.swin_transformer",
         lambda m: m.SwinTransformerBlock(8, 2, [2, 2], [1, 1], stochastic_depth_prob=0.1), "2,4,4,8:BSSC"),
        ("SwinTransformerBlockV2, shifted", "models.swin_transformer",
         lambda m: m.SwinTransformerBlockV2(8, 2, [2, 2], [1, 1]), "2,4,4,8:BSSC"),
        ("Swin PatchMergingV2", "models.swin_transformer", lambda m: m.PatchMergingV2(8), "2,4,4,8:BSSC"),
        ("ConvNeXt CNBlock", "models.convnext", lambda m: m.CNBlock(8, 1e-6, 0.1), IMAGE),
        ("DenseNet layer, memory-efficient (checkpointed)", "models.densenet",
         lambda m: m._DenseLayer(8, 4, 2, 0.0, memory_efficient=True), IMAGE),
        ("ShuffleNetV2 InvertedResidual", "models.shufflenetv2", lambda m: m.InvertedResidual(8, 8, 1), IMAGE),
        ("video R(2+1)D BasicBlock", "models.video.resnet", lambda m: m.BasicBlock(8, 8, m.Conv2Plus1D),
         "2,8,4,4,4:BCSSS"))],
    # xlstm with its vanilla (pure PyTorch) sLSTM backend
    *[Layer(f"xlstm {name}", "xlstm", make, (SEQUENCE,)) for name, make in (
        ("sLSTMLayer, vanilla", lambda m: m.sLSTMLayer(_slstm_config(m))),
        ("sLSTMBlock, vanilla", lambda m: m.sLSTMBlock(m.sLSTMBlockConfig(
            slstm=_slstm_config(m), feedforward=m.FeedForwardConfig(proj_factor=1.5, act_fn="gelu"), _num_blocks=1,
            _block_idx=0))),
        ("mLSTMLayer", lambda m: m.mLSTMLayer(_mlstm_config(m))),
        ("mLSTMBlock", lambda m: m.mLSTMBlock(m.mLSTMBlockConfig(mlstm=_mlstm_config(m), _num_blocks=1,
                                                                 _block_idx=0))),
        ("xLSTMBlockStack (mLSTM + sLSTM)", _xlstm_stack))],
    *[Layer(f"torchdiffeq {name}", "torchdiffeq", make, (VECTOR,)) for name, make in (
        ("odeint rk4", lambda m: _ODEBlock(m, method="rk4", options={"step_size": 0.25})),
        ("odeint dopri5", lambda m: _ODEBlock(m, method="dopri5", rtol=1e-7, atol=1e-7)),
        ("odeint_adjoint rk4", lambda m: _ODEBlock(m, adjoint=True, method="rk4", options={"step_size": 0.25})),
        ("odeint_adjoint dopri5", lambda m: _ODEBlock(m, adjoint=True, method="dopri5", rtol=1e-7, atol=1e-7)))],
    # an event time found by bisection under no_grad to the solver's tolerance: smooth only to about 1e-8,
    # three outputs (FEW_CHUNKS in numerics/engine.py)
    Layer("torchdiffeq odeint_event dopri5", "torchdiffeq", _ODEEvent, ("3:U",)),
    *[Layer(f"torchsde {name}, fixed noise", "torchsde", make, (VECTOR,)) for name, make in (
        ("sdeint euler", _SDEBlock), ("sdeint_adjoint euler", lambda m: _SDEBlock(m, adjoint=True)),
        ("sdeint_adjoint reversible_heun (Stratonovich)",
         lambda m: _SDEBlock(m, adjoint=True, method="reversible_heun", sde_type="stratonovich",
                             adjoint_method="adjoint_reversible_heun")))],
    *[Layer(f"roma {name}", "roma", make, (layout,)) for name, make, layout in (
        ("special_procrustes (auto: Horn)", lambda m: _Function(m.special_procrustes), "4,3,3:BUU"),
        ("special_procrustes svd", lambda m: _Function(m.special_procrustes, method="svd"), "4,3,3:BUU"),
        ("procrustes svd (orthonormal)", lambda m: _Function(m.procrustes), "4,3,3:BUU"),
        ("special_procrustes, regularization",
         lambda m: _Function(m.special_procrustes, regularization=0.1), "4,3,3:BUU"),
        ("special_procrustes_unitquat", lambda m: _Function(m.special_procrustes_unitquat), "4,3,3:BUU"),
        ("special_gramschmidt", lambda m: _Function(m.special_gramschmidt), "4,3,2:BUU"),
        ("rotvec_to_rotmat", lambda m: _Function(m.rotvec_to_rotmat), "4,3:BU"),
        ("unitquat_to_rotmat", lambda m: _Function(m.unitquat_to_rotmat), "4,4:BU"),
        ("symmatrixvec_to_unitquat", lambda m: _Function(m.symmatrixvec_to_unitquat), "4,10:BU"))],
    # structured prediction: log-potentials in, the log partition (and the marginals) out
    *[Layer(f"torch_struct {name}", "torch_struct", make, (layout,)) for name, make, layout in (
        ("LinearChainCRF", lambda m: _StructDistribution(m, "LinearChainCRF"), "2,4,3,3:BUUU"),
        ("SemiMarkovCRF", lambda m: _StructDistribution(m, "SemiMarkovCRF"), "2,4,2,3,3:BUUUU"),
        ("DependencyCRF", lambda m: _StructDistribution(m, "DependencyCRF"), "2,4,4:BUU"),
        ("NonProjectiveDependencyCRF", lambda m: _StructDistribution(m, "NonProjectiveDependencyCRF"), "2,4,4:BUU"),
        ("TreeCRF", lambda m: _StructDistribution(m, "TreeCRF"), "2,4,4,2:BUUU"),
        ("LinearChain, SparseMaxSemiring", lambda m: _SemiringSum(m.LinearChain(m.SparseMaxSemiring)), "2,4,3,3:BUUU"),
        ("LinearChain, CheckpointSemiring(LogSemiring)",
         lambda m: _SemiringSum(m.LinearChain(m.CheckpointSemiring(m.LogSemiring))), "2,4,3,3:BUUU"))],
    Layer("pykan KAN([4,3,2])", "kan", _pykan, ("4,4:BC",)),
    Layer("pykan KANLayer", "kan", lambda m: _Output(m.KANLayer(in_dim=4, out_dim=3, num=5, k=3)), ("4,4:BC",)),
    *[Layer(f"kan_gpt {name}", "kan_gpt.efficient_kan.model", make, (layout,)) for name, make, layout in (
        ("efficient KANLinear", lambda m: m.KANLinear(7, 5, grid_size=3, spline_order=3), VECTOR),
        ("efficient KAN (as in its GPT)", lambda m: m.KAN(width=[8, 6]), SEQUENCE),
        ("CausalSelfAttention (efficient KAN)", _kan_gpt_attention, SEQUENCE))],
    *[Layer(f"fft_conv_pytorch {name}", "fft_conv_pytorch", make, (layout,)) for name, make, layout in (
        ("FFTConv1d", lambda m: m.FFTConv1d(3, 4, 3, padding=1), "2,3,16:BCT"),
        ("FFTConv2d", lambda m: m.FFTConv2d(8, 4, 3, padding=1), IMAGE),
        ("FFTConv2d, stride 2, dilation 2, groups 2",
         lambda m: m.FFTConv2d(8, 4, 3, padding=2, stride=2, dilation=2, groups=2), IMAGE))],
    *[Layer(f"pytorch_tcn {name}", "pytorch_tcn", make, (layout,)) for name, make, layout in (
        ("TCN, causal, weight_norm", lambda m: m.TCN(8, [6, 6], kernel_size=3, dropout=0.1), "2,8,16:BCT"),
        ("TCN, non-causal, batch_norm, skip, NLC",
         lambda m: m.TCN(8, [6, 4], kernel_size=3, dropout=0.1, causal=False, use_norm="batch_norm",
                         use_skip_connections=True, input_shape="NLC"), "2,16,8:BTC"))],
    # PyTorch's own quantisation-aware training modules, with fbgemm's default QAT qconfig
    *[Layer(f"torch.ao {name}", "torch.ao.quantization", make, (layout,)) for name, make, layout in (
        ("qat Linear", lambda q: _qat("torch.ao.nn.qat", "Linear", q, 7, 5), VECTOR),
        ("qat Conv2d", lambda q: _qat("torch.ao.nn.qat", "Conv2d", q, 8, 4, 3), IMAGE),
        ("qat ConvBn2d", lambda q: _qat("torch.ao.nn.intrinsic.qat", "ConvBn2d", q, 8, 4, 3), IMAGE),
        ("FakeQuantize", lambda q: q.FakeQuantize(), VECTOR),
        ("prepare_qat(conv, relu)", _prepared_qat, IMAGE))],
    *[Layer(f"torch-harmonics {name}", "torch_harmonics", make, (layout,)) for name, make, layout in (
        ("RealSHT (real and imaginary parts)", lambda m: _Realised(m.RealSHT(8, 16)), SPHERE),
        ("InverseRealSHT (of real and imaginary parts)", lambda m: _Complex(m.InverseRealSHT(8, 16)),
         "2,3,4,4,2:BCSSU"),
        ("DiscreteContinuousConvS2", lambda m: m.DiscreteContinuousConvS2(3, 4, (8, 16), (8, 16), kernel_shape=3),
         SPHERE),
        ("DiscreteContinuousConvTransposeS2",
         lambda m: m.DiscreteContinuousConvTransposeS2(3, 4, (8, 16), (8, 16), kernel_shape=3), SPHERE),
        ("SpectralConvS2", lambda m: m.SpectralConvS2((8, 16), (8, 16), 3, 4, bias=True), SPHERE),
        ("ResampleS2", lambda m: m.ResampleS2(8, 16, 12, 24), SPHERE),
        ("QuadratureS2", lambda m: m.QuadratureS2((8, 16)), SPHERE),
        ("AttentionS2", lambda m: m.AttentionS2(4, 2, (8, 16), (8, 16)), "2,4,8,16:BCSS"),
        # its custom-operator handle cannot be deep-copied: the class, so that copy says so
        ("NeighborhoodAttentionS2", lambda m: Built(m.NeighborhoodAttentionS2, {
            "in_channels": 4, "in_shape": (8, 16), "out_shape": (8, 16), "num_heads": 2}), "2,4,8,16:BCSS"))],
    *[Layer(f"local-attention {name}", "local_attention", make, layouts) for name, make, layouts in (
        ("LocalAttention", lambda m: _LocalAttention(m), ("2,2,6,4:BCTU",) * 3),
        ("LocalAttention causal", lambda m: _LocalAttention(m, causal=True), ("2,2,6,4:BCTU",) * 3),
        ("LocalMHA", lambda m: m.LocalMHA(dim=8, window_size=2, dim_head=4, heads=2), ("2,6,8:BTC",)),
        ("LocalMHA causal, prenorm, qk RMSNorm", lambda m: m.LocalMHA(
            dim=8, window_size=2, dim_head=4, heads=2, causal=True, qk_rmsnorm=True, prenorm=True), ("2,6,8:BTC",)))],
    *[Layer(f"rotary-embedding-torch {name}", "rotary_embedding_torch", make, layouts)
      for name, make, layouts in (
        ("RotaryEmbedding", lambda m: _Rotary(), ("2,2,6,8:BCTU",)),
        ("RotaryEmbedding, learned frequencies", lambda m: _Rotary(learned_freq=True), ("2,2,6,8:BCTU",)),
        ("RotaryEmbedding xpos", lambda m: Built(_Rotary, {"use_xpos": True}), ("2,2,6,8:BCTU",) * 2))],
    *[Layer(f"colt5-attention {name}", "colt5_attention", make, (layout,)) for name, make, layout in (
        ("ConditionalRoutedFeedForward", lambda m: m.ConditionalRoutedFeedForward(8, num_heavy_tokens=3),
         "2,6,8:BTC"),
        *[(name, lambda m, cls=cls, extra=extra: Built(getattr(m, cls), {
            "dim": 8, "num_heavy_tokens_q": 3, "num_heavy_tokens_kv": 3, "light_dim_head": 4, "light_heads": 2,
            "light_window_size": 2, "heavy_dim_head": 4, "heavy_heads": 2, **extra}), layout)
          for name, cls, extra, layout in (
            ("ConditionalRoutedAttention", "ConditionalRoutedAttention", {}, "2,6,8:BTC"),
            ("ConditionalRoutedImageAttention", "ConditionalRoutedImageAttention", {"channel_first": True},
             "2,8,4,4:BCSS"))])],
    *[Layer(f"hyper-connections {name}", "hyper_connections", make, ("4,6,8:BTC",)) for name, make in (
        ("HyperConnections", lambda m: _HyperConnections(m)),
        ("HyperConnections, stream embedding", lambda m: _HyperConnections(m, dim=8, add_stream_embed=True)),
        ("ManifoldConstrainedHyperConnections", lambda m: _HyperConnections(m, constrained=True)))],
    Layer("axial-positional-embedding AxialPositionalEmbedding", "axial_positional_embedding",
          lambda m: m.AxialPositionalEmbedding(8, (2, 3)), ("2,6,8:BTC",)),
    # peft's adapters on a two-layer MLP and a two-layer CNN (LoRA's B starts at zero: A's gradient is zero)
    *[Layer(f"peft {config}{'' if not kwargs else ' ' + _shown(kwargs)} on {base}", "peft",
            lambda m, config=config, kwargs=kwargs, base=base: m.get_peft_model(
                _PEFT_BASES[base](), getattr(m, config)(target_modules=["0", "2"], **kwargs)), (_PEFT_LAYOUTS[base],))
      for base, config, kwargs in (
          *[("an MLP", config, kwargs) for config, kwargs in (
              ("LoraConfig", {"r": 2}), ("LoraConfig", {"r": 2, "lora_dropout": 0.1}),
              ("LoraConfig", {"r": 2, "use_dora": True}), ("LoraConfig", {"r": 2, "use_rslora": True,
                                                                          "init_lora_weights": "gaussian"}),
              ("LoraConfig", {"r": 2, "init_lora_weights": "pissa"}),
              ("LoraConfig", {"r": 2, "init_lora_weights": "olora"}),
              ("LoHaConfig", {"r": 2}), ("LoKrConfig", {"r": 2}), ("IA3Config", {"feedforward_modules": ["2"]}),
              ("OFTConfig", {"r": 0, "oft_block_size": 2}), ("BOFTConfig", {"boft_block_size": 2}),
              ("VeraConfig", {"r": 2}), ("FourierFTConfig", {"n_frequency": 8}), ("HRAConfig", {"r": 2}),
              ("MissConfig", {"r": 2}), ("VBLoRAConfig", {"r": 2, "num_vectors": 8, "vector_length": 4}),
              ("C3AConfig", {"block_size": 4}), ("RandLoraConfig", {"r": 2}), ("ShiraConfig", {"r": 2}),
              ("DeloraConfig", {"r": 2}), ("GraloraConfig", {"r": 4, "gralora_k": 2}),
              ("WaveFTConfig", {"n_frequency": 8}))],
          *[("a CNN", config, kwargs) for config, kwargs in (
              ("LoraConfig", {"r": 2}), ("LoraConfig", {"r": 2, "use_dora": True}), ("LoHaConfig", {"r": 2}),
              ("LoKrConfig", {"r": 2}), ("OFTConfig", {"r": 0, "oft_block_size": 2}),
              ("BOFTConfig", {"boft_block_size": 2}), ("IA3Config", {"feedforward_modules": ["2"]}))])],
    # torchao's quantisation-aware training: fake quantisation with straight-through gradients
    *[Layer(f"torchao FakeQuantizedLinear {name}", "torchao.quantization.qat",
            lambda m, activation=activation, weight=weight: m.FakeQuantizedLinear(
                8, 4, activation_config=activation and m.IntxFakeQuantizeConfig(*activation[0], **activation[1]),
                weight_config=m.IntxFakeQuantizeConfig(*weight[0], **weight[1])), ("4,8:BC",))
      for name, activation, weight in (
          ("int4 weight, group 4", None, ((torch.int4,), {"group_size": 4})),
          ("int8 per-token asymmetric activation, int4 weight", ((torch.int8, "per_token"), {"is_symmetric": False}),
           ((torch.int4,), {"group_size": 4})),
          ("int8 per-channel weight", None, ((torch.int8, "per_channel"), {})))],
    # segmentation_models_pytorch: blocks, and whole networks at 32x32 (their deepest BatchNorms
    # normalise two to eight values at a batch of two: Notes [a grown step that has not settled] and
    # [float64 settles a layout])
    Layer("segmentation_models_pytorch SCSEModule", "segmentation_models_pytorch.base.modules",
          lambda m: m.SCSEModule(8, reduction=2), (IMAGE,)),
    Layer("segmentation_models_pytorch Conv2dReLU", "segmentation_models_pytorch.base.modules",
          lambda m: m.Conv2dReLU(8, 4, 3, padding=1, use_norm="batchnorm"), (IMAGE,)),
    *[Layer(f"segmentation_models_pytorch {name} (resnet18)", "segmentation_models_pytorch",
            lambda m, name=name, kwargs=kwargs: getattr(m, name)("resnet18", encoder_weights=None, classes=2,
                                                                 **kwargs), ("2,3,32,32:BCSS",))
      for name, kwargs in (("Unet", {"decoder_channels": (16, 8, 8, 4, 4)}),
                           ("FPN", {"decoder_pyramid_channels": 32, "decoder_segmentation_channels": 32}))],
    # lucidrains' vit-pytorch: whole vision transformers, one block each, on 16x16 images
    *[Layer(f"vit-pytorch {module}.{cls}", "vit_pytorch.vit",
            lambda _, module=module, cls=cls, extra=extra: _vit(module, cls, **extra), (_VIT_IMAGE,))
      for module, cls, extra in (
          ("ats_vit", "ViT", {"max_tokens_per_depth": (8,)}), ("cait", "CaiT", {"cls_depth": 1}),
          ("deepvit", "DeepViT", {}), ("jet_vit", "JetViT", {"window_size": 2}), ("jumbo_vit", "JumboViT", {}),
          ("na_vit", "NaViT", {}), ("normalized_vit", "nViT", {}), ("parallel_vit", "ViT", {}),
          ("pit", "PiT", {"depth": (1, 1)}), ("rvt", "RvT", {}), ("simple_uvit", "SimpleUViT", {"depth": 2}),
          ("simple_vit", "SimpleViT", {}), ("simple_vit_with_fft", "SimpleViT", {"freq_patch_size": 4}),
          ("simple_vit_with_hyper_connections", "SimpleViT", {"num_residual_streams": 2}),
          ("simple_vit_with_patch_dropout", "SimpleViT", {}), ("simple_vit_with_qk_norm", "SimpleViT", {}),
          ("simple_vit_with_register_tokens", "SimpleViT", {}),
          ("simple_vit_with_value_residual", "SimpleViT", {}), ("vit", "ViT", {}), ("vit_5", "ViT", {}),
          ("vit_for_small_dataset", "ViT", {}), ("vit_with_patch_dropout", "ViT", {}),
          ("xcit", "XCiT", {"cls_depth": 1}),
          ("cross_vit", "CrossViT", {"sm_dim": 16, "lg_dim": 16, "sm_patch_size": 4, "sm_enc_heads": 2,
                                     "sm_enc_mlp_dim": 16, "sm_enc_dim_head": 8, "lg_patch_size": 8, "lg_enc_depth": 1,
                                     "lg_enc_heads": 2, "lg_enc_mlp_dim": 16, "lg_enc_dim_head": 8,
                                     "cross_attn_depth": 1, "cross_attn_heads": 2, "cross_attn_dim_head": 8}))],
    # transformers' hand-written backward passes: BLOOM's GELU, SEW-D's (DeBERTa's) masked softmax and
    # dropout, RecurrentGemma's RG-LRU (a square root with a clipped derivative), PhiMoE's sparse mixer
    *[Layer(f"transformers {name}", "transformers", make, layouts) for name, make, layouts in (
        ("BloomGelu (GeLUFunction)", _hf("bloom.modeling_bloom", lambda m: m.BloomGelu()), (SEQUENCE8,)),
        ("SEW-D XSoftmax", _hf("sew_d.modeling_sew_d", lambda m: _XSoftmax(m.XSoftmax)),
         (SEQUENCE8, "2,6,8:BTC dtype=bool values=0.8")),
        ("SEW-D StableDropout (XDropout)", _hf("sew_d.modeling_sew_d", lambda m: m.StableDropout(0.25)), (SEQUENCE8,)),
        ("RecurrentGemmaRglru", _hf("recurrent_gemma.modeling_recurrent_gemma", _rglru),
         (SEQUENCE8, "2,6:BT dtype=int64 values=0:4")),
        ("PhimoeSparseMoeBlock (sparse mixer)", _hf("phimoe.modeling_phimoe", _phimoe), (SEQUENCE8,)))],
    # diffusers: the blocks of its U-Nets, VAEs and diffusion transformers, and two whole tiny models
    *[Layer(f"diffusers {name}", "diffusers.models.resnet", make, layouts) for name, make, layouts in (
        ("ResnetBlock2D", lambda m: m.ResnetBlock2D(in_channels=8, out_channels=8, temb_channels=16, groups=4),
         (IMAGE8, _TEMB)),
        ("ResnetBlock2D, scale-shift time embedding", lambda m: m.ResnetBlock2D(
            in_channels=8, out_channels=8, temb_channels=16, groups=4, time_embedding_norm="scale_shift"),
         (IMAGE8, _TEMB)),
        ("ResnetBlock2D, FIR downsampling", lambda m: m.ResnetBlock2D(
            in_channels=8, out_channels=8, temb_channels=16, groups=4, down=True, kernel="fir"), (IMAGE8, _TEMB)),
        ("ResnetBlock2D, upsampling", lambda m: m.ResnetBlock2D(
            in_channels=8, out_channels=8, temb_channels=16, groups=4, up=True), (IMAGE8, _TEMB)),
        ("Downsample2D, conv", lambda m: m.Downsample2D(8, use_conv=True), (IMAGE8,)),
        ("Downsample2D, pooling", lambda m: m.Downsample2D(8), (IMAGE8,)),
        ("Upsample2D, conv", lambda m: m.Upsample2D(8, use_conv=True), (IMAGE8,)),
        ("Upsample2D, transposed conv", lambda m: m.Upsample2D(8, use_conv_transpose=True), (IMAGE8,)),
        ("FirDownsample2D", lambda m: m.FirDownsample2D(8, use_conv=True, out_channels=8), (IMAGE8,)),
        ("FirUpsample2D", lambda m: m.FirUpsample2D(8, use_conv=True, out_channels=8), (IMAGE8,)),
        ("KDownsample2D", lambda m: m.KDownsample2D(), (IMAGE8,)),
        ("KUpsample2D", lambda m: m.KUpsample2D(), (IMAGE8,)))],
    Layer("diffusers ResnetBlock2D 8->16, no time embedding", "diffusers.models.resnet",
          lambda m: m.ResnetBlock2D(in_channels=8, out_channels=16, temb_channels=None, groups=4), (IMAGE8,),
          {"temb": None}),
    *[Layer(f"diffusers {name}", "diffusers.models.attention_processor", make, layouts, kwargs)
      for name, make, layouts, kwargs in (
        ("Attention (SDPA)", lambda m: m.Attention(query_dim=8, heads=2, dim_head=4), (SEQUENCE8,), {}),
        ("Attention (AttnProcessor)", lambda m: m.Attention(query_dim=8, heads=2, dim_head=4,
                                                            processor=m.AttnProcessor()), (SEQUENCE8,), {}),
        ("Attention, cross", lambda m: m.Attention(query_dim=8, cross_attention_dim=6, heads=2, dim_head=4),
         (SEQUENCE8,), {"encoder_hidden_states": "2,5,6:BTC"}),
        ("Attention, q/k RMSNorm", lambda m: m.Attention(query_dim=8, heads=2, dim_head=4, qk_norm="rms_norm"),
         (SEQUENCE8,), {}),
        ("Attention, VAE's (group norm, residual)", lambda m: m.Attention(
            query_dim=8, heads=2, dim_head=4, norm_num_groups=4, residual_connection=True, bias=True,
            upcast_softmax=True, _from_deprecated_attn_block=True), (IMAGE8,), {}))],
    *[Layer(f"diffusers {name}", "diffusers.models.attention", make, (SEQUENCE8,), kwargs)
      for name, make, kwargs in (
        ("BasicTransformerBlock", lambda m: m.BasicTransformerBlock(8, 2, 4, cross_attention_dim=6),
         {"encoder_hidden_states": "2,5,6:BTC"}),
        ("FeedForward (GEGLU)", lambda m: m.FeedForward(8, mult=2, activation_fn="geglu"), {}),
        ("FeedForward (tanh GELU)", lambda m: m.FeedForward(8, mult=2, activation_fn="gelu-approximate"), {}))],
    *[Layer(f"diffusers {name}", "diffusers.models.activations", make, (SEQUENCE8,)) for name, make in (
        ("GEGLU", lambda m: m.GEGLU(8, 16)), ("SwiGLU", lambda m: m.SwiGLU(8, 16)),
        ("ApproximateGELU", lambda m: m.ApproximateGELU(8, 16)))],
    *[Layer(f"diffusers {name}", "diffusers.models.normalization", make, layouts) for name, make, layouts in (
        ("AdaGroupNorm", lambda m: m.AdaGroupNorm(16, 8, num_groups=4), (IMAGE8, _TEMB)),
        ("RMSNorm", lambda m: m.RMSNorm(8, eps=1e-6), (SEQUENCE8,)),
        ("RMSNorm, affine", lambda m: m.RMSNorm(8, eps=1e-6, elementwise_affine=True), (SEQUENCE8,)),
        ("GlobalResponseNorm", lambda m: m.GlobalResponseNorm(8), ("2,4,4,8:BSSC",)),
        ("AdaLayerNormContinuous", lambda m: m.AdaLayerNormContinuous(8, 16, elementwise_affine=False, eps=1e-6),
         (SEQUENCE8, _TEMB)))],
    *[Layer(f"diffusers {name}", "diffusers.models.embeddings", make, layouts) for name, make, layouts in (
        ("TimestepEmbedding", lambda m: m.TimestepEmbedding(8, 16), ("4,8:BC",)),
        ("Timesteps (sinusoidal)", lambda m: m.Timesteps(8, True, 0), ("4:B values=0:1000",)),
        ("GaussianFourierProjection", lambda m: m.GaussianFourierProjection(embedding_size=8),
         ("4:B values=0.1:1",)),
        ("PatchEmbed", lambda m: m.PatchEmbed(height=8, width=8, patch_size=2, in_channels=8, embed_dim=8),
         (IMAGE8,)))],
    *[Layer(f"diffusers {name}", "diffusers.models.unets.unet_2d_blocks", make, layouts)
      for name, make, layouts in (
        ("UNetMidBlock2D", lambda m: m.UNetMidBlock2D(in_channels=8, temb_channels=16, resnet_groups=4,
                                                      attention_head_dim=4), (IMAGE8, _TEMB)),
        ("DownEncoderBlock2D", lambda m: m.DownEncoderBlock2D(in_channels=8, out_channels=8, resnet_groups=4),
         (IMAGE8,)),
        ("UpDecoderBlock2D", lambda m: m.UpDecoderBlock2D(in_channels=8, out_channels=8, resnet_groups=4),
         (IMAGE8,)))],
    *[Layer(f"diffusers {name}", "diffusers", make, layouts) for name, make, layouts in (
        ("Transformer2DModel", lambda m: _Sample(m.Transformer2DModel(
            num_attention_heads=2, attention_head_dim=4, in_channels=8, norm_num_groups=4)), (IMAGE8,)),
        ("AutoencoderKL (one level of 8 channels)", lambda m: _Sample(m.AutoencoderKL(
            in_channels=3, out_channels=3, block_out_channels=(8,), layers_per_block=1, norm_num_groups=4,
            latent_channels=2, sample_size=8)), ("2,3,8,8:BCSS",)),
        ("UNet2DModel (8 and 16 channels, attention at 4x4)", lambda m: _Sample(m.UNet2DModel(
            sample_size=8, in_channels=3, out_channels=3, block_out_channels=(8, 16), layers_per_block=1,
            norm_num_groups=4, attention_head_dim=4, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"))), ("2,3,8,8:BCSS", "2:B values=0:1000 grad=no")))],
    # ultralytics: the YOLO blocks (convolutions with BatchNorm and SiLU, CSP and ELAN blocks, pooling
    # pyramids, attention), as its model YAMLs wire them
    *[Layer(f"ultralytics {name}", "ultralytics.nn.modules", make, (IMAGE8,)) for name, make in (
        ("Conv", lambda m: m.Conv(8, 8, 3)), ("Conv, stride 2", lambda m: m.Conv(8, 16, 3, 2)),
        ("DWConv", lambda m: m.DWConv(8, 8, 3)), ("GhostConv", lambda m: m.GhostConv(8, 8)),
        ("RepConv", lambda m: m.RepConv(8, 8)), ("LightConv", lambda m: m.LightConv(8, 8, 3)),
        ("ConvTranspose", lambda m: m.ConvTranspose(8, 8)), ("Focus", lambda m: m.Focus(8, 8)),
        ("Bottleneck", lambda m: m.Bottleneck(8, 8)), ("BottleneckCSP", lambda m: m.BottleneckCSP(8, 8)),
        ("GhostBottleneck", lambda m: m.GhostBottleneck(8, 8)), ("C1", lambda m: m.C1(8, 8)),
        ("C2", lambda m: m.C2(8, 8)), ("C2f", lambda m: m.C2f(8, 8, 1, True)), ("C3", lambda m: m.C3(8, 8)),
        ("C3k2", lambda m: m.C3k2(8, 8, 1, True)), ("C3x", lambda m: m.C3x(8, 8)),
        ("C3Ghost", lambda m: m.C3Ghost(8, 8)), ("SPP", lambda m: m.SPP(8, 8)), ("SPPF", lambda m: m.SPPF(8, 8)),
        ("SPPELAN", lambda m: m.SPPELAN(8, 8, 4)), ("ELAN1", lambda m: m.ELAN1(8, 8, 8, 4)),
        ("RepNCSPELAN4", lambda m: m.RepNCSPELAN4(8, 8, 8, 4)), ("SCDown", lambda m: m.SCDown(8, 16, 3, 2)),
        ("ADown", lambda m: m.ADown(8, 16)), ("PSA", lambda m: m.PSA(8, 8)), ("C2PSA", lambda m: m.C2PSA(8, 8)),
        ("C2fPSA", lambda m: m.C2fPSA(8, 8)), ("CIB", lambda m: m.CIB(8, 8)), ("C2fCIB", lambda m: m.C2fCIB(8, 8)),
        ("RepVGGDW", lambda m: m.RepVGGDW(8)), ("CBAM", lambda m: m.CBAM(8)),
        ("Attention", lambda m: m.Attention(8, 2)), ("AIFI", lambda m: m.AIFI(8, 16, 2)),
        ("HGStem", lambda m: m.HGStem(8, 8, 8)),
        ("HGBlock", lambda m: m.HGBlock(8, 8, 8, 3, 2)), ("ResNetLayer", lambda m: m.ResNetLayer(8, 4, is_first=False)),
        ("LayerNorm2d", lambda m: m.LayerNorm2d(8)), ("Proto", lambda m: m.Proto(8, 8, 4)),
        ("Classify", lambda m: m.Classify(8, 4)))],
    # whole YOLOv8n models built from their YAML (1.4 and 3.0 million parameters)
    *[Layer(f"ultralytics {name}", "ultralytics.nn.tasks", make, (layout,)) for name, make, layout in (
        ("YOLOv8n-cls (whole, 4 classes)", lambda m: m.ClassificationModel("yolov8n-cls.yaml", nc=4, verbose=False),
         "2,3,32,32:BCSS"),
        ("YOLOv8n (whole detector, 4 classes)", lambda m: m.DetectionModel("yolov8n.yaml", nc=4, verbose=False),
         "2,3,64,64:BCSS"))],
    # open_clip: CLIP's transformer blocks, its vision and text towers (tiny), its modified ResNet
    *[Layer(f"open_clip {name}", module, make, layouts) for name, module, make, layouts in (
        ("Attention", "open_clip.transformer", lambda m: m.Attention(8, 2), (SEQUENCE8,)),
        ("Attention, scaled cosine, head scales, inner norm", "open_clip.transformer", lambda m: m.Attention(
            8, 2, scaled_cosine=True, scale_heads=True, inner_norm=True), (SEQUENCE8,)),
        ("Attention, q/k norm", "open_clip.transformer", lambda m: m.Attention(8, 2, qk_norm=True), (SEQUENCE8,)),
        ("AttentionalPooler", "open_clip.transformer", lambda m: m.AttentionalPooler(8, 6, 2, n_queries=4),
         ("2,5,6:BTC",)),
        ("ResidualAttentionBlock, layer scale", "open_clip.transformer",
         lambda m: m.ResidualAttentionBlock(8, 2, ls_init_value=0.1), (SEQUENCE8,)),
        ("ResidualAttentionBlock, cross", "open_clip.transformer",
         lambda m: m.ResidualAttentionBlock(8, 2, is_cross_attention=True), (SEQUENCE8, "2,5,8:BTC", "2,5,8:BTC")),
        ("CustomResidualAttentionBlock (NormFormer scalings)", "open_clip.transformer",
         lambda m: m.CustomResidualAttentionBlock(8, 2, scale_cosine_attn=True, scale_heads=True, scale_attn=True,
                                                  scale_fc=True), (SEQUENCE8,)),
        ("LayerNorm", "open_clip.transformer", lambda m: m.LayerNorm(8), (SEQUENCE8,)),
        ("LayerNormFp32", "open_clip.transformer", lambda m: m.LayerNormFp32(8), (SEQUENCE8,)),
        ("LayerScale", "open_clip.transformer", lambda m: m.LayerScale(8, 0.1), (SEQUENCE8,)),
        ("PatchDropout", "open_clip.transformer", lambda m: m.PatchDropout(0.5), (SEQUENCE8,)),
        ("QuickGELU", "open_clip.transformer", lambda m: m.QuickGELU(), (SEQUENCE8,)),
        ("Transformer (two blocks)", "open_clip.transformer", lambda m: m.Transformer(8, 2, 2), (SEQUENCE8,)),
        ("VisionTransformer", "open_clip.transformer",
         lambda m: m.VisionTransformer(16, 4, 16, 1, 2, 2.0, output_dim=8), ("2,3,16,16:BCSS",)),
        ("VisionTransformer, attentional pooling", "open_clip.transformer", lambda m: m.VisionTransformer(
            16, 4, 16, 1, 2, 2.0, output_dim=8, attentional_pool=True, attn_pooler_queries=4, attn_pooler_heads=2),
         ("2,3,16,16:BCSS",)),
        ("TextTransformer", "open_clip.transformer", lambda m: m.TextTransformer(
            context_length=6, vocab_size=20, width=8, heads=2, layers=1, output_dim=4),
         ("2,6:BT dtype=int64 values=0:20",)),
        ("AttentionPool2d", "open_clip.modified_resnet", lambda m: m.AttentionPool2d(4, 8, 2, 6), ("2,8,4,4:BCSS",)),
        ("ModifiedResNet (whole, width 8)", "open_clip.modified_resnet",
         lambda m: m.ModifiedResNet([1, 1, 1, 1], 8, 2, image_size=64, width=8), ("2,3,64,64:BCSS",)))],
    # lightly: self-supervised projection and prediction heads (BatchNorm over the batch, weight-normed
    # DINO heads), its nearest-neighbour memory bank, and its batch-wide losses
    *[Layer(f"lightly {name}", "lightly.models.modules", make, (layout,)) for name, make, layout in (
        ("SimCLRProjectionHead", lambda m: m.SimCLRProjectionHead(8, 16, 4), VECTOR8),
        ("SimCLRProjectionHead v2 (three layers)", lambda m: m.SimCLRProjectionHead(8, 16, 4, num_layers=3),
         VECTOR8),
        ("BYOLProjectionHead", lambda m: m.BYOLProjectionHead(8, 16, 4), VECTOR8),
        ("BYOLPredictionHead", lambda m: m.BYOLPredictionHead(4, 16, 4), "4,4:BC"),
        ("BarlowTwinsProjectionHead", lambda m: m.BarlowTwinsProjectionHead(8, 16, 4), VECTOR8),
        ("MoCoProjectionHead", lambda m: m.MoCoProjectionHead(8, 16, 4), VECTOR8),
        ("NNCLRProjectionHead", lambda m: m.NNCLRProjectionHead(8, 16, 4), VECTOR8),
        ("SimSiamProjectionHead", lambda m: m.SimSiamProjectionHead(8, 16, 4), VECTOR8),
        ("SimSiamPredictionHead", lambda m: m.SimSiamPredictionHead(4, 16, 4), "4,4:BC"),
        ("SwaVProjectionHead", lambda m: m.SwaVProjectionHead(8, 16, 4), VECTOR8),
        ("SwaVPrototypes", lambda m: m.SwaVPrototypes(8, 5), VECTOR8),
        # legacy weight_norm: the instance cannot be deep-copied, so the class (copy says why)
        ("DINOProjectionHead", lambda m: Built(m.DINOProjectionHead, _DINO), VECTOR8),
        ("DINOProjectionHead, last layer frozen", lambda m: Built(m.DINOProjectionHead, {
            **_DINO, "freeze_last_layer": 1}), VECTOR8),
        ("DINOv2ProjectionHead", lambda m: Built(m.DINOv2ProjectionHead, _DINO), VECTOR8),
        ("SMoGProjectionHead", lambda m: m.SMoGProjectionHead(8, 16, 4), VECTOR8),
        ("MMCRProjectionHead", lambda m: m.MMCRProjectionHead(8, 16, 4), VECTOR8),
        ("NNMemoryBankModule", lambda m: m.NNMemoryBankModule(size=(16, 8)), VECTOR8))],
    *[Layer(f"lightly {name}", "lightly.loss", make, (VECTOR8, VECTOR8)) for name, make in (
        ("NTXentLoss", lambda m: m.NTXentLoss()), ("BarlowTwinsLoss", lambda m: m.BarlowTwinsLoss()),
        ("VICRegLoss", lambda m: m.VICRegLoss()), ("DCLLoss", lambda m: m.DCLLoss()),
        ("NegativeCosineSimilarity", lambda m: m.NegativeCosineSimilarity()))],
    # diffsort: differentiable sorting networks (its Gaussian relaxation a Function without @staticmethod)
    *[Layer(f"diffsort DiffSortNet ({network}, {distribution})", "diffsort",
            lambda m, network=network, distribution=distribution: m.DiffSortNet(
                network, 4, steepness=10, distribution=distribution), ("3,4:BC",))
      for network, distribution in (("odd_even", "cauchy"), ("odd_even", "gaussian"), ("bitonic", "logistic_phi"),
                                    ("bitonic", "optimal"))],
    # neuraloperator: Fourier neural operators (complex64 spectral weights, dense and tensor-factorised)
    *[Layer(f"neuraloperator SpectralConv {name}", "neuralop.layers.spectral_convolution",
            lambda m, modes=modes, kwargs=kwargs: m.SpectralConv(4, 4, n_modes=modes, **kwargs), (layout,))
      for name, modes, kwargs, layout in (
          ("dense 2d", (3, 3), {}, _FOURIER_IMAGE), ("dense 1d", (4,), {}, "2,4,16:BCT"),
          ("Tucker 2d", (3, 3), {"factorization": "tucker", "rank": 0.5}, _FOURIER_IMAGE),
          ("CP 2d", (3, 3), {"factorization": "cp", "rank": 0.5}, _FOURIER_IMAGE),
          ("TT 2d", (3, 3), {"factorization": "tt", "rank": 0.5}, _FOURIER_IMAGE),
          ("separable 2d", (3, 3), {"separable": True}, _FOURIER_IMAGE))],
    *[Layer(f"neuraloperator FNOBlocks{name}", "neuralop.layers.fno_block",
            lambda m, kwargs=kwargs: m.FNOBlocks(4, 4, n_modes=(3, 3), n_layers=1, **kwargs), (_FOURIER_IMAGE,))
      for name, kwargs in (("", {}), (", instance norm", {"norm": "instance_norm"}),
                           (", channel MLP", {"use_channel_mlp": True}))],
    *[Layer(f"neuraloperator {name}", "neuralop.models", make, (_FOURIER_IMAGE,)) for name, make in (
        ("FNO 2d", lambda m: m.FNO(n_modes=(3, 3), in_channels=4, out_channels=2, hidden_channels=8, n_layers=2)),
        ("TFNO 2d (Tucker)", lambda m: m.TFNO(n_modes=(3, 3), in_channels=4, out_channels=2, hidden_channels=8,
                                              n_layers=2, factorization="tucker", rank=0.4)))],
    *[Layer(f"neuraloperator {name}", module, make, (layout,)) for name, module, make, layout in (
        ("ChannelMLP", "neuralop.layers.channel_mlp", lambda m: m.ChannelMLP(4, 4, hidden_channels=8),
         _FOURIER_IMAGE),
        ("LinearChannelMLP", "neuralop.layers.channel_mlp", lambda m: m.LinearChannelMLP([7, 8, 3]), VECTOR),
        ("soft-gating skip", "neuralop.layers.skip_connections",
         lambda m: m.skip_connection(4, 4, skip_type="soft-gating", n_dim=2), _FOURIER_IMAGE),
        ("GridEmbedding2D", "neuralop.layers.embeddings", lambda m: m.GridEmbedding2D(4), _FOURIER_IMAGE))],
    # julius: resampling, low-, high- and band-pass filters (sinc kernels) and FFT convolutions
    *[Layer(f"julius {name}", "julius", make, (layout,)) for name, make, layout in (
        ("ResampleFrac 4->5", lambda m: m.ResampleFrac(4, 5), _AUDIO),
        ("ResampleFrac 5->3", lambda m: m.ResampleFrac(5, 3), _AUDIO),
        ("LowPassFilter", lambda m: m.LowPassFilter(0.1), _AUDIO),
        ("LowPassFilters (FFT)", lambda m: m.LowPassFilters([0.05, 0.2], fft=True), _AUDIO),
        ("HighPassFilters", lambda m: m.HighPassFilters([0.1, 0.3]), _AUDIO),
        ("BandPassFilter", lambda m: m.BandPassFilter(0.1, 0.3), _AUDIO),
        ("SplitBands", lambda m: m.SplitBands(sample_rate=16000, n_bands=3), _AUDIO),
        ("FFTConv1d 1->4, stride 2", lambda m: m.FFTConv1d(1, 4, 9, stride=2), _AUDIO),
        ("FFTConv1d 3->2", lambda m: m.FFTConv1d(3, 2, 5), "2,3,48:BCT"))],
    # nnAudio: spectrograms as convolutions with Fourier, mel, constant-Q and gammatone kernels
    *[Layer(f"nnAudio {name}", "nnAudio.features", make, (layout,)) for name, make, layout in (
        ("STFT magnitude, trainable", lambda m: m.STFT(n_fft=32, hop_length=8, trainable=True,
                                                       output_format="Magnitude", verbose=False), _WAVE),
        ("STFT complex", lambda m: m.STFT(n_fft=32, hop_length=8, output_format="Complex", verbose=False), _WAVE),
        ("STFT phase", lambda m: m.STFT(n_fft=32, hop_length=8, output_format="Phase", verbose=False), _WAVE),
        ("MelSpectrogram, trainable", lambda m: m.MelSpectrogram(
            sr=8000, n_fft=64, hop_length=16, n_mels=8, trainable_mel=True, trainable_STFT=True, verbose=False),
         _WAVE),
        ("MFCC", lambda m: m.MFCC(sr=8000, n_mfcc=6, n_fft=64, hop_length=16, n_mels=8, verbose=False), _WAVE),
        ("Gammatonegram", lambda m: m.Gammatonegram(sr=8000, n_fft=64, n_bins=8, hop_length=16, verbose=False),
         _WAVE),
        ("CQT1992v2", lambda m: m.CQT1992v2(sr=8000, hop_length=32, fmin=500, n_bins=12, verbose=False),
         _WAVE1024),
        ("CQT2010v2", lambda m: m.CQT2010v2(sr=8000, hop_length=32, fmin=500, n_bins=12, verbose=False),
         _WAVE1024),
        ("VQT", lambda m: m.VQT(sr=8000, hop_length=32, fmin=500, n_bins=12, verbose=False), _WAVE1024))],
    # rational_activations: learnable rational functions (Padé activation units), the PyTorch versions
    *[Layer(f"rational Rational version {version}", "rational.torch",
            lambda m, version=version: m.Rational(approx_func="leaky_relu", degrees=(5, 4), cuda=False,
                                                  version=version), (IMAGE,)) for version in "ABCD"],
    # implicit layers: a quadratic program (qpth), a deep equilibrium model (torchdeq), controlled
    # differential equations (torchcde)
    Layer("qpth OptNet QP (shared Q, G, h)", "qpth.qp", _OptNet, ("4,5:BC",)),
    *[Layer(f"torchdeq DEQ {name}", "torchdeq", lambda m, config=config: _DEQ(m, **config), (_DEQ_INPUT,))
      for name, config in (
          ("implicit (IFT) gradient, Anderson", {"ift": True, "f_solver": "anderson", "f_max_iter": 200,
                                                  "f_tol": 1e-12, "b_solver": "anderson", "b_max_iter": 200,
                                                  "b_tol": 1e-12}),
          ("implicit (IFT) gradient, fixed-point iteration", {
              "ift": True, "f_solver": "fixed_point_iter", "f_max_iter": 300, "f_tol": 1e-13,
              "b_solver": "fixed_point_iter", "b_max_iter": 300, "b_tol": 1e-13}),
          ("phantom gradient (its default)", {}))],
    *[Layer(f"torchcde NeuralCDE {name}", "torchcde", lambda m, kwargs=kwargs: _NeuralCDE(m, **kwargs),
            ("2,5,3:BTC",))
      for name, kwargs in (("cubic spline, RK4", {}), ("linear interpolation, RK4", {"cubic": False}),
                           ("cubic spline, RK4, adjoint", {"adjoint": True}))],
    # geoopt: distances to learned hyperplanes of the Poincaré ball (points inside the ball)
    Layer("geoopt Distance2StereographicHyperplanes", "geoopt.layers.stereographic",
          lambda m: m.Distance2StereographicHyperplanes(4, 5, ball=importlib.import_module("geoopt").Stereographic(
              -1.0)), ("4,4:BC values=-0.2:0.2",)),
    # pypose: its hand-written Lie group Functions, alone and chained back to ordinary tensors
    *[Layer(f"pypose {name}", "pypose", lambda m, op=op: _LieOp(m, op), (layout,)) for name, op, layout in (
        ("so3 Exp", "Exp", "4,3:BC"), ("SO3 Log", "Log", "4,4:BC"), ("SO3 Act (learned rotation)", "rotate",
                                                                      "4,3:BC"))],
    *[Layer(f"pypose {group} chain", "pypose.lietensor.operation",
            lambda m, group=group, algebra=algebra: _LieChain(m, group, algebra), (f"4,{size}:BC", f"4,{size}:BC",
                                                                                   "4,3:BC"))
      for group, algebra, size in (("SO3", "so3", 3), ("SE3", "se3", 6), ("RxSO3", "rxso3", 4), ("Sim3", "sim3", 7))],
    # torch-dct: discrete cosine transforms through the FFT
    *[Layer(f"torch-dct {name}", "torch_dct", make, (layout,)) for name, make, layout in (
        ("dct", lambda m: _Function(m.dct), "3,8:BC"),
        ("dct_2d, orthonormal", lambda m: _Function(m.dct_2d, norm="ortho"), "2,6,8:BSS"),
        ("idct, orthonormal", lambda m: _Function(m.idct, norm="ortho"), "3,8:BC"))],
    # image and audio losses: SSIM and MS-SSIM (pytorch_msssim), auraloss's time and STFT losses
    *[Layer(f"pytorch_msssim {name}", "pytorch_msssim", make, (layout, layout)) for name, make, layout in (
        ("SSIM", lambda m: m.SSIM(data_range=1.0, channel=3, win_size=7), "2,3,16,16:BCSS values=0:1"),
        ("MS_SSIM", lambda m: m.MS_SSIM(data_range=1.0, channel=1, win_size=3), "2,1,64,64:BCSS values=0:1"))],
    *[Layer(f"auraloss {name}", "auraloss", make, (layout, layout)) for name, make, layout in (
        ("MultiResolutionSTFTLoss", lambda m: m.freq.MultiResolutionSTFTLoss(
            fft_sizes=[32, 64], hop_sizes=[8, 16], win_lengths=[32, 64]), "2,1,256:BCT"),
        ("SISDRLoss", lambda m: m.time.SISDRLoss(), _AUDIO), ("ESRLoss", lambda m: m.time.ESRLoss(), _AUDIO))],
    # asteroid-filterbanks: learned, STFT and parametrised sinc filterbanks, encoder through decoder
    *[Layer(f"asteroid-filterbanks {kind} encoder-decoder", "asteroid_filterbanks",
            lambda m, kind=kind, kwargs=kwargs: _EncoderDecoder(m, kind, **kwargs), ("2,1,128:BCT",))
      for kind, kwargs in (("free", {}), ("stft", {}), ("param_sinc", {"sample_rate": 8000}))],
    # geomloss: distances between point clouds (a batch of clouds, tensorised)
    *[Layer(f"geomloss SamplesLoss {loss}", "geomloss", lambda m, loss=loss, kwargs=kwargs: m.SamplesLoss(
        loss, backend="tensorized", **kwargs), ("2,6,3:BUC", "2,5,3:BUC"))
      for loss, kwargs in (("sinkhorn", {"blur": 0.5}), ("energy", {}), ("gaussian", {"blur": 0.5}))],
    # more of lucidrains' layers: equivariant graph networks, MLP mixers, mixtures of experts, state spaces,
    # hierarchical, latent (Perceiver) and linear attention
    *[Layer(f"lucidrains {name}", module, make, layouts) for name, module, make, layouts in (
        ("egnn-pytorch EGNN", "egnn_pytorch", lambda m: m.EGNN(dim=8), ("2,6,8:BUC", "2,6,3:BUC")),
        ("En-transformer EnTransformer", "en_transformer", lambda m: m.EnTransformer(
            dim=8, depth=1, dim_head=33, heads=1, neighbors=3), ("2,6,8:BUC", "2,6,3:BUC")),
        ("mlp-mixer MLPMixer", "mlp_mixer_pytorch", lambda m: m.MLPMixer(
            image_size=8, channels=3, patch_size=4, dim=16, depth=1, num_classes=5), ("2,3,8,8:BCSS",)),
        ("res-mlp ResMLP", "res_mlp_pytorch", lambda m: m.ResMLP(image_size=8, patch_size=4, dim=16, depth=1,
                                                                 num_classes=5), ("2,3,8,8:BCSS",)),
        ("g-mlp gMLP", "g_mlp_pytorch", lambda m: m.gMLP(dim=16, depth=1, seq_len=8), (_TOKENS,)),
        ("g-mlp gMLP, causal, tiny attention", "g_mlp_pytorch", lambda m: m.gMLP(
            dim=16, depth=1, seq_len=8, causal=True, attn_dim=8), (_TOKENS,)),
        ("soft-moe SoftMoE", "soft_moe_pytorch", lambda m: m.SoftMoE(dim=16, seq_len=8, num_experts=4), (_TOKENS,)),
        ("st-moe MoE", "st_moe_pytorch", lambda m: _Part(m.MoE(dim=16, num_experts=4, gating_top_n=2), "outputs"),
         (_TOKENS,)),
        ("mixture-of-experts MoE", "mixture_of_experts", lambda m: _Output(m.MoE(dim=16, num_experts=4)), (_TOKENS,)),
        ("Mega-pytorch MegaLayer", "mega_pytorch", lambda m: m.MegaLayer(dim=16, ema_heads=4, attn_dim_qk=8,
                                                                         attn_dim_value=16), (_TOKENS,)),
        ("gated-state-spaces GSS", "gated_state_spaces_pytorch", lambda m: m.GSS(dim=16, dss_kernel_N=8,
                                                                                 dss_kernel_H=16), (_TOKENS,)),
        ("h-transformer-1d HAttention1D", "h_transformer_1d.h_transformer_1d", lambda m: m.HAttention1D(
            dim=16, heads=2, dim_head=8, block_size=2), ("2,16,16:BTC",)),
        ("perceiver-pytorch Perceiver", "perceiver_pytorch", lambda m: m.Perceiver(
            input_channels=3, input_axis=2, num_freq_bands=4, max_freq=4., depth=1, num_latents=4, latent_dim=16,
            cross_heads=1, latent_heads=2, cross_dim_head=8, latent_dim_head=8, num_classes=5), ("2,6,6,3:BSSC",)),
        ("perceiver-pytorch PerceiverIO", "perceiver_pytorch", lambda m: _Part(m.PerceiverIO(
            dim=16, queries_dim=8, depth=1, num_latents=4, latent_dim=16, cross_heads=1, latent_heads=2,
            cross_dim_head=8, latent_dim_head=8, logits_dim=5), None, ("queries",)), (_TOKENS, "2,3,8:BTC")),
        ("linear-attention-transformer SelfAttention", "linear_attention_transformer.linear_attention_transformer",
         lambda m: m.SelfAttention(dim=16, heads=2), (_TOKENS,)),
        ("bidirectional-cross-attention", "bidirectional_cross_attention", lambda m: m.BidirectionalCrossAttention(
            dim=16, heads=2, dim_head=8, context_dim=8), (_TOKENS, "2,5,8:BTC")))],
    # SRU's recurrent cell (its CPU kernel), and torchkbnufft's non-uniform FFTs (hand-written
    # interpolation Functions, complex data as real pairs)
    *[Layer(f"sru SRU{name}", "sru", lambda m, kwargs=kwargs: _Output(m.SRU(8, 8, num_layers=2, **kwargs)),
            ("5,2,8:TBC",)) for name, kwargs in (("", {}), (", bidirectional", {"bidirectional": True}))],
    *[Layer(f"torchkbnufft {name}", "torchkbnufft", make, (layout,)) for name, make, layout in (
        ("KbNufft", lambda m: _NUFFT(m), "1,2,8,8,2:BCSSU"),
        ("KbNufft, learned trajectory", lambda m: _NUFFT(m, learned=True), "1,2,8,8,2:BCSSU"),
        ("KbNufftAdjoint", lambda m: _NUFFT(m, adjoint=True), "1,2,12,2:BCTU"))],
    # pytorch-crf's linear-chain CRF (the log-likelihood of tag sequences) and FrEIA's invertible networks
    Layer("pytorch-crf CRF log-likelihood", "torchcrf",
          lambda m: _Part(m.CRF(5, batch_first=True), None, ("tags",)), ("2,6,5:BTC", "2,6:BT dtype=int64 values=0:5")),
    *[Layer(f"FrEIA SequenceINN of {block}", "FrEIA.modules", lambda m, block=block: _INN(m, block), ("4,6:BC",))
      for block in ("AllInOneBlock", "GLOWCouplingBlock", "RNVPCouplingBlock", "NICECouplingBlock",
                    "GINCouplingBlock")],
    # SpeechBrain: quaternion and complex-valued networks (QLinear's hand-written backward among them), light
    # GRUs, SincNet's filters, statistics pooling, speaker embeddings (ECAPA-TDNN, x-vectors), PCEN, Conformer
    *[Layer(f"speechbrain {name}", "speechbrain", lambda m, module=module, make=make: make(_speechbrain(module)),
            (layout,)) for name, module, make, layout in (
        ("QLinear, hand-written backward", "speechbrain.nnet.quaternion_networks.q_linear",
         lambda m: m.QLinear(n_neurons=8, input_shape=(4, 5, 8), autograd=False), "4,5,8:BTC"),
        ("QLinear", "speechbrain.nnet.quaternion_networks.q_linear",
         lambda m: m.QLinear(n_neurons=8, input_shape=(4, 5, 8)), "4,5,8:BTC"),
        ("QConv2d", "speechbrain.nnet.quaternion_networks.q_CNN",
         lambda m: m.QConv2d(out_channels=8, kernel_size=3, input_shape=(2, 6, 6, 8)), "2,6,6,8:BSSC"),
        ("QLSTM", "speechbrain.nnet.quaternion_networks.q_RNN",
         lambda m: _Output(m.QLSTM(hidden_size=4, input_shape=(2, 5, 8))), "2,5,8:BTC"),
        ("QLiGRU", "speechbrain.nnet.quaternion_networks.q_RNN",
         lambda m: _Output(m.QLiGRU(hidden_size=4, input_shape=(2, 5, 8))), "2,5,8:BTC"),
        ("QBatchNorm", "speechbrain.nnet.quaternion_networks.q_normalization", lambda m: m.QBatchNorm(input_size=8),
         "4,5,8:BTC"),
        ("CLinear", "speechbrain.nnet.complex_networks.c_linear",
         lambda m: m.CLinear(n_neurons=4, input_shape=(2, 5, 8)), "2,5,8:BTC"),
        ("CConv1d", "speechbrain.nnet.complex_networks.c_CNN",
         lambda m: m.CConv1d(out_channels=4, kernel_size=3, input_shape=(2, 10, 8)), "2,10,8:BTC"),
        ("CBatchNorm", "speechbrain.nnet.complex_networks.c_normalization", lambda m: m.CBatchNorm(input_size=8),
         "4,5,8:BTC"),
        ("CLayerNorm", "speechbrain.nnet.complex_networks.c_normalization", lambda m: m.CLayerNorm(input_size=8),
         "4,5,8:BTC"),
        ("LiGRU", "speechbrain.nnet.RNN", lambda m: _Output(m.LiGRU(hidden_size=6, input_shape=(2, 5, 8))),
         "2,5,8:BTC"),
        ("SLiGRU", "speechbrain.nnet.RNN", lambda m: _Output(m.SLiGRU(hidden_size=6, input_shape=(2, 5, 8))),
         "2,5,8:BTC"),
        ("QuasiRNN", "speechbrain.nnet.RNN", lambda m: _Output(m.QuasiRNN(hidden_size=6, input_shape=(2, 5, 8))),
         "2,5,8:BTC"),
        ("SincConv", "speechbrain.nnet.CNN",
         lambda m: m.SincConv(out_channels=4, kernel_size=11, input_shape=(2, 64), sample_rate=16000), "2,64:BT"),
        ("Conv1d, same padding", "speechbrain.nnet.CNN",
         lambda m: m.Conv1d(out_channels=4, kernel_size=3, input_shape=(2, 10, 8)), "2,10,8:BTC"),
        ("DepthwiseSeparableConv1d", "speechbrain.nnet.CNN",
         lambda m: m.DepthwiseSeparableConv1d(out_channels=4, kernel_size=3, input_shape=(2, 10, 8)), "2,10,8:BTC"),
        ("StatisticsPooling", "speechbrain.nnet.pooling", lambda m: m.StatisticsPooling(), "2,6,8:BTC"),
        ("AttentiveStatisticsPooling", "speechbrain.lobes.models.ECAPA_TDNN",
         lambda m: m.AttentiveStatisticsPooling(8, attention_channels=4), "2,8,6:BCT"),
        ("ECAPA_TDNN", "speechbrain.lobes.models.ECAPA_TDNN", lambda m: m.ECAPA_TDNN(
            input_size=8, lin_neurons=6, channels=[8, 8, 8, 8, 16], attention_channels=4), "2,10,8:BTC"),
        ("Xvector", "speechbrain.lobes.models.Xvector",
         lambda m: m.Xvector(in_channels=8, tdnn_channels=[8, 8, 8, 8, 16], lin_neurons=6), "2,20,8:BTC"),
        ("PCEN", "speechbrain.nnet.normalization", lambda m: m.PCEN(input_size=8), "2,10,8:BTC values=0.01:2"),
        ("InstanceNorm1d", "speechbrain.nnet.normalization", lambda m: m.InstanceNorm1d(input_size=8), "2,10,8:BTC"),
        ("ExponentialMovingAverage", "speechbrain.nnet.normalization", lambda m: m.ExponentialMovingAverage(8),
         "2,10,8:BTC"),
        ("GumbelSoftmax", "speechbrain.nnet.activations", lambda m: m.GumbelSoftmax(tau=1.0, hard=False),
         "2,10,8:BTC"),
        ("ConformerEncoderLayer", "speechbrain.lobes.models.transformer.Conformer",
         lambda m: _Output(m.ConformerEncoderLayer(kernel_size=3, d_model=8, d_ffn=16, nhead=2,
                                                   attention_type="regularMHA")), "2,6,8:BTC"),
        ("TransformerEncoderLayer", "speechbrain.lobes.models.transformer.Transformer",
         lambda m: _Output(m.TransformerEncoderLayer(d_ffn=16, nhead=2, d_model=8)), "2,6,8:BTC"))],
    # pytorch-metric-learning: pair, triplet, proxy and classification losses on a batch of embeddings and labels
    *[Layer(f"pytorch-metric-learning {name}", "pytorch_metric_learning.losses", make, _METRIC)
      for name, make in (
          ("ContrastiveLoss", lambda m: m.ContrastiveLoss()), ("TripletMarginLoss", lambda m: m.TripletMarginLoss()),
          ("MultiSimilarityLoss", lambda m: m.MultiSimilarityLoss()), ("CircleLoss", lambda m: m.CircleLoss()),
          ("NTXentLoss", lambda m: m.NTXentLoss()), ("SupConLoss", lambda m: m.SupConLoss()),
          ("NCALoss", lambda m: m.NCALoss()), ("LiftedStructureLoss", lambda m: m.LiftedStructureLoss()),
          ("GeneralizedLiftedStructureLoss", lambda m: m.GeneralizedLiftedStructureLoss()),
          ("AngularLoss", lambda m: m.AngularLoss()), ("MarginLoss", lambda m: m.MarginLoss(num_classes=3)),
          ("FastAPLoss", lambda m: m.FastAPLoss()), ("HistogramLoss", lambda m: m.HistogramLoss()),
          ("IntraPairVarianceLoss", lambda m: m.IntraPairVarianceLoss()), ("NPairsLoss", lambda m: m.NPairsLoss()),
          ("SignalToNoiseRatioContrastiveLoss", lambda m: m.SignalToNoiseRatioContrastiveLoss()),
          ("TupletMarginLoss", lambda m: m.TupletMarginLoss()),
          ("RankedListLoss", lambda m: m.RankedListLoss(margin=0.4, Tn=0)),
          ("DynamicSoftMarginLoss", lambda m: m.DynamicSoftMarginLoss()),
          ("ThresholdConsistentMarginLoss", lambda m: m.ThresholdConsistentMarginLoss()),
          ("PNPLoss", lambda m: m.PNPLoss()), ("InstanceLoss", lambda m: m.InstanceLoss()),
          ("ArcFaceLoss", lambda m: m.ArcFaceLoss(3, 6)), ("CosFaceLoss", lambda m: m.CosFaceLoss(3, 6)),
          ("SubCenterArcFaceLoss", lambda m: m.SubCenterArcFaceLoss(num_classes=3, embedding_size=6)),
          ("SphereFaceLoss", lambda m: m.SphereFaceLoss(3, 6)),
          ("LargeMarginSoftmaxLoss", lambda m: m.LargeMarginSoftmaxLoss(3, 6)),
          ("NormalizedSoftmaxLoss", lambda m: m.NormalizedSoftmaxLoss(3, 6)),
          ("ProxyAnchorLoss", lambda m: m.ProxyAnchorLoss(3, 6)), ("ProxyNCALoss", lambda m: m.ProxyNCALoss(3, 6)),
          ("SoftTripleLoss", lambda m: m.SoftTripleLoss(3, 6, centers_per_class=2)),
          ("P2SGradLoss", lambda m: m.P2SGradLoss(6, 3)))],
]



_FLOAT32_ONLY = ("it allocates its running row maxima with torch.full(..., -torch.finfo(q.dtype).max) in the default "
                 "dtype (float32), which overflows for float64 q: the layer cannot run in float64 (its gradients are "
                 "judged against float32 differences instead)")

# Why a layer meant to be correct fails a check: (layer name, check) -> the reason
FINDINGS: dict[tuple[str, str], str] = {
    ("transformers RecurrentGemmaRglru", "observations"): (
        "by design: the RG-LRU keeps its last hidden state in a plain attribute (self.recurrent_states, sized by "
        "the batch) and starts every call from it, a decoding cache the model resets (_setup_cache); a batch of "
        "another size after the first raises, and one of the same size continues the first's sequence"),
    ("speechbrain QLinear, hand-written backward", "needs_input_grad"): (
        "true: QuaternionLinearCustomBackward computes the four weight gradients only when ctx.needs_input_grad[1] "
        "(r_weight) is set, so with r_weight frozen i_weight, j_weight and k_weight get none and stop training"),
    ("speechbrain QLinear, hand-written backward", "noncontiguous"): (
        "true: the custom-backward path flattens its input with x.view(batch * time, features), which raises on "
        "a non-contiguous input (a transposed one): reshape would copy"),
    **{(f"speechbrain {name}", check): (
        "true: its recurrent layers keep dropout masks as plain tensor attributes (drop_mask_te, a bank of 16000 "
        "masks in drop_masks) made on the CPU, and QLinear's absent bias as a plain zero tensor: .to() moves none "
        "of them, so on another device the layer mixes devices") for name, check in (
        ("QLSTM", "registered_tensors"), ("QLSTM", "meta_device"), ("QLiGRU", "registered_tensors"))},
    **{(f"speechbrain {name}", "state_valid"): (
        "true: its running statistics are updated from the batch's statistics without detaching them, so after a "
        "training call they carry the call's autograd graph (QBatchNorm never detaches, so the chain grows call "
        "after call; CBatchNorm detaches at the start of the next training call) and copy.deepcopy of the "
        "layer fails") for name in ("QBatchNorm", "QLiGRU", "CBatchNorm")},
    ("speechbrain SincConv", "dtype[float64]"): (
        "true: its sinc filters' time axis n_ and Hamming window window_ are plain float32 tensors made in "
        "__init__, so a float64 layer multiplies float64 band edges with float32 tensors and raises"),
    **{(f"speechbrain {name}", "deterministic"): (
        "true: StatisticsPooling adds random noise (a Gaussian draw rescaled to between eps and 9 eps, 1e-5 to 9e-5) "
        "to the mean it returns in every call, predict included, so two predictions of one input differ")
       for name in ("StatisticsPooling", "Xvector")},
    ("pytorch-metric-learning AngularLoss", "registered_tensors"): (
        "true (minor): its angle alpha is a plain 0-d tensor attribute: .double() and state_dict() never see it (as "
        "the zoo's registered_tensors_plain_scalar; a 0-d CPU tensor mixes with any device)"),
    ("pytorch-metric-learning MarginLoss", "registered_tensors"): (
        "true: beta (not learned by default) is a plain CPU tensor that forward indexes with the labels "
        "(self.beta[labels[anchor_idx]]) before moving the result: labels on a GPU index a tensor on the CPU"),
    ("pytorch-metric-learning P2SGradLoss", "gradients[float64]"): (
        "by design: its forward projects the class weights back onto the unit sphere in every call "
        "(self.weight.data = renorm(...)), so finite differences see the gradient of what the projection keeps and "
        "autograd gives the gradient at the projected weights (the message says the layer writes into its weight "
        "in every call)"),
    ("speechbrain GumbelSoftmax", "deterministic"): (
        "by design: it draws Gumbel noise in every call, eval included (F.gumbel_softmax), so its predict is random"),
    ("pyro Sylvester", "meta_device"): (
        "a bug upstream: Sylvester.Q builds its first Householder factor with device=x.device and the later ones "
        "with torch.eye(input_dim), on the CPU: with count_transforms > 1 the layer fails on a GPU"),
    ("pyro BatchNorm", "forward_predict_agree"): (
        "true (minor): log_abs_det_jacobian's size follows the mode, (1, D) from the batch's variance in training, "
        "(D,) from the moving variance in eval (Pyro's own comment: eval is there for gradient tests)"),
    ("zuko CNF log_prob", "gradients[float64]"): (
        "by design: its adaptive ODE solver (rtol 1e-5) chooses its steps from the input, and the adaptive "
        "checkpoint adjoint differentiates the accepted steps with their sizes held constant, so the gradient is "
        "off the differences of the solve by 0.05-0.3% (as torchsde's adjoint below)"),
    ("performer-pytorch SelfAttention", "gradients[float64]"): (
        "by design: its softmax kernel subtracts a detached maximum inside exp() and adds an eps beside it, which "
        "keeps the normalisation from cancelling the maximum, so the gradient leaves out the derivative through it: "
        "3e-4 relative at seeds 0-4 (accepted with a note), 1.2% at seed 5 with 6 random features (the message "
        "names the maximum and the tolerance that accepts it)"),
    **{(f"torch.ao {name}", "dtype[float64]"): (
        "true: fake quantisation's kernels (fused_moving_avg_obs_fake_quant) take float32 only, so the module "
        "raises on float64 inputs and weights") for name in ("qat Linear", "qat Conv2d", "qat ConvBn2d",
                                                            "prepare_qat(conv, relu)")},
    **{(f"torch.ao {name}", "observations"): (
        "by design: the observer is switched by FakeQuantize's own observer_enabled, not by eval(), so each "
        "predict moves the quantisation range to its batch's min and max and an observation's output depends on "
        "the rest of its batch; the QAT workflow switches observers off (torch.ao.quantization.disable_observer) "
        "before evaluating") for name in ("FakeQuantize", "prepare_qat(conv, relu)")},
    ("torch.ao prepare_qat(conv, relu)", "copy"): (
        "true: prepare_qat gives the modules a qconfig that holds a local function "
        "(_add_module_to_qconfig_obs_ctr's get_factory_kwargs_based_on_module_device), which pickle refuses: "
        "torch.save of the whole prepared model fails"),
    ("transformers pytorch_utils.Conv1D (GPT-2)", "noncontiguous"): (
        "true: forward flattens its input with x.view(-1, x.size(-1)), which raises on a (B, T, C) input stored "
        "channels-first (a Conv1d's (B, C, T) output transposed back), where reshape would work; GPT-2's own "
        "blocks hand it contiguous tensors, so it bites only reuse outside them"),
    **{(f"transformers {name}", "noncontiguous"): (
        "true: forward flattens its input with hidden_states.view(-1, hidden_dim), which raises on a (B, T, C) "
        "input stored channels-first, where reshape would work (as GPT-2's Conv1D)")
       for name in _MOES if not name.startswith("Granite")},
    ("memory-efficient-attention FlashAttention", "dtype[float64]"): _FLOAT32_ONLY,
    ("memory-efficient-attention FlashAttention causal", "dtype[float64]"): _FLOAT32_ONLY,
    ("memory-efficient-attention CosineSimFlashAttention", "gradients[float64]"): (
        "a bug upstream: with more than one key bucket (buckets of 4 keys here, for 5 keys) its hand-written "
        "backward is wrong; torch.autograd.gradcheck agrees in float64 (with the default dtype set to float64, so "
        "that its row sums are not kept in float32); with one bucket it agrees"),
    **{(f"monai {name}", "backward_runs"): (
        "a bug upstream (Project-MONAI/MONAI#8845): norm_cross_attn is built even without cross-attention and never "
        "used, so its parameters get no gradient (DistributedDataParallel refuses that unless "
        "find_unused_parameters=True)") for name in ("TransformerBlock", "UNETR (whole)", "ViT (whole)")},
    ("vector-quantize-pytorch VectorQuantize, learnable codebook", "needs_input_grad"): (
        "by design, but a trap: it applies the straight-through estimator only when the input requires grad, so "
        "with the input frozen the codebook gets the output's gradient directly and with it not: freezing the "
        "encoder changes the codebook's gradient"),
    ("vector-quantize-pytorch LatentQuantize", "backward_runs"): (
        "a bug upstream: with optimize_values=True (the default) its values_per_latent parameters appear only "
        "inside the straight-through .detach() and the losses' detached copies, so no gradient reaches them, and "
        "its in-place update runs only when optimize_values is False"),
    ("pytorch_wavelets DWT1DForward, symmetric padding", "gradients[float64]"): (
        "AFB1D's hand-written backward disagrees with its forward for the symmetric and reflect padding modes (it "
        "agrees for zero and periodization); torch.autograd.gradcheck fails it too"),
    **{(f"snntorch Leaky in a loop{suffix}", check): why for suffix in ("", ", reset to zero",
                                                                        ", learned beta and threshold")
       for check, why in (
           ("dtype[float64]", "its spikes are (x > 0).float(): float32 whatever the layer's dtype"),
           ("state_valid", "it keeps the membrane potential in a buffer with its graph (for backpropagation through "
                           "time across calls, by design), so a trained model's copy.deepcopy raises until reset_mem"),
           ("copy", "surrogate.atan() returns a local closure, which pickle refuses: torch.save of the whole model "
                    "fails"))},
    **{(f"norse {name}", check): why for name in ("LIFBoxCell", "LIFCell", "LICell", "LIF", "LSNN", "LIFAdEx")
       for check, why in (
           ("registered_tensors", "its hyperparameters are 0-d tensors in a NamedTuple attribute (p): .to(), "
                                  ".double() and state_dict() never see them"),
           ("copy", "its parameters' NamedTuple class is made where pickle cannot find it: torch.save of the whole "
                    "model fails"))},
    ("reformer-pytorch LSHSelfAttention", "deterministic"): (
        "by design: it draws its random rotations for hashing on every call, in eval mode too"),
    **{(name, "needs_input_grad"): (
        "a trap of reversible layers: the blocks' parameters are not inputs of the hand-written Function, so when "
        "the input does not require grad its backward never runs and the parameters get no gradient (a reversible "
        "stack on raw data trains nothing)") for name in ("reformer-pytorch ReversibleSequence",
                                                         "revtorch ReversibleSequence")},
    ("revtorch ReversibleSequence", "backward_pure"): (
        "by design: its backward deletes what it saved (del ctx.y) to free memory, so a second backward over the "
        "same graph (retain_graph=True, a gradient penalty) raises"),
    ("memcnn AdditiveCoupling", "backward_pure"): (
        "by design: it allows one backward pass per graph unless built with num_bwd_passes=2 (the next layer), and "
        "says so when a second one is tried"),
    ("pytorch-tabnet TabNetNoEmbeddings", "backward_runs"): (
        "a bug upstream: it builds an initial_bn of its own and never uses it (its encoder has its own), so those "
        "parameters get no gradient (DistributedDataParallel refuses that unless find_unused_parameters=True)"),
    ("pytorch-tabnet TabNetNoEmbeddings", "registered_tensors"): (
        "a bug upstream: the encoder keeps group_attention_matrix as a plain tensor attribute, so .double() leaves it "
        "float32 (dtype[float64] fails for it) and .to(device) leaves it behind"),
    ("pytorch-tabnet TabNetNoEmbeddings", "dtype[float64]"): "its unregistered group_attention_matrix stays float32",
    ("pytorch-tabnet Sparsemax", "input_unchanged"): (
        "a bug upstream: SparsemaxFunction.forward subtracts the row maxima from its input in place "
        "(input -= max_val), changing the caller's tensor"),
    ("kornia HardNet", "gradients[float64]"): (
        "by design: it normalises each patch by its mean and standard deviation detached (its comment: the "
        "gradients through them are too noisy to learn from), so its gradient is the derivative with those held "
        "constant, 1-8% off the full one; the message says the detached statistic is the whole disagreement and "
        "how to accept it (--tolerance) or leave the check out"),
    # (LaplaceFilter, SharpenFilter and MedianFilter keep their kernels so too, and move them in every call with
    # kernel.to(x): registered_tensors leaves such constants out)
    ("monai SavitzkyGolayFilter", "registered_tensors"): (
        "true: its coeffs is a plain tensor attribute, which state_dict() never sees; its forward moves it to the "
        "input's device and dtype, but the layer calls .item() and cannot run on the meta device, where "
        "registered_tensors asks how a call reads it, so it is reported"),
    **{(f"monai {name}", "noncontiguous"): (
        "true: it reshapes its input with .view(), which raises on a channels-last tensor (.reshape() would not)")
       for name in ("LaplaceFilter", "SharpenFilter")},
    ("monai SavitzkyGolayFilter", "dtype[float64]"): (
        "true: its coefficients stay a float32 plain attribute, so a float64 input comes out float32"),
    ("monai VectorQuantizer", "dtype[float64]"): (
        "true: EMAQuantizer casts its input to float32 (inputs.float()) before the distances to its codebook, which "
        "a float64 layer keeps in float64: the matrix product raises"),
    ("kornia SpatialSoftArgmax2d", "registered_tensors"): (
        "its temperature is a plain 0-d tensor attribute: .double() and state_dict() never see it (as the zoo's "
        "registered_tensors_plain_scalar)"),
    ("lucidrains nystrom-attention Nystromformer", "observations"): (
        "by design, but it mixes the batch: its Moore-Penrose iteration starts from the largest row and column sums "
        "over the whole batch, so each observation's output depends on the others (by about 1e-3 here)"),
    ("torchsde sdeint_adjoint euler, fixed noise", "gradients[float64]"): (
        "by design: the adjoint SDE, solved backwards with the same step, approximates the gradient of the Euler "
        "solve only up to discretisation error (its distance to sdeint's gradient shrinks with dt: 5e-3 at dt=1/8, "
        "2e-4 at dt=1/512); torch.autograd.gradcheck fails it too, and passes sdeint and reversible_heun's adjoint"),
    **{("roma special_procrustes, regularization", check): (
        "by design, and documented: _ProcrustesRegularization.backward adds regularization * (M - R) to M's gradient "
        "whatever the output's gradient ('cannot be expressed as the derivative of any function', its docstring "
        "says), so the gradient is not the forward's derivative (torch.autograd.gradcheck fails it, and passes it "
        "with regularization=0) and backward is affine in the output gradient, not linear (backward(0) = r(M - R))")
       for check in ("gradients[float64]", "grad_output")},
    **{(f"torch_struct {name}", "input_unchanged"): (
        "by design, but a side effect on the caller: _Struct._get_dimension calls requires_grad_(True) on the caller's "
        "log-potentials (so that marginals can be taken with torch.autograd.grad), under torch.no_grad too, so after "
        "the call the caller's tensor requires grad and its in-place writes raise")
       for name in ("LinearChainCRF", "SemiMarkovCRF", "TreeCRF", "LinearChain, SparseMaxSemiring",
                    "LinearChain, CheckpointSemiring(LogSemiring)")},
    ("torch_struct DependencyCRF", "predict_runs"): (
        "a bug upstream: deptree's convert() copies the log-potentials into a new tensor (root arcs moved off the "
        "diagonal), which is a leaf when the caller's tensor does not require grad; _get_dimension calls "
        "requires_grad_(True) on it and _check_potentials then fills slices of a view of it in place, which autograd "
        "refuses: any input that does not require grad raises, under torch.no_grad too (only inference_mode runs)"),
    ("torch_struct LinearChain, SparseMaxSemiring", "gradients[float64]"): (
        "a bug upstream: _SimplexProject.forward returns <x, w*> - ||w*||_2 but its backward returns w*, the gradient "
        "of <x, w*> - 1/2 ||w*||_2^2; torch.autograd.gradcheck fails it too, and passes it once the forward returns "
        "the half squared norm"),
    ("torch_struct LinearChain, CheckpointSemiring(LogSemiring)", "copy"): (
        "CheckpointSemiring(cls) returns a class defined inside the function, which pickle cannot find: torch.save "
        "of a model holding the structure fails (with LogSemiring itself it works)"),
    ("pykan KAN([4,3,2])", "registered_tensors"): (
        "a bug upstream: input_id (the inputs a pruned model keeps) is a plain tensor attribute, not a buffer: "
        "state_dict() leaves it out, so a pruned model loaded into a fresh one computes with the wrong inputs, and "
        ".to(device) leaves it behind"),
    ("pykan KAN([4,3,2])", "copy"): (
        "Symbolic_KANLayer keeps its symbolic functions as lambdas (symbolic_fun.*.funs), which pickle refuses: "
        "torch.save of the whole model fails"),
    **{(f"kan_gpt {name}", "noncontiguous"): (
        "true: the efficient KAN's forward (CausalSelfAttention's c_attn is one) flattens its (B, T, C) input with "
        "x.view(-1, T), its T being the last dimension, which raises on an input stored channels-first (a Conv1d's "
        "(B, C, T) output transposed back), where reshape would work; its GPT hands it contiguous tensors")
       for name in ("efficient KAN (as in its GPT)", "CausalSelfAttention (efficient KAN)")},
    **{(f"fft_conv_pytorch {name}", "dtype[float64]"): (
        "it computes in float32 whatever the dtype: fft_conv transforms signal.float() and kernel.float(), and its "
        "complex multiplication writes into a complex64 buffer, so float64 inputs and weights give a float32 output "
        "(FFTConv1d's is off F.conv1d's float64 result by about 2e-6)")
       for name in ("FFTConv1d", "FFTConv2d", "FFTConv2d, stride 2, dilation 2, groups 2")},
    **{(f"ultralytics {name}", "forward_predict_agree"): (
        "by design: its Classify head returns (softmax, logits) in eval mode, the logits alone in training mode (its "
        "export flag makes eval return the softmax alone)") for name in ("Classify", "YOLOv8n-cls (whole, 4 classes)")},
    ("ultralytics YOLOv8n (whole detector, 4 classes)", "forward_predict_agree"): (
        "by design: in training mode its Detect head returns the raw maps of its three levels (the loss decodes "
        "them), in eval mode the decoded boxes and class scores beside those maps"),
    **{(f"open_clip {name}", check): (
        "a bug upstream: with scaled_cosine its Attention calls torch.bmm on 4-d queries and keys (batch, heads, "
        "tokens, head size), which bmm refuses: it raises on every input ('batch1 must be a 3D tensor'), and so does "
        "CustomResidualAttentionBlock with scale_cosine_attn")
       for name in ("Attention, scaled cosine, head scales, inner norm",
                    "CustomResidualAttentionBlock (NormFormer scalings)")
       for check in ("predict_runs", "forward_runs")},
    **{(f"open_clip {name}", "dtype[float64]"): (
        "by design: LayerNormFp32 normalises x.to(torch.float32) with its weight, which .double() makes float64: "
        "F.layer_norm refuses the mix ('mixed dtype (CPU)'); it is meant for float16 and bfloat16 training (the "
        "q/k norm of its Attention is one)")
       for name in ("LayerNormFp32", "Attention, q/k norm")},
    **{(f"lightly {name}", "copy"): (
        "true: its last layer uses the legacy torch.nn.utils.weight_norm, whose weight is a computed tensor "
        "attribute that copy.deepcopy refuses (EMA teachers, AveragedModel); torch.nn.utils.parametrizations."
        "weight_norm copies") for name in ("DINOProjectionHead", "DINOProjectionHead, last layer frozen",
                                          "DINOv2ProjectionHead")},
    **{(f"diffsort DiffSortNet ({network}, {distribution})", check): why
       for network, distribution in (("odd_even", "cauchy"), ("odd_even", "gaussian"), ("bitonic", "logistic_phi"),
                                     ("bitonic", "optimal"))
       for check, why in (
           ("registered_tensors", "a bug upstream: it keeps its sorting network's matrices in a plain list "
                                  "(self.sorting_network), so .to(device) leaves them behind (it takes device= in "
                                  "its constructor instead) and state_dict() never sees them"),
           ("meta_device", "true: the same plain list stays on the CPU when the layer moves, and its forward asserts "
                           "that the network and the vectors share a device"))},
    ("lightly NNMemoryBankModule", "backward_runs"): (
        "by design: it returns the nearest neighbours of its input in its memory bank (a buffer), which carry no "
        "gradient; NNCLR uses them as stop-gradient targets"),
    ("transformers PhimoeSparseMoeBlock (sparse mixer)", "gradients[float64]"): (
        "by design: PhiMoE routes with SparseMixer, whose PhimoeMultiplier backward is a gradient estimator "
        "(Heun's third-order method: the router's gradient scaled by 1/3 where the sampled expert is not the "
        "top one and a coin says so), not the derivative of its forward; at seed 2 the router weight's analytic "
        "gradient is 3x the differences'"),
    ("diffusers ResnetBlock2D, FIR downsampling", "copy"): (
        "a bug upstream: with down=True and kernel='fir' it keeps a lambda (self.downsample = lambda x: "
        "downsample_2d(x, kernel=fir_kernel)), which pickle refuses: torch.save of the whole model fails (its other "
        "kernels are modules or functools.partial)"),
    ("diffusers Attention, VAE's (group norm, residual)", "noncontiguous"): (
        "a bug upstream: AttnProcessor2_0 flattens a 4-d input with hidden_states.view(batch_size, channel, "
        "height * width), which a strided view cannot give (reshape would work); the VAE hands it contiguous tensors"),
    ("diffusers Timesteps (sinusoidal)", "dtype[float64]"): (
        "by design: get_timestep_embedding computes the embedding in float32 whatever the dtype "
        "(timesteps[:, None].float() times a float32 arange), and the U-Nets cast it to their own dtype after"),
    **{(f"neuraloperator {name}", "dtype[float64]"): (
        "true: its spectral weights are complex64 Parameters (tltorch's factorised tensors' factors too), which "
        ".double() leaves complex64 (torch casts floating tensors only), and its einsum does not promote: after "
        ".double() it raises 'expected scalar type ComplexDouble but found ComplexFloat' (TFNO: 'both inputs should "
        "have same dtype'); neuraloperator tests float32 only. Its gradients are judged in float64 all the same "
        "(Note [complex weights in float64])")
       for name in ("SpectralConv dense 2d", "SpectralConv dense 1d", "SpectralConv Tucker 2d", "SpectralConv CP 2d",
                    "SpectralConv TT 2d", "FNOBlocks", "FNOBlocks, instance norm", "FNOBlocks, channel MLP",
                    "FNO 2d", "TFNO 2d (Tucker)")},
    **{(f"neuraloperator FNOBlocks{name}", "noncontiguous"): (
        "a bug upstream: its default linear skip (Flattened1dConv) calls x.view(*size[:2], -1) on the block's "
        "input, which a strided view cannot give (reshape would work); FNO hands it its lifting layer's contiguous "
        "output")
       for name in ("", ", instance norm", ", channel MLP")},
    ("torch-harmonics SpectralConvS2", "dtype[float64]"): (
        "true: its weight is a complex64 Parameter, which model.double() leaves complex64 (torch casts floating "
        "tensors only), and its einsum does not promote: after .double() it raises 'expected scalar type "
        "ComplexDouble but found ComplexFloat'"),
    ("torch-harmonics NeighborhoodAttentionS2", "dtype[float64]"): (
        "true: its attention is a custom operator whose CPU kernel takes float32 only; after .double() it raises "
        "'expected scalar type Float but found Double'"),
    ("torch-harmonics NeighborhoodAttentionS2", "copy"): (
        "a bug upstream: it keeps the custom operator's handle (a CustomOpDef) as an attribute, which "
        "copy.deepcopy refuses: EMA and AveragedModel cannot copy a model holding it"),
    ("rotary-embedding-torch RotaryEmbedding xpos", "copy"): (
        "a bug upstream: with use_xpos it stores apply_rotary_emb as a staticmethod object in an attribute, which "
        "copy.deepcopy and pickle refuse (without xpos it does not)"),
    **{(f"colt5-attention {name}", "copy"): (
        "a bug upstream: its Attend keeps configs of a namedtuple made as namedtuple('EfficientAttentionConfig', "
        "...) but bound to the name Config, where pickle cannot find it: torch.save of the whole model fails")
       for name in ("ConditionalRoutedAttention", "ConditionalRoutedImageAttention")},
    ("transformers LlamaRotaryEmbedding (dynamic NTK scaling)", "observations"): (
        "true, by design upstream: dynamic NTK scaling recomputes the frequencies from the largest position id in "
        "the whole batch (torch.max(position_ids) + 1 past max_position_embeddings), so a sequence's table depends "
        "on the other sequences batched with it"),
    ("transformers LlamaRotaryEmbedding (dynamic NTK scaling)", "dtype[float64]"): (
        "true (minor): the recomputed inv_freq buffer is made in float32 whatever the layer's dtype (the output "
        "is cast to the hidden states' dtype)"),
    **{(f"peft LoraConfig r=2, use_dora=True on {base}", "gradients[float64]"): (
        "by design: DoRA detaches the weight's column norm (peft's weight_norm.detach(), as the DoRA paper's section "
        "4.3 prescribes to save memory), so the gradients of lora_A and lora_B are the derivative with the norm held "
        "constant, 7-66% off the full one; the message says the detached statistic is the whole disagreement and to "
        "leave the check out for such a layer") for base in ("an MLP", "a CNN")},
    ("peft C3AConfig block_size=4 on an MLP", "gradients[float64]"): (
        "a bug upstream: BlockCircularConvolution.backward's gradient of x (fft of grad_output's fft times ifft(w)) is "
        "not the transpose of its forward; its gradient of w is right (the first layer's kernel is wrong only through "
        "the second layer's input gradient). torch.autograd.gradcheck fails it too, and passes the same forward left "
        "to autograd"),
    ("peft ShiraConfig r=2 on an MLP", "registered_tensors"): (
        "true: the sparse indices are plain tensors in a dict attribute (shira_indices['default']), not buffers: "
        ".to(device) leaves them behind and state_dict() does not save them (peft regenerates them from a seed when "
        "it loads)"),
    **{(f"torchao FakeQuantizedLinear {name}", "dtype[float64]"): (
        "true: its fake quantiser asserts a float32, float16 or bfloat16 input ('Unsupported input dtype: "
        "torch.float64'): the layer cannot run in float64 (its gradients are judged against float32 differences)")
       for name in ("int4 weight, group 4", "int8 per-token asymmetric activation, int4 weight",
                    "int8 per-channel weight")},
    ("segmentation_models_pytorch FPN (resnet18)", "observations"): (
        "true at these sizes: its segmentation blocks' GroupNorm(32, 32) sees one value per group at the 1x1 deepest "
        "level, which PyTorch refuses for a batch of one, in eval mode too ('Expected more than 1 value per channel "
        "when training'): one 32x32 image cannot be predicted alone (a batch of two, or 64x64, can)"),
    # (SimpleViT and its variants keep their sine-cosine position embedding as a plain tensor too, moved to the
    # input's device and dtype in every call: registered_tensors leaves such constants out)
    ("vit-pytorch jumbo_vit.JumboViT", "backward_runs"): (
        "true: the last layer's feedforward on the patch tokens runs but its result is never used (only the jumbo "
        "class tokens reach the head), so its parameters get no gradient (DistributedDataParallel refuses that "
        "unless find_unused_parameters=True)"),
    ("vit-pytorch jet_vit.JetViT", "backward_runs"): (
        "by design: RandomLayerSelector calls one of its attention options per call (random.choice), so the options "
        "not chosen get no gradient in that step"),
    ("vit-pytorch simple_vit_with_value_residual.SimpleViT", "copy"): (
        "its Attention keeps a lambda (to_residual_mix), which pickle refuses: torch.save of the whole model fails"),
    # rational_activations: every PyTorch version flattens its input with x.view(-1)
    **{(f"rational Rational version {version}", "noncontiguous"): (
        "true: every PyTorch version of the rational function flattens its input with x.view(-1), which raises on "
        "a non-contiguous input (a transposed or strided activation); .reshape(-1) would not")
       for version in "ABCD"},
    ("rational Rational version A", "meta_device"): (
        "a bug upstream: version A builds its denominator's coefficients with torch.tensor([1.]) and torch.zeros(...) "
        "on the CPU, so with the layer on a GPU (cuda=False, the PyTorch path) it raises a device mismatch"),
    ("rational Rational version D", "meta_device"): (
        "a bug upstream: version D's training noise is torch.FloatTensor(n).uniform_(...), made on the CPU, so its "
        "training forward on a GPU raises a device mismatch"),
    ("qpth OptNet QP (shared Q, G, h)", "gradients[float64]"): (
        "a bug upstream (qpth 0.0.18, qp.py): where Q, p, G, h, A or b is shared by the batch (expanded in forward), "
        "backward returns the mean of its per-observation gradients (dQs.mean(0)) instead of their sum: 1/batch of "
        "the gradient of what forward computes, as the message says (0.25 = 1/4, the batch size); batched "
        "tensors' gradients are right (mutants.py checks QPFunction so)"),
    **{(f"torchdeq DEQ {name}", "copy"): (
        "true: get_deq() keeps its gradient functions in a list attribute (produce_grad) of closures made in "
        "torchdeq.grad.backward_factory, which pickle cannot save: torch.save of a model holding a DEQ fails")
       for name in ("implicit (IFT) gradient, Anderson", "implicit (IFT) gradient, fixed-point iteration",
                    "phantom gradient (its default)")},
    ("torchdeq DEQ phantom gradient (its default)", "forward_predict_agree"): (
        "by design: in training the DEQ returns one more application of the function to the solver's fixed point "
        "(the step its phantom gradient is taken through), in eval the fixed point itself; at its default tolerance "
        "(1e-3) the two differ by about 1e-4. Its gradient, the phantom one, passes: the solver runs under no_grad "
        "and the trace holds what it detaches (a note says so)"),
    ("torchcde NeuralCDE cubic spline, RK4, adjoint", "gradients[float64]"): (
        "by design: with adjoint=True the gradient is the continuous adjoint equation integrated backwards with "
        "RK4, not the derivative of the discretised forward, so the two differ by the solver's discretisation "
        "error (1e-4 to 3e-3 relative at step 0.25); without the adjoint it passes"),
    **{(f"pypose {name}", "gradients[float64]"): (
        "by design: PyPose's gradient with respect to a group element (a unit quaternion) is a Lie algebra one "
        "(left tangent space: three numbers and a zero for the quaternion's fourth), not the derivative in the "
        "four coordinates, so a group element alone as an input or output disagrees with finite differences; "
        "chained back to ordinary tensors (the SO3 Act and chain layers) every gradient passes")
       for name in ("so3 Exp", "SO3 Log")},
    ("pypose Sim3 chain", "gradients[float64]"): (
        "true (an approximation): sim3_Jl and sim3_Jl_inv, the Jacobians its sim(3) Exp and Log backward use, are "
        "Taylor series in ad(xi) cut after the sixth and fourth powers, so at standard-normal algebra vectors the "
        "gradient is 0.5-6% off; exact for small ones (mutants.py checks it at values in [-0.05, 0.05], where it "
        "passes); SO3, SE3 and RxSO3 use closed forms and pass"),
    ("geomloss SamplesLoss sinkhorn", "gradients[float64]"): (
        "by design: its Sinkhorn loop runs the epsilon-scaling iterations under no_grad and differentiates the last "
        "extrapolation only (the envelope theorem), which is the gradient at convergence; at blur 0.5 and its "
        "default scaling the loop stops short of it (0.3 relative here). The message says the values it detaches "
        "are the whole disagreement"),
    ("geomloss SamplesLoss sinkhorn", "observations"): (
        "true, by design: the tensorised backend starts its epsilon-scaling from the diameter of all the batch's "
        "points (x.view(-1, D)), so each pair of clouds' loss depends on the others in the batch"),
    ("geomloss SamplesLoss sinkhorn", "noncontiguous"): (
        "true: it flattens the batch's points with x.view(-1, D), which raises on a non-contiguous cloud"),
    ("lucidrains st-moe MoE", "deterministic"): (
        "by design: its top-n gating routes a token to its second expert with probability min(1, gate / threshold), "
        "drawn with uniform_ in eval too (threshold_eval), so predict is random (at seed 0 a draw changes a route)"),
    ("lucidrains mixture-of-experts MoE", "deterministic"): (
        "by design: its default second_policy_eval='random' routes each token to its second expert at random in "
        "eval too, so predict is random"),
    **{(f"sru SRU{name}", "dtype[float64]"): (
        "true: its CPU kernel (torch.ops.sru_cpu.cpu_forward, TorchScript) takes float32 only ('expected scalar type "
        "Float but found Double'): the layer cannot run in float64 (its gradients are judged against float32 "
        "differences)") for name in ("", ", bidirectional")},
    ("torchkbnufft KbNufft, learned trajectory", "backward_runs"): (
        "true (a limitation): the table interpolation Function's backward returns None for the trajectory omega, "
        "so a k-space trajectory cannot be learned through KbNufft; the message names the parameter, with a "
        "hand-written backward returning None among the causes it lists"),
    **{(f"FrEIA SequenceINN of {block}", "copy"): (
        "true: its blocks keep lambdas made in __init__ (a coupling block's f_clamp, AllInOneBlock's "
        "global_scale_activation), which pickle refuses: torch.save of a whole FrEIA model fails (its state_dict "
        "saves)") for block in ("AllInOneBlock", "GLOWCouplingBlock", "RNVPCouplingBlock", "NICECouplingBlock",
                                "GINCouplingBlock")},
}


# False alarms layercheck still gives, with what is known (fix pending): counted apart, never as passes.
# (kornia's DenseSIFTDescriptor was one until its steepness stopped growing the step: Note [steep at
# the base step]; lucidrains' En-transformer until the rounding floor emulated float32 rounding on the
# float64 run: Note [emulated rounding]; pytorch-metric-learning's ProxyNCALoss until the meta run that
# shows how its calls read a constant gave torch.nonzero a size.)
KNOWN_FALSE_ALARMS: dict[tuple[str, str], str] = {}


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

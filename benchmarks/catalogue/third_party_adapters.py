"""How benchmarks/third_party.py builds each library's layers: the small wrappers that make a
layer checkable as a module with tensor inputs (a flow's log-probability, an ODE block, a
decoder layer with its rotary table), the layouts the catalogue reuses, and the import
helpers (torchvision beside a CPU torch). Read by third_party_layers.py."""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


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

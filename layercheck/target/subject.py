"""What is under test: how to build a fresh layer, call it in predict or forward mode,
generate its inputs, and snapshot or restore its state.

A :class:`Target` is the recipe (class, constructor call, layouts, seed); a :class:`Subject`
is one fresh layer built from it. Every check builds its own subjects, so nothing one check
does to a layer can leak into another.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from layercheck.parent.errors import LayerRaised, LoadError
from layercheck.parent.inputs import InputSpec
from layercheck.parent.invocation import Invocation, class_reference, describe_call
from layercheck.parent.layout import Layout
from layercheck.target.building import first_call, initialises_on_first_call, initialize, load_tensors, same_tensors
from layercheck.target.frames import user_trace
from layercheck.target.seeding import seeded, standard_normal, stream_state

# What a TypeError says when a call's arguments do not fit its signature.
_CALL_MISMATCH = re.compile(r"missing \d+ required|required positional argument|unexpected keyword argument|"
                            r"takes \d+ positional argument|takes from \d+ to \d+ positional")

# A target whose floating inputs hold more elements than this is run on a few of its batch's
# observations by the checks whose verdict does not depend on the batch size
# (@check(any_batch=True)): see Target.sampled.
SAMPLE_ELEMENTS = 1 << 16


class Mode(str, enum.Enum):
    """How a subject calls its layer: ``PREDICT`` (eval mode, ``predict`` where the layer defines
    it, no gradient), ``FORWARD`` (train mode, with gradient), ``EVAL`` (eval mode, ``forward``,
    with gradient)."""

    PREDICT = "predict"  # eval mode, ``predict`` if defined, no grad
    FORWARD = "forward"  # train mode, ``forward``, with grad
    EVAL = "eval forward"  # eval mode, ``forward``, with grad: training-only behaviour switched off


class Target:
    """A layer class (or instance) with its constructor call, layouts and seed."""

    def __init__(
        self,
        layer: type | nn.Module,
        layouts: Sequence[Layout | InputSpec],
        *,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        seed: int = 0,
        name: str | None = None,
        invocation: Invocation | None = None,
        constants: Mapping[str, Any] | None = None,
        on: torch.device | str | None = None,
    ) -> None:
        """``layouts``: one per tensor input, positional ones first (a bare Layout is a standard-
        normal input of the check's dtype); ``constants``: plain keyword arguments of the call;
        ``on``: the device every check runs the layer and its inputs on unless it asks for
        another (``--on``; the CPU by default)."""
        kind = kind_of(layer)
        if kind is None:
            raise LoadError(f"{display_name(layer)} is not a torch.nn.Module or torch.autograd.Function subclass, a "
                            "custom operator (torch.library.custom_op) or a function")
        self.kind = kind
        self.instance = layer if isinstance(layer, nn.Module) else None
        # the class (module, Function), or the operator or function itself
        self.cls: Any = type(layer) if self.instance is not None else layer
        self.specs = tuple(x if isinstance(x, InputSpec) else InputSpec(x) for x in layouts)
        self.layouts = tuple(spec.layout for spec in self.specs)
        self.constants = dict(constants or {})
        if self.kind == "function" and (self.constants or any(spec.name for spec in self.specs)):
            raise LoadError(f"{self.cls.__name__} is an autograd.Function: Fn.apply takes no keyword arguments, so "
                            "call_kwargs (--call-kwarg) cannot be given to it; pass them positionally as inputs")
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.seed = seed
        self.home = torch.device(on) if on is not None else torch.device("cpu")
        self.name = name or display_name(self.cls)
        if invocation is None:  # a layer built in Python: the command line can name its class at best
            reference = None if self.instance is not None else class_reference(_defined(self.cls))
            invocation = Invocation(reference, layouts=self.specs, args=self.args, kwargs=self.kwargs, seed=seed,
                                    constants=self.constants, on=None if on is None else str(self.home))
        self.invocation = invocation
        self.given = self.specs  # the inputs as the user gave them (specs: as checked, see with_inputs)
        # how its Triton kernels ran, where they ran under the interpreter (runs[].interpreter of the report)
        self.interpreter: dict[str, Any] | None = None
        self._pristine: nn.Module | None = None
        self._base_inputs: list[torch.Tensor] | None = None
        # Note [data-dependent initialisation] in target/building.py: whether the layer's first
        # training call sets its parameters from the data (None: not asked yet)
        self.first_call_initialises: bool | None = None
        self.reference: Any = None  # what the reference check judges it against (target/reference.py)

    # -- building ---------------------------------------------------------------------------

    def construct(self) -> nn.Module | None:
        """A new layer straight from the constructor (seeded), before ``initialize``.

        Functions, operators and plain functions have nothing to construct (None). A given
        instance is deep-copied: nothing else can make another one. Raises LoadError when the
        constructor raises (or the copy fails).
        """
        if self.kind != "module":
            return None
        if self.instance is not None:
            try:
                return copy.deepcopy(self.instance)
            except Exception as exc:
                raise LoadError(f"layercheck could not deep-copy the {self.cls.__name__} instance it was given, and "
                                f"needs a copy per check ({type(exc).__name__}: {exc}); pass the class and its "
                                "constructor arguments instead (check_layer(Cls, ..., args=..., kwargs=...))") from None
        try:
            with seeded(self.seed):
                layer = self.cls(*self.args, **self.kwargs)
        except Exception as exc:
            hint = ""
            if isinstance(exc, TypeError) and _CALL_MISMATCH.search(str(exc)):
                hint = (". Give the constructor's arguments with --arg VALUE and --kwarg NAME=VALUE (in a spec: "
                        "args: [...] and kwargs: {...}; in check_layer: args=..., kwargs=...)")
            raise LoadError(f"constructing {self.cls.__name__}{describe_call(self.args, self.kwargs)} raised "
                            f"{type(exc).__name__}: {exc}{hint}") from None
        return layer

    def pristine(self) -> nn.Module | None:
        """The constructed and initialised layer whose parameters and buffers every subject gets.

        Raises LayerRaised (phase "initialize") when ``initialize`` or a lazy first call fails.
        """
        if self.kind != "module":
            return None
        if self._pristine is None:
            layer = self.at_home(self.construct())
            initialize(layer, self, self.seed)
            layer = self.at_home(layer)
            if self.first_call_initialises is None:
                self.first_call_initialises = initialises_on_first_call(layer, self)
            if self.first_call_initialises:
                first_call(layer, self)
            self._pristine = layer
        return self._pristine

    def build(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> Subject:
        """A fresh subject, built the way users build a layer — the constructor call (seeded),
        ``initialize``, then the pristine layer's parameters and buffers loaded — and cast and
        moved as asked. Only an instance handed to the Python API, which nothing can construct
        again, is deep-copied instead."""
        pristine = self.pristine()
        where = torch.device(device) if device is not None else self.home
        layer: nn.Module | None = None
        if pristine is not None:
            layer = self._another(pristine)
            if dtype is not None or where != self.home:
                layer = _moved(layer, where, dtype)
        return Subject(self, layer, dtype=dtype, device=where)

    def _another(self, pristine: nn.Module) -> nn.Module:
        if self.instance is not None:
            return copy.deepcopy(pristine)  # the instance was copied once already (construct)
        layer = self.at_home(self.construct())
        initialize(layer, self, self.seed)
        layer = self.at_home(layer)
        if self.first_call_initialises:
            first_call(layer, self)  # what it sets outside its parameters and buffers (a flag) too
        load_tensors(layer, pristine)
        return layer

    def at_home(self, layer: nn.Module | None) -> nn.Module:
        """A layer moved to the device the checks run on (``--on``): once constructed, so that
        ``initialize`` or a lazy first call run there too, and again after ``initialize``, whose
        new parameters (``torch.full(...)`` without ``device=``, as the bundled SReLU makes them)
        are on the CPU: as a user's ``.to(device)`` after building the layer moves them."""
        assert layer is not None
        return layer if self.home.type == "cpu" else layer.to(self.home)

    def sampled(self) -> Target | None:
        """The same layer and constructor call on the first few observations of the batch:
        every input with a B dimension (all of one size) cut to as many observations as keep
        the floating inputs near SAMPLE_ELEMENTS (two at least), the others as they are. None
        when the inputs are that small already, have no common batch, or the layer built for
        the smaller inputs does not get the same parameters and buffers (sizes that follow
        the batch). Raises what building the layer raises (LoadError, LayerRaised)."""
        batch = self.batch
        if batch is None:
            return None
        floating = [spec for spec in self.specs if spec.floating]
        fixed = sum(spec.layout.numel for spec in floating if spec.layout.batch_dim is None)
        per_observation = sum(spec.layout.numel // batch for spec in floating if spec.layout.batch_dim is not None)
        keep = max(2, (SAMPLE_ELEMENTS - fixed) // max(per_observation, 1))
        if keep >= batch:
            return None
        return self.with_inputs([spec if spec.layout.batch_dim is None
                                 else dataclasses.replace(spec, layout=spec.layout.with_size("B", keep))
                                 for spec in self.specs])

    def with_inputs(self, specs: Sequence[InputSpec]) -> Target | None:
        """The same layer and constructor call on other inputs (smaller ones), whose pristine layer
        has this one's parameters and buffers; None where it does not (sizes that follow the
        inputs'). Raises what building the layer raises (LoadError, LayerRaised)."""
        other = Target(self.instance if self.instance is not None else self.cls, specs, args=self.args,
                       kwargs=self.kwargs, seed=self.seed, name=self.name, invocation=self.invocation,
                       constants=self.constants, on=self.home)
        other.given, other.interpreter, other.reference = self.given, self.interpreter, self.reference
        pristine = self.pristine()
        if pristine is not None:
            other.first_call_initialises = self.first_call_initialises
            other._pristine = other._another(pristine)
            if not same_tensors(other._pristine, pristine):
                return None
        return other

    def given_values(self, tensors: Sequence[torch.Tensor]) -> Target:
        """This target with its inputs' values given, not drawn (an explored or shrunk input,
        layercheck.explore): one tensor per input spec, floating ones in float64 as ``draw`` makes them."""
        self._base_inputs = [x.detach().clone() for x in tensors]
        return self

    @property
    def batch_sizes(self) -> set[int]:
        """The sizes of the inputs' B dimensions: one where they agree, none without a B."""
        return {spec.layout.size[spec.layout.batch_dim] for spec in self.specs if spec.layout.batch_dim is not None}

    @property
    def batch(self) -> int | None:
        """The size of the inputs' B dimension, or None: no input has one, or theirs differ."""
        sizes = self.batch_sizes
        return sizes.pop() if len(sizes) == 1 else None

    # -- inputs -----------------------------------------------------------------------------

    @property
    def call(self) -> Callable[..., Any]:
        """What a call of a layer that is not a module runs: ``Fn.apply``, the operator, the function."""
        return self.cls.apply if self.kind == "function" else self.cls

    @property
    def positional(self) -> tuple[Layout, ...]:
        """The layouts of the positional inputs: what ``initialize`` receives."""
        return tuple(spec.layout for spec in self.specs if spec.name is None)

    def base_inputs(self, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None, *,
                    seed: int | None = None, share: bool = False, observations: int | None = None,
                    ) -> list[torch.Tensor]:
        """The generated inputs, one per input spec, as new tensors on ``device`` (the target's
        own, ``--on``, by default): floating ones that follow the check's dtype in ``dtype``,
        the others in their own dtype. ``seed`` draws another set of inputs, each as its spec
        says. ``share``: the inputs that take a gradient are the drawn tensors themselves where
        they already have that dtype and device (not copies: read-only, see :meth:`inputs`).
        ``observations``: only the batch's first few, in those inputs that have a B dimension
        (cut before they are copied)."""
        if seed is not None:
            drawn = [draw(spec, seed + index) for index, spec in enumerate(self.specs)]
        else:
            if self._base_inputs is None:
                self._base_inputs = [draw(spec, self.seed * 1_000_003 + i) for i, spec in enumerate(self.specs)]
            drawn = self._base_inputs
        if observations is not None:
            drawn = [x if (dim := spec.layout.batch_dim) is None else x.narrow(dim, 0, min(observations, x.shape[dim]))
                     for spec, x in zip(self.specs, drawn)]
        device = self.home if device is None else device
        return [x.to(device=device, dtype=input_dtype(spec, dtype), copy=not (share and spec.takes_grad))
                for spec, x in zip(self.specs, drawn)]

    def inputs(
        self,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        *,
        requires_grad: bool = False,
        seed: int | None = None,
        share: bool = False,
        observations: int | None = None,
    ) -> list[torch.Tensor]:
        """Fresh copies of the generated inputs (leaf tensors); with ``requires_grad``, those
        that take a gradient (floating, not declared constant) require it; ``seed`` draws
        another set. ``share`` (not with ``requires_grad``): those that take a gradient may be
        the tensors every check's inputs are copied from, to be read and never written or
        handed to a layer (a LayerFunction's point, which it copies for each call); the
        others are copies still. One full-size copy fewer at production sizes.
        ``observations``: the batch's first few only (see :meth:`base_inputs`)."""
        if share and requires_grad:
            raise ValueError("shared inputs cannot require grad: they are read-only")
        xs = self.base_inputs(dtype, device, seed=seed, share=share, observations=observations)
        if requires_grad:
            for spec, x in zip(self.specs, xs):
                if spec.takes_grad:
                    x.requires_grad_(True)
        return xs

    def split(self, inputs: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
        """A call's arguments from its tensor inputs: the positional ones, and the keyword ones
        with the plain keyword values."""
        positional = [x for spec, x in zip(self.specs, inputs) if spec.name is None]
        keywords = {spec.name: x for spec, x in zip(self.specs, inputs) if spec.name is not None}
        return positional, {**self.constants, **keywords}

    def observation(self, index: int, seed: int) -> torch.Tensor:
        """Another observation (batch of one) of input ``index``, drawn as that input is drawn.
        A captured input has no more observations than the model gave it: a captured one is
        used, its floating values scaled (Note [observations beyond the captured batch])."""
        spec = self.specs[index]
        dim = spec.layout.batch_dim
        assert dim is not None
        x = draw(dataclasses.replace(spec, layout=spec.layout.with_size("B", 1)), seed)
        if spec.captured is not None and x.is_floating_point():
            x = x * (1.5 + seed % 4 / 2)
        return x


# Note [observations beyond the captured batch]
#     A check that needs more observations than a scan captured (``observations`` grows a batch
#     of 2 to 4) takes captured ones again. As they were, a batch-wide statistic could not tell
#     them apart: a mean over the batch [a, b, b, a] is the mean over [a, b], and where a and b
#     have nearly the same statistic (1 model draw in about 1000 for a tiny LM's RMSNorm input)
#     a norm that reduces over the batch passed. Scaled by 1.5 to 3 they are observations the
#     layer takes as readily, and they move every batch-wide statistic.


def kind_of(layer: object) -> str | None:
    """``module`` (an nn.Module class or instance), ``function`` (an autograd.Function
    subclass), ``operator`` (a torch.library custom operator), ``callable`` (a plain function of
    tensors), or None for anything else."""
    if isinstance(layer, nn.Module) or (inspect.isclass(layer) and issubclass(layer, nn.Module)):
        return "module"
    if inspect.isclass(layer) and issubclass(layer, torch.autograd.Function):
        return "function"
    if is_custom_op(layer):
        return "operator"
    if inspect.isfunction(layer) or isinstance(layer, functools.partial):
        return "callable"
    return None


def is_custom_op(obj: object) -> bool:
    """A ``torch.library.custom_op`` operator (its CustomOpDef), or ``torch.ops.ns.name``."""
    try:
        from torch._library.custom_ops import CustomOpDef
    except ImportError:  # a torch without torch.library.custom_op
        CustomOpDef = ()  # type: ignore[assignment, misc]
    return isinstance(obj, (CustomOpDef, torch._ops.OpOverloadPacket, torch._ops.OpOverload))


def custom_op_name(obj: Any) -> str:
    """``ns::name`` of a custom operator."""
    return str(getattr(obj, "_qualname", None) or getattr(obj, "_qualified_op_name", None) or obj)


def _defined(obj: Any) -> Any:
    """The Python object a target was defined as: a custom operator's function, else itself."""
    return getattr(obj, "_init_fn", obj)


def display_name(obj: Any) -> str:
    """How reports name a layer given in Python: ``module:Qualname``, ``ns::name`` for an operator."""
    if is_custom_op(obj):
        return custom_op_name(obj)
    defined = _defined(obj)
    module = getattr(defined, "__module__", None) or type(defined).__module__
    qualname = getattr(defined, "__qualname__", None) or getattr(defined, "__name__", None) or type(defined).__name__
    return f"{module}:{qualname}"


def input_dtype(spec: InputSpec, dtype: torch.dtype) -> torch.dtype:
    """The dtype of an input in a run whose floating inputs are ``dtype``."""
    if spec.dtype == "float":
        return dtype
    return getattr(torch, spec.dtype)


def draw(spec: InputSpec, seed: int) -> torch.Tensor:
    """An input's values, seeded: float64 for floating inputs (cast for each run), int64 or
    bool for the others."""
    if spec.captured is not None:
        from layercheck.target.replay import captured_value  # the values a model gave the layer (layercheck scan)

        return captured_value(spec, seed)
    gen = torch.Generator().manual_seed(seed)
    size, values = spec.layout.size, spec.values
    if values.distribution == "integers":
        return torch.randint(int(values.low), int(values.high), size, generator=gen, dtype=torch.int64)
    if values.distribution == "bernoulli":
        return torch.rand(size, generator=gen, dtype=torch.float64) < values.p
    if values.distribution == "uniform":
        return values.low + (values.high - values.low) * torch.rand(size, generator=gen, dtype=torch.float64)
    # x * std + mean even for the default values (std 1, mean 0): returning the draw as is, one
    # full-size pass fewer, measured slower side by side (the suite at 0.95 of the time before
    # the session's other cuts with it, 0.85-0.92 without); the cause was not found (a draw
    # filled into torch's own allocation instead of NumPy's made no difference)
    x = standard_normal(size, seed)
    if values.distribution == "positive":
        return x.abs()
    return x * values.std + values.mean


class Subject:
    """One fresh layer under test (module or autograd.Function), on one dtype and device."""

    def __init__(self, target: Target, module: nn.Module | None, *, dtype: torch.dtype | None = None,
                 device: torch.device | None = None) -> None:
        self.target = target
        self.module = module
        self.dtype = dtype or torch.float32
        self.device = device or target.home
        self.fed: list[Any] = []  # the inputs of the last call as the layer got them
        self.drew_random = False  # whether the last call drew from torch's random stream

    @property
    def kind(self) -> str:
        return self.target.kind

    @property
    def has_predict(self) -> bool:
        return self.module is not None and callable(getattr(self.module, "predict", None))

    def inputs(self, *, requires_grad: bool = False, share: bool = False) -> list[torch.Tensor]:
        """The target's generated inputs in this subject's dtype and device (``share``: see
        :meth:`Target.inputs`)."""
        return self.target.inputs(self.dtype, self.device, requires_grad=requires_grad, share=share)

    # -- calling ----------------------------------------------------------------------------

    def call(self, mode: Mode, inputs: Sequence[torch.Tensor], *, rng_seed: int | None = None,
             grad: bool | None = None) -> Any:
        """Run the layer once: predict (eval, ``predict`` if defined, no grad by default) or
        forward (train, with grad). The random stream is reseeded for the call (``rng_seed``,
        the target's seed by default) so that dropout-like layers are a fixed function.

        An input that requires grad reaches the layer as a copy computed from it, as the
        output of the layer before would inside a network: a layer may then write into it (an
        in-place activation, a Function that marks its input dirty) as it may in training,
        and the gradient still reaches the input given. ``self.fed`` holds what the layer got
        (input_unchanged compares it with the originals)."""
        if grad is None:
            grad = mode is not Mode.PREDICT
        if grad:
            inputs = [x.clone() if isinstance(x, torch.Tensor) and x.requires_grad and x.is_leaf else x
                      for x in inputs]
        self.fed = list(inputs)
        fn: Callable[..., Any]
        if self.module is not None:
            self.module.train(mode is Mode.FORWARD)
            fn = self.module.predict if mode is Mode.PREDICT and self.has_predict else self.module  # type: ignore[assignment]
        else:
            fn = self.target.call
        seed = self.target.seed if rng_seed is None else rng_seed
        positional, keywords = self.target.split(inputs)
        with seeded(seed, self.device), torch.set_grad_enabled(grad):
            start = stream_state(self.device)
            try:
                return fn(*positional, **keywords)
            except Exception as exc:
                raise LayerRaised(mode.value, exc, user_trace(exc), device=self.device.type) from exc
            finally:
                # whether the call drew from torch's random stream: a random layer (dropout, stochastic
                # depth) whose draws under two seeds happen to agree is random all the same
                self.drew_random = not torch.equal(stream_state(self.device), start)

    def predict(self, inputs: Sequence[torch.Tensor], **kw: Any) -> Any:
        return self.call(Mode.PREDICT, inputs, **kw)

    def forward(self, inputs: Sequence[torch.Tensor], **kw: Any) -> Any:
        return self.call(Mode.FORWARD, inputs, **kw)

    # -- parameters and state ---------------------------------------------------------------

    def parameters(self) -> list[tuple[str, nn.Parameter]]:
        """Learnable parameters: those with ``requires_grad``."""
        if self.module is None:
            return []
        return [(n, p) for n, p in self.module.named_parameters() if p.requires_grad]

    def buffers(self) -> dict[str, torch.Tensor | None]:
        """The layer's state: every buffer slot by dotted name, None where a slot is empty."""
        if self.module is None:
            return {}
        return {
            f"{prefix}.{key}" if prefix else key: buf
            for prefix, mod in self.module.named_modules()
            for key, buf in mod._buffers.items()
        }

    def snapshot(self) -> dict[str, torch.Tensor | None]:
        """A copy of the state (every buffer), to compare with or report."""
        return {k: (None if v is None else v.detach().clone()) for k, v in self.buffers().items()}

    def checkpoint(self) -> Checkpoint:
        """Everything a call can change in the layer, for :meth:`rewind`: the values of its
        buffers, the tensors that held them, the plain attributes of every submodule (a cache
        length kept in an int, a list of past inputs), and the values of its parameters that
        take no gradient (Note [frozen parameters as state])."""
        if self.module is None:
            return Checkpoint({}, {}, {})
        holders = self.buffers()
        # Parameters, buffers and modules held in plain attributes (LSTM's _flat_weights) are
        # references to the layer's own: kept as such, never copied.
        owned: list[Any] = [*self.module.parameters(), *self.module.buffers(), *self.module.modules()]
        shared = _Shared({_storage(t) for t in owned if isinstance(t, torch.Tensor)}, {id(o): o for o in owned})
        attributes = {prefix: {key: _Kept.of(value, shared) for key, value in vars(mod).items()
                               if key not in _MODULE_INTERNALS}
                      for prefix, mod in self.module.named_modules()}
        frozen = tuple((p, p.detach().clone()) for p in self.module.parameters() if not p.requires_grad)
        return Checkpoint(self.snapshot(), holders, attributes, frozen)

    def changes(self, reference: Checkpoint) -> list[str]:
        """What differs between the layer now and ``reference`` (another layer's checkpoint, or
        its own): ``buffer 'h'``, ``attribute 'cache.length'``."""
        now = self.checkpoint()
        changed = [f"buffer {name!r}" for name in sorted(set(now.buffers) | set(reference.buffers))
                   if not _same(now.buffers.get(name), reference.buffers.get(name))]
        for prefix, saved in now.attributes.items():
            before = reference.attributes.get(prefix, {})
            for key in sorted(set(saved) | set(before)):
                if key not in saved or key not in before or not _same(saved[key].held, before[key].held):
                    changed.append(f"attribute {f'{prefix}.{key}' if prefix else key!r}")
        return changed

    def rewind(self, checkpoint: Checkpoint) -> None:
        """Put the layer back as it was at :meth:`checkpoint`: attributes set back (ones added
        since removed), and every buffer given its value again — in place when the layer still
        holds the same tensor (it updates it in place, like running statistics), else as a new
        copy (the layer reassigned it, maybe to a tensor that aliases an output it returned)."""
        if self.module is None:
            return
        for prefix, saved in checkpoint.attributes.items():
            mod = self.module.get_submodule(prefix) if prefix else self.module
            for key in [k for k in vars(mod) if k not in _MODULE_INTERNALS and k not in saved]:
                delattr(mod, key)
            for key, kept in saved.items():
                object.__setattr__(mod, key, kept.value())
        for name, value in checkpoint.buffers.items():
            prefix, _, key = name.rpartition(".")
            mod = self.module.get_submodule(prefix) if prefix else self.module
            current = mod._buffers.get(key)
            if value is not None and current is not None and current is checkpoint.holders.get(name) \
                    and current.shape == value.shape:
                with torch.no_grad():
                    current.copy_(value)
            else:
                mod._buffers[key] = None if value is None else value.clone()
        for parameter, value in checkpoint.frozen:
            if parameter.shape == value.shape and not torch.equal(parameter.detach(), value):
                with torch.no_grad():
                    parameter.copy_(value)


_CASTS = {torch.float64: "double", torch.float32: "float", torch.float16: "half", torch.bfloat16: "bfloat16"}


def _moved(layer: nn.Module, where: torch.device, dtype: torch.dtype | None) -> nn.Module:
    """The layer cast to ``dtype`` as users cast one, and moved to ``where`` as a GPU would see
    it. The cast is ``layer.double()`` (``.float()``, ``.half()``): floating tensors only, where
    ``.to(dtype)`` would also turn complex weights real and drop their imaginary parts. On a
    GPU ``.to()`` keeps every Parameter and buffer object and replaces its data, so a layer that
    also keeps references to them in a plain dict or list (ncps' LTC keeps its parameters in
    ``_params``) reads the moved ones; moving to meta makes new objects, so such references are
    pointed at them, or the meta device would blame the layer for what a GPU does not do."""
    if dtype is not None:  # as layer.double() and .float() do: complex weights (FNO's) keep their dtype
        # nn.Module's own method: an attribute of the layer named float or half would shadow it
        layer = getattr(nn.Module, _CASTS[dtype])(layer) if dtype in _CASTS else layer.to(dtype=dtype)
    if where.type != "meta":
        return layer.to(device=where)

    def own(module: nn.Module) -> dict[str, torch.Tensor]:
        return {**dict(module.named_parameters(remove_duplicate=False)),
                **dict(module.named_buffers(remove_duplicate=False))}
    before = own(layer)
    layer = layer.to(device=where)
    after = own(layer)
    swap = {id(old): after[name] for name, old in before.items() if name in after and after[name] is not old}
    if not swap:
        return layer
    for module in layer.modules():
        for key, value in vars(module).items():
            if key in _MODULE_INTERNALS:
                continue
            if isinstance(value, dict) and any(id(v) in swap for v in value.values()):
                for k, v in list(value.items()):
                    value[k] = swap.get(id(v), v)
            elif isinstance(value, list) and any(id(v) in swap for v in value):
                value[:] = [swap.get(id(v), v) for v in value]
    return layer


# Note [frozen parameters as state]
#     A layer may keep what its training forward updates in a parameter that takes no gradient
#     rather than a buffer: MONAI's EMAQuantizer moves its codebook (embedding.weight, frozen)
#     toward the batch in every training call. That is state as running statistics are: every
#     evaluation of the gradient check restarts from the same values, or two evaluations at the
#     same point differ and the layer was failed as "not a fixed function". Put back only where a
#     call changed them (a read of each, not a write). The state checks still treat parameters
#     as parameters (the train_step check reports a frozen one the forward writes).

# Attributes every nn.Module has (its registries and hooks) and the mode flag, which each call sets.
_MODULE_INTERNALS = frozenset(vars(nn.Module())) | {"training"}


@dataclass(frozen=True)
class Checkpoint:
    """A layer's state at one moment (see :meth:`Subject.checkpoint`)."""

    buffers: dict[str, torch.Tensor | None]
    holders: dict[str, torch.Tensor | None]
    attributes: dict[str, dict[str, _Kept]]
    # Note [frozen parameters as state]: each parameter that takes no gradient, and its value
    frozen: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()


@dataclass(frozen=True)
class _Shared:
    """What a layer's plain attributes may refer to without owning it: its parameters, buffers
    and submodules (by storage, and as a deep-copy memo that maps each to itself)."""

    storages: set[int]
    memo: dict[int, Any]


@dataclass(frozen=True)
class _Kept:
    """One plain attribute as it was: a copy (given back as a fresh copy each time, so the
    checkpoint can be rewound to again), or the object itself where copying is wrong or
    impossible (functions, modules, tensors that view a parameter or buffer, objects that
    cannot be deep-copied)."""

    held: Any
    copied: bool
    shared: _Shared | None = None

    @classmethod
    def of(cls, value: Any, shared: _Shared) -> _Kept:
        if isinstance(value, torch.Tensor):
            if _storage(value) in shared.storages:
                return cls(value, False)
            return cls(value.detach().clone(), True)
        if callable(value) or isinstance(value, nn.Module):
            return cls(value, False)
        try:
            return cls(copy.deepcopy(value, dict(shared.memo)), True, shared)
        except Exception:
            pass
        try:
            # a container of tensors a call computed (spikingjelly's memories dict holds the
            # membrane potential with its graph, which deepcopy refuses): their values, as for
            # a tensor attribute
            value = tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) and t.grad_fn is not None
                             and _storage(t) not in shared.storages else t, value)
            return cls(copy.deepcopy(value, dict(shared.memo)), True, shared)
        except Exception:  # an object that cannot be copied: assume the layer does not change it
            return cls(value, False)

    def value(self) -> Any:
        if not self.copied:
            return self.held
        if isinstance(self.held, torch.Tensor):
            return self.held.clone()
        return copy.deepcopy(self.held, dict(self.shared.memo) if self.shared is not None else None)


_PLAIN = (int, float, complex, str, bytes, bool, type(None))


def _same(a: Any, b: Any) -> bool:
    """Whether two values of a layer's state are equal: tensors by value, plain data (numbers,
    strings, and lists, tuples and dicts of them) by ==. Other objects have no equality to go
    by (a copy is never == its original by default): they count as unchanged."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and bool(torch.equal(a.detach().cpu(), b.detach().cpu())))
    try:
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    except Exception:  # a container of the layer's own kind that refuses len() (e3nn's Irreps): no equality
        return True
    if isinstance(a, _PLAIN) or isinstance(b, _PLAIN):
        return type(a) is type(b) and a == b
    return True


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return id(t)

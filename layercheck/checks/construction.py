"""How a layer is made and copied: the factory keywords ``device=``/``dtype=`` (with the deferred
initialisation they serve, ``to_empty`` + ``reset_parameters``), ``copy.deepcopy`` and a whole-module
``torch.save``/``torch.load`` round trip (EMA, SWA, checkpoints of the whole model)."""

from __future__ import annotations

import copy as copying
import inspect
import io
import pickle
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from layercheck._sdk_internal import failing, output_names, rounding_allowance_of, rounding_tolerances, user_trace
from layercheck.sdk import (
    PREDICT,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    Subject,
    assert_close,
    check,
    dtype_name,
    modules_only,
    nonfinite,
    predict_run,
    reference_predict,
    seeded,
)
from layercheck.target.building import initialize_hook

_NO_CONSTRUCTOR = modules_only("operations (autograd.Function) have no constructor")

# What factory_kwargs constructs with: every tensor must land there.
_FACTORY = (("device", torch.device("meta")), ("dtype", torch.float64))


# -- factory_kwargs ---------------------------------------------------------------------------


@check(
    "factory_kwargs",
    title="device= and dtype= given to the constructor place every parameter and buffer; "
          "to_empty + reset_parameters rebuild a meta-constructed layer",
    requires=("predict_runs",),
    applies=_NO_CONSTRUCTOR,
    any_batch=True,
)
def factory_kwargs(ctx: Context) -> str:
    """When the constructor accepts ``device=`` and ``dtype=`` (PyTorch's factory keywords),
    constructs the layer with ``device="meta"`` and with ``dtype=torch.float64`` and requires every
    parameter and buffer to be there — after the constructor and again after ``initialize`` (or a
    lazy module's first call), which must honour them too (PyTorch's ``test_factory_kwargs``).
    Then rebuilds the meta-constructed layer as FSDP's deferred initialisation does:
    ``to_empty`` on the CPU, or on the ``--on`` device (every tensor filled with NaN here, so
    that nothing can pass on leftover memory) and ``reset_parameters()`` of every module that
    defines one; every parameter must be set again and predict must give finite outputs. The
    rebuild is tried when the layer itself, or every module that owns parameters or buffers,
    defines ``reset_parameters``; the message says when it was not.

    Accepting ``device=``/``dtype=`` promises that the layer is created there: a tensor made
    without them lands on the CPU in float32, so a model built on ``meta`` (to shard it before
    allocating, or to measure it) or directly on the GPU in bfloat16 holds a stray CPU or float32
    tensor, and one rebuilt by ``to_empty`` keeps uninitialised memory wherever
    ``reset_parameters`` forgets a tensor. Fix: pass ``factory_kwargs = {"device": device,
    "dtype": dtype}`` to every tensor, parameter and submodule the constructor (and
    ``initialize``) creates, and let ``reset_parameters`` set every parameter and buffer,
    constants included.
    """
    if ctx.target.instance is not None:
        # A limit of the call, not of the layer: it does not apply (strict=True passes a correct instance).
        raise CheckSkipped("does not apply to an instance: layercheck cannot construct another with device= and "
                           "dtype= (pass the class and its constructor arguments to check that)")
    cls = ctx.target.cls
    declared = [(key, value) for key, value in _FACTORY if key in ctx.target.kwargs or _declares(cls, key)]
    if not declared:
        raise CheckSkipped(_undeclared(cls))
    done, rebuilt, given = [], None, _given_tensors(ctx)
    for key, value in declared:
        layer = _construct_with(ctx, key, value)
        _assert_placed(layer, key, value, "the constructor", given=given)
        _initialize_with(ctx, layer, key, value, given)
        done.append(f"{key}={_shown(value)}")
        if key == "device":
            rebuilt = _rebuild(ctx, layer)
    message = f"constructed with {' and '.join(done)}: every parameter and buffer is there"
    return message + (f"; {rebuilt}" if rebuilt else "")


def _declares(cls: type, key: str) -> bool:
    """Whether the constructor names ``key`` (PyTorch's rule for its factory keywords: its module
    battery tries them on constructors that declare them). A constructor that takes ``**kwargs``
    declares what the base class it hands them on to declares (``LSTM(*args, **kwargs)`` passes
    them to ``RNNBase(..., device=None, dtype=None)``); ``**kwargs`` alone promises nothing: an
    einops-style layer reads unknown keywords as axis lengths, a Gaussian-process kernel keeps them."""
    for klass in cls.__mro__:
        if klass in (nn.Module, object):
            return False
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            parameters = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            return False
        if any(p.name == key and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in parameters):
            return True
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            return False
    return False


def _undeclared(cls: type) -> str:
    """Why factory_kwargs does not apply: the constructor names neither keyword."""
    try:
        takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        takes_any = False
    if not takes_any:
        return f"the constructor of {cls.__name__} accepts neither device= nor dtype="
    return (f"the constructor of {cls.__name__} names neither device= nor dtype= (it takes **kwargs, which need not "
            "be factory keywords: PyTorch tries them only on constructors that declare them); a layer whose **kwargs "
            "do take them says so by passing them among its constructor arguments (a spec's kwargs: {device: cpu}; "
            "--kwarg device=cpu)")


def _shown(value: Any) -> str:
    return repr(str(value)) if isinstance(value, torch.device) else f"torch.{dtype_name(value)}"


def _construct_with(ctx: Context, key: str, value: Any) -> nn.Module:
    """The layer constructed with ``key=value`` (seeded)."""
    target = ctx.target
    kwargs = {**target.kwargs, key: value}
    try:
        with seeded(ctx.seed):
            return target.cls(*target.args, **kwargs)
    except Exception as exc:
        raise _constructor_failure(ctx, key, value, exc) from exc


def _constructor_failure(ctx: Context, key: str, value: Any, exc: Exception) -> CheckFailed:
    return CheckFailed(f"constructing {ctx.target.cls.__name__} with {key}={_shown(value)} raised "
                       f"{type(exc).__name__}: {exc}", traceback=user_trace(exc), keyword=key)


def _initialize_with(ctx: Context, layer: nn.Module, key: str, value: Any, given: set[int]) -> None:
    """Run ``initialize(*layouts)`` (or a lazy module's first call, on inputs of the keyword's
    device or dtype) and require it to honour the keyword as well."""
    hook = initialize_hook(layer)
    lazy = _has_lazy(layer)
    if not callable(hook) and not lazy:
        return
    try:
        if callable(hook):
            with seeded(ctx.seed):
                hook(*ctx.layouts)
        if _has_lazy(layer):
            inputs = ctx.target.base_inputs(value if key == "dtype" else torch.float32,
                                            value if key == "device" else "cpu")
            layer.eval()
            with seeded(ctx.seed), torch.no_grad():
                layer(*inputs)
    except Exception as exc:
        how = "initialize" if callable(hook) else "the lazy first call"
        raise CheckFailed(f"{how} of {type(layer).__name__} constructed with {key}={_shown(value)} raised "
                          f"{type(exc).__name__}: {exc}; it must create its tensors with the device and dtype the "
                          "constructor was given", traceback=user_trace(exc), keyword=key) from exc
    _assert_placed(layer, key, value, "initialize" if callable(hook) else "the lazy first call", given=given)


def _has_lazy(layer: nn.Module) -> bool:
    from torch.nn.parameter import is_lazy

    return any(is_lazy(t) for t in [*layer.parameters(), *layer.buffers()])


def _given_tensors(ctx: Context) -> set[int]:
    """The storages of the tensors the constructor is given (in its arguments, or in lists,
    tuples and dicts among them): a layer keeps such a tensor where the caller made it (a
    loss's class ``weight=``), which is the caller's to place, not the keyword's."""
    found: set[int] = set()  # less 0 below: a tensor without storage has nothing to follow
    pending: list[Any] = [*ctx.target.args, *ctx.target.kwargs.values()]
    while pending:
        value = pending.pop()
        if isinstance(value, torch.Tensor):
            found.add(value.untyped_storage().data_ptr())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
    return found - {0}


def _assert_placed(layer: nn.Module, key: str, value: Any, after: str, *, given: set[int]) -> None:
    for kind, name, t in _tensors(layer):
        if _is_given(t, given):
            continue  # the very tensor the caller passed in (see _given_tensors)
        wrong = t.device.type != value.type if key == "device" else (t.dtype.is_floating_point and t.dtype != value)
        if wrong:
            shown = str(t.device) if key == "device" else dtype_name(t.dtype)
            raise CheckFailed(
                f"constructed with {key}={_shown(value)}, {kind} {name!r} is {shown} after {after}: it is created "
                f"without the {key}= the constructor was given. Fix: pass factory_kwargs = {{'device': device, "
                f"'dtype': dtype}} to every tensor, parameter and submodule it creates (torch.zeros(n, "
                f"**factory_kwargs), nn.Linear(..., **factory_kwargs))", tensor=f"{kind} {name!r}", keyword=key,
                after=after, actual=shown)


def _is_given(t: torch.Tensor, given: set[int]) -> bool:
    """Whether ``t`` is one of the caller's tensors (see _given_tensors); a tensor on meta, or a
    lazy one not yet created, has no storage of its own to compare."""
    from torch.nn.parameter import is_lazy

    return t.device.type != "meta" and not is_lazy(t) and t.untyped_storage().data_ptr() in given


def _tensors(layer: nn.Module) -> Iterator[tuple[str, str, torch.Tensor]]:
    for name, p in layer.named_parameters():
        yield "parameter", name, p
    for name, b in layer.named_buffers():
        yield "buffer", name, b


def _owns_tensors(module: nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False))


def _rebuild(ctx: Context, layer: nn.Module) -> str:
    """FSDP's deferred initialisation of the meta-constructed (and initialised) ``layer``:
    ``to_empty`` on the CPU, then ``reset_parameters`` of every module that defines one. Returns
    what the message says about it."""
    lacking = [f"{name} ({type(m).__name__})" if name else f"the layer ({type(m).__name__})"
               for name, m in layer.named_modules()
               if _owns_tensors(m) and not callable(getattr(m, "reset_parameters", None))]
    if lacking and not callable(getattr(layer, "reset_parameters", None)):
        return (f"to_empty + reset_parameters not tried: {', '.join(lacking[:3])} owns parameters or buffers but "
                "defines no reset_parameters")
    if _has_lazy(layer):
        return "to_empty + reset_parameters not tried: parameters are still uninitialised (lazy) on meta"
    layer.to_empty(device=ctx.target.home)  # the CPU, or the device of --on
    with torch.no_grad():
        for _, _, t in _tensors(layer):
            if t.dtype.is_floating_point:
                t.fill_(float("nan"))  # what to_empty leaves is undefined: make forgetting a tensor visible
    resetting = [(name or type(m).__name__, m) for name, m in layer.named_modules()
                 if callable(getattr(m, "reset_parameters", None))]
    for name, module in resetting:
        try:
            with seeded(ctx.seed), torch.no_grad():
                module.reset_parameters()
        except Exception as exc:
            raise CheckFailed(f"after to_empty, reset_parameters of {name} raised {type(exc).__name__}: {exc}",
                              traceback=user_trace(exc), module=name) from exc
    unset = [f"{kind} {name!r}" for kind, name, t in _tensors(layer)
             if t.dtype.is_floating_point and bool(torch.isnan(t).any())]
    subject = Subject(ctx.target, layer)
    with failing("rebuilt from meta by to_empty + reset_parameters", hint=_unset_hint(unset)):
        outputs = predict_run(subject).outputs
    for name, out in zip(output_names(outputs), outputs):
        problem = nonfinite(out) if out.is_floating_point() else None
        if problem is not None:
            raise CheckFailed(f"rebuilt from meta by to_empty + reset_parameters, predict {name} has {problem}"
                              f"{_unset_hint(unset)}", tensor=name, unset=unset)
    parameters = [u for u in unset if u.startswith("parameter")]
    if parameters:
        raise CheckFailed(f"rebuilt from meta by to_empty + reset_parameters, {_unset_hint(unset).removeprefix('; ')}",
                          unset=unset)
    return (f"to_empty + reset_parameters of {len(resetting)} module(s) rebuild the meta-constructed layer, whose "
            "predict runs and is finite")


def _unset_hint(unset: list[str]) -> str:
    if not unset:
        return ""
    return (f"; reset_parameters leaves {', '.join(unset[:4])} as to_empty left it (uninitialised memory). Fix: set "
            "every parameter and buffer in reset_parameters, constants included (recompute them there)")


# -- copy -------------------------------------------------------------------------------------


@check(
    "copy",
    title="copy.deepcopy and a torch.save/torch.load round trip of the whole layer reproduce its outputs",
    uses=(PREDICT,),
    applies=modules_only("operations (autograd.Function) hold nothing to copy"),
    tolerances=rounding_tolerances("relative difference between predict outputs of the layer and of its copies"),
    any_batch=True,
)
def copy(ctx: Context) -> str:
    """Copies a used layer (a training forward first when it has state) with ``copy.deepcopy`` and
    with a ``torch.save``/``torch.load`` round trip of the whole module, then trains the original
    a little (every learnable parameter nudged, another forward) and requires each copy to
    predict what the original predicted when it was copied (PyTorch's ``test_pickle``).

    EMA and SWA (``torch.optim.swa_utils.AveragedModel``), teacher networks and whole-model
    checkpoints copy layers: an attribute that cannot be copied or pickled (a ``staticmethod``
    object, a lambda, a lock) makes them raise, and a copy that still refers to the original (a
    hook that closes over ``self``, a tensor shared by reference) silently follows the live model.
    Fix: plain functions or modules as attributes; hooks that use the module they are given
    (``hook(module, args, output)``), not ``self``. A class defined inside a function cannot be
    pickled by reference, and a module that refuses to be pickled by design (parametrized ones):
    then only the deep copy is judged, and the message says why.
    """
    source = ctx.fresh()
    module = source.module
    assert module is not None
    # Fresh inputs for every call: a layer that writes into its input (input_unchanged's failure) must not
    # fail here too, its copy fed an input the original already changed.
    used = bool(source.snapshot())
    if used:  # running statistics, hidden state: what training leaves behind, and what a copy must carry
        with failing("in forward"):
            source.forward(source.inputs(), grad=False)
    twin = _deepcopy(module)
    saved, unsaved = _save(module)  # at the same moment; a failure is reported after the deep copy's
    if used:
        with failing("in predict"):
            expected = predict_run(source, source.inputs()).outputs
    else:
        expected = reference_predict(ctx).outputs
    _train(source, source.inputs())
    with failing("deep-copied"):
        copied = predict_run(Subject(ctx.target, twin), source.inputs()).outputs
    try:
        assert_close(expected, copied, names=output_names(expected), labels=("original", "deep copy"),
                     allowance=rounding_allowance_of(ctx),
                     what="predict of a deep copy vs the original when it was copied (the original trained since)")
    except CheckFailed as exc:
        raise CheckFailed(f"{exc.message}. The copy still refers to the original{_aliases(twin, module)}: EMA and SWA "
                          "copies would follow the live model. Fix: hooks that use the module they are given "
                          "(hook(module, args, output)) rather than closing over self, and no tensor shared by "
                          "reference", **exc.details) from None
    if isinstance(unsaved, CheckFailed):
        raise unsaved
    if saved is None:
        return f"a deep copy reproduces {len(expected)} predict output(s) and is independent of the original; {unsaved}"
    with failing("loaded by torch.load"):
        loaded = predict_run(Subject(ctx.target, torch.load(saved, weights_only=False)), source.inputs()).outputs
    assert_close(expected, loaded, names=output_names(expected), labels=("original", "torch.load"),
                 allowance=rounding_allowance_of(ctx),
                 what="predict of the layer saved whole with torch.save and loaded with torch.load vs the original")
    return (f"a deep copy and a torch.save/torch.load round trip reproduce {len(expected)} predict output(s), "
            "independent of the original")


def _deepcopy(module: nn.Module) -> nn.Module:
    try:
        return copying.deepcopy(module)
    except Exception as exc:
        culprit = _culprit(module, lambda value, memo: copying.deepcopy(value, memo))
        raise CheckFailed(f"copy.deepcopy(layer) raised {type(exc).__name__}: {exc}{culprit}. EMA and SWA "
                          "(AveragedModel) deep-copy the model. Fix: keep plain functions or modules in attributes "
                          "(a staticmethod object, a lock or a generator cannot be copied)",
                          traceback=user_trace(exc)) from exc


def _save(module: nn.Module) -> tuple[io.BytesIO | None, str | CheckFailed]:
    """The layer saved whole with torch.save; or None and why it was not tried, or the failure."""
    buffer = io.BytesIO()
    try:
        torch.save(module, buffer)
    except Exception as exc:
        local = [type(m).__qualname__ for m in module.modules()
                 if not _findable(type(m)) and type(m).__qualname__ in str(exc)]
        if local:
            return None, (f"torch.save not tried: class {local[0]} cannot be found by name (defined inside a "
                          "function?), and pickle stores classes by reference")
        refusing = [type(m).__name__ for m in module.modules() if _refuses_pickling(m, exc)]
        if refusing:
            return None, (f"torch.save not tried: {refusing[0]} refuses to be pickled by design "
                          f"({_first_sentence(exc)}); save it through its state_dict (the state_dict check)")
        culprit = _culprit(module, _pickle_alone)
        return None, CheckFailed(f"torch.save of the whole layer raised {type(exc).__name__}: {exc}{culprit}. Saving "
                                 "the whole model, and multiprocessing, pickle it. Fix: a module-level function or a "
                                 "module (nn.SiLU()) instead of a lambda or a local function",
                                 traceback=user_trace(exc))
    buffer.seek(0)
    return buffer, ""


def _findable(cls: type) -> bool:
    """Whether pickle can find ``cls`` by its module and qualified name."""
    obj: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is cls


def _refuses_pickling(module: nn.Module, exc: Exception) -> bool:
    """A module whose own ``__getstate__`` raises on purpose (torch's parametrized modules)."""
    own = type(module).__dict__.get("__getstate__")
    if own is None or isinstance(exc, (TypeError, AttributeError, pickle.PicklingError)):
        return False
    frames = [f.name for f in _frames(exc)]
    return bool(frames) and frames[-1] == getattr(own, "__name__", None)


def _frames(exc: BaseException) -> list[Any]:
    import traceback

    return list(traceback.extract_tb(exc.__traceback__))


def _first_sentence(exc: BaseException) -> str:
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return line.split(". ")[0].removesuffix(".")


def _train(source: Subject, inputs: list[torch.Tensor]) -> None:
    """What training does to the original after it was copied: every learnable parameter moves,
    and state moves with another forward."""
    assert source.module is not None
    gen = torch.Generator().manual_seed(source.target.seed + 53)
    with torch.no_grad():
        for p in source.module.parameters():
            if p.is_floating_point() and p.numel():
                noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.device, p.dtype)
                p.add_(noise * 0.1 * max(float(p.abs().max()), 1e-2))
    if source.snapshot():
        try:
            source.forward(inputs, grad=False)
        except LayerRaised:
            pass  # the nudged layer may not run; the copies are judged all the same


def _pickle_alone(value: Any, memo: dict[int, Any]) -> None:
    """Pickle ``value`` with every module it refers to left out (stood in by an id)."""

    class _Pickler(pickle.Pickler):
        def persistent_id(self, obj: Any) -> Any:
            return id(obj) if id(obj) in memo else None

    _Pickler(io.BytesIO()).dump(value)


_INTERNALS = frozenset(("_parameters", "_buffers", "_modules"))


def _culprit(module: nn.Module, attempt: Any) -> str:
    """Which attribute or hook of which submodule cannot be copied (``attempt(value, memo)``
    raises), with every module, parameter and buffer of the layer kept out of the attempt."""
    owned: list[Any] = [*module.modules(), *module.parameters(), *module.buffers()]
    memo = {id(o): o for o in owned}
    for prefix, sub in reversed(list(module.named_modules())):
        for key, value in vars(sub).items():
            if key in _INTERNALS or id(value) in memo:
                continue
            try:
                attempt(value, dict(memo))
            except Exception:
                hook = _hook_name(key, value, memo)
                where = f"{prefix}.{key}" if prefix else key
                return (f" — {hook} of {type(sub).__name__}" if hook else
                        f" — attribute {where!r} of {type(sub).__name__} ({type(value).__name__})")
    return ""


def _hook_name(key: str, value: Any, memo: dict[int, Any]) -> str:
    """``forward hook <lambda>`` when ``key`` is a hook registry holding the culprit."""
    if not key.endswith("hooks") or not isinstance(value, dict):
        return ""
    for hook in value.values():
        try:
            _pickle_alone(hook, dict(memo))
        except Exception:
            kind = key.strip("_").removesuffix("_hooks").replace("_", " ")
            return f"{kind} hook {getattr(hook, '__qualname__', repr(hook))}"
    return ""


def _aliases(twin: nn.Module, original: nn.Module) -> str:
    """What in the deep copy still refers to the original: hooks and attributes (or the closures
    of functions held there) that reach one of its modules, parameters or buffers."""
    theirs = {id(o): o for o in [*original.modules(), *original.parameters(), *original.buffers()]}
    found: list[str] = []
    for prefix, sub in twin.named_modules():
        for key, value in vars(sub).items():
            if key in _INTERNALS:
                continue
            items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) \
                else [value]
            for item in items:
                if _reaches(item, theirs):
                    what = (f"{key.strip('_').removesuffix('_hooks').replace('_', ' ')} hook "
                            f"{getattr(item, '__qualname__', type(item).__name__)}" if key.endswith("hooks")
                            else f"attribute {f'{prefix}.{key}' if prefix else key!r}")
                    found.append(f"{what} of {type(sub).__name__}")
    if not found:
        return ""
    return f" through {', '.join(found[:3])}"


def _reaches(item: Any, theirs: dict[int, Any]) -> bool:
    if id(item) in theirs:
        return True
    if getattr(item, "__self__", None) is not None and id(item.__self__) in theirs:
        return True
    cells = getattr(item, "__closure__", None) or ()
    for cell in cells:
        try:
            if id(cell.cell_contents) in theirs:
                return True
        except ValueError:  # an empty cell
            continue
    return False

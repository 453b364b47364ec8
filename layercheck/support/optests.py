"""Three of ``torch.library.opcheck``'s tests, run without the imports opcheck makes: a pass here
is opcheck's pass; anything else is left to opcheck (Note [opcheck without its imports]).

Note [opcheck without its imports]
    ``torch.library.opcheck`` lives in ``torch.testing._internal.optests``, whose package imports
    ``torch._dynamo`` and ``functorch.compile`` (0.9 s of CPU, most of an ``import torch`` more),
    and its ``test_faketensor`` builds a ``FakeTensorMode`` (whose constructor imports
    ``torch._dynamo.config``, so all of ``torch._dynamo``) with a ``ShapeEnv`` (sympy): a run on a
    tiny custom operator paid twice what a Module's run pays to start. The three tests the checks
    run by default need none of it:

    - ``test_schema`` is ``SchemaCheckMode`` around one call on copies of the arguments (its
      module imports nothing heavy); here the copies keep sizes, strides and ``requires_grad`` as
      ``torch._dynamo.utils.clone_input`` does for dense tensors.
    - ``test_autograd_registration`` asks the dispatcher whether the operator has a kernel at an
      autograd key and, if not, calls it with autograd's fallback doing nothing and looks for an
      output that requires grad: the same lines, with the same calls of ``torch._C``.
    - ``test_faketensor`` runs each custom operator the call reaches twice, on the real tensors
      and on fake ones, and compares the outputs' number, sizes, dtypes, devices, strides,
      storage offsets, conjugation, ``requires_grad`` and aliasing (``CrossRefFakeMode``). Here
      the second run is on ``meta`` tensors of the same sizes, strides, offsets and storages:
      ``register_fake`` registers the fake kernel as the operator's Meta kernel too (with
      ``torch.library.get_ctx()`` raising), which is what a fake tensor runs for a custom operator,
      and the outputs are compared as ``CrossRefFakeMode`` compares them, a ``meta`` output
      standing for one on the inputs' device. Which operators are compared is
      ``CrossRefFakeMode``'s rule (not aten, prims or prim; a Meta kernel; not dynamic-shaped,
      data-dependent or an in-place view).

    Only a pass is taken from here. Where the short way finds a difference, raises, or meets
    what it was not written for (a tensor subclass, sparse or quantized tensors, inputs on two
    devices, an operator without tensor arguments), opcheck runs as before and its outcome is
    the verdict and the message: a fake kernel that the meta run cannot serve (one that asks
    ``get_ctx()`` for a data-dependent size, or reads a tensor it was not given, which a fake
    mode refuses and a meta run may not) costs the imports, never a false alarm. What the short
    way could pass and opcheck fail: a fake kernel that branches on its inputs' device (it sees
    ``meta`` here, the real device under a fake mode). tests/test_optests.py holds the short
    ways to opcheck's verdicts on operators right and wrong in each of the ways the tests judge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map_only

_BUILTIN = ("aten", "prims", "prim")  # opcheck's fake_check ignores these (optests/fake_tensor.py)
_UNCOMPARED_TAGS = ("dynamic_output_shape", "inplace_view", "data_dependent_output")


def passes(test: str, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether opcheck's ``test`` passes on ``op(*args, **kwargs)``, judged without its imports;
    False where this cannot tell (then opcheck judges). ``op``: an OpOverload."""
    judge = _TESTS.get(test)
    if judge is None or not isinstance(op, torch._ops.OpOverload):
        return False
    leaves = tree_flatten((args, kwargs))[0]
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    if not tensors or not all(_plain(t) for t in tensors):
        return False
    try:
        return judge(op, args, kwargs)
    except Exception:  # the short way broke: opcheck judges
        return False


def _plain(t: torch.Tensor) -> bool:
    """A dense tensor of no subclass, quantization or meta: what the short ways were written for."""
    return (type(t) is torch.Tensor or type(t) is torch.nn.Parameter) and t.layout == torch.strided \
        and not t.is_quantized and not t.is_meta and t.device.type in ("cpu", "cuda", "xpu")


def _copied(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """Copies of the tensors with their sizes, strides and requires_grad, as opcheck's
    ``deepcopy_tensors`` (``clone_input``) makes them for dense tensors."""
    return tree_map_only(torch.Tensor, _clone, (args, kwargs))


def _clone(t: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        try:
            copy = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)
        except RuntimeError:  # overlapping strides (an expanded tensor): clone_input's own fallback
            copy = t.clone()
    if t.is_leaf:
        copy.requires_grad_(t.requires_grad)
    return copy


# -- test_schema -------------------------------------------------------------------------------


def _schema(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    from torch._subclasses.schema_check_mode import SchemaCheckMode

    args, kwargs = _copied(args, kwargs)
    with SchemaCheckMode():
        op(*args, **kwargs)
    return True


# -- test_autograd_registration -----------------------------------------------------------------


def _autograd_registration(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """optests/autograd_registration.py's autograd_registration_check, line for line."""
    args, kwargs = _copied(args, kwargs)
    leaves = tree_flatten((args, kwargs))[0]
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    if not any(t.requires_grad for t in tensors):
        return True  # opcheck's safe_autograd_registration_check does not test it
    devices = {t.device.type for t in tensors}
    key = "AutogradCUDA" if "cuda" in devices else "AutogradCPU" if "cpu" in devices else "AutogradXPU"
    name = op.name()
    if any(torch._C._dispatch_has_kernel_for_dispatch_key(name, k)
           for k in (key, "Autograd", "CompositeImplicitAutograd")):
        return True
    saved = torch._C._get_autograd_fallback_mode()
    torch._C._set_autograd_fallback_mode("nothing")
    try:
        outputs = op(*args, **kwargs)
    finally:
        torch._C._set_autograd_fallback_mode(saved)
    inputs = {id(leaf) for leaf in leaves}
    return not any(isinstance(out, torch.Tensor) and out.requires_grad and id(out) not in inputs
                   for out in tree_leaves(outputs))


# -- test_faketensor ----------------------------------------------------------------------------


def _fake(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    args, kwargs = _copied(args, kwargs)
    devices = {t.device for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
    if len(devices) != 1:
        return False
    with _MetaCrossRef(devices.pop()) as mode:
        op(*args, **kwargs)
    return mode.same


class _MetaCrossRef(TorchDispatchMode):
    """CrossRefFakeMode with meta tensors for fake ones: ``same`` turns False on the first
    difference between an operator's real outputs and those of its Meta (fake) kernel."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.same = True

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not (self.same and _compared(func)):
            return func(*args, **kwargs)
        storages: dict[int, torch.Tensor] = {}
        meta_in = tree_map_only(torch.Tensor, lambda t: _on_meta(t, storages), (args, kwargs))
        meta_out = _run_on_meta(func, meta_in)
        real_out = func(*args, **kwargs)
        self.same = _same_outputs(real_out, (args, kwargs), meta_out, meta_in, self.device)
        return real_out


def _run_on_meta(func: Any, meta_in: tuple[Any, Any]) -> Any:
    """The operator's fake kernel on the meta arguments, as its Meta kernel runs it, watched for
    tensors from outside (a fake mode refuses a real tensor constant); an operator with a Meta
    kernel of its own and no fake kernel runs that."""
    kernel = torch._library.simple_registry.singleton.find(func.name()).fake_impl.kernel
    if kernel is None:
        return func(*meta_in[0], **meta_in[1])
    from torch._library.fake_impl import set_ctx_getter

    with set_ctx_getter(_no_ctx), _Foreign(meta_in) as watch:
        out = kernel(*meta_in[0], **meta_in[1])
    if watch.foreign:
        raise _CannotTell(f"{func}'s fake kernel reads a tensor it was not given")
    return out


class _CannotTell(Exception):
    """The short way cannot judge: opcheck judges."""


def _no_ctx() -> Any:
    raise _CannotTell("the fake kernel asks torch.library.get_ctx(): a meta run cannot serve it")


class _Foreign(TorchDispatchMode):
    """Notes an operation given a tensor that is neither an argument of the kernel nor made
    while it runs (a fake mode would refuse it: a real tensor among fake ones)."""

    def __init__(self, given: Any) -> None:
        super().__init__()
        self.known = [t for t in tree_leaves(given) if isinstance(t, torch.Tensor)]  # held: ids stay theirs
        self.ids = {id(t) for t in self.known}
        self.foreign = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if any(isinstance(t, torch.Tensor) and id(t) not in self.ids for t in tree_leaves((args, kwargs))):
            self.foreign = True
        out = func(*args, **kwargs)
        made = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.known.extend(made)
        self.ids.update(id(t) for t in made)
        return out


def _compared(func: Any) -> bool:
    """Whether CrossRefFakeMode (as opcheck's fake_check makes it) compares this operator."""
    return (func.namespace not in _BUILTIN
            and torch._C._dispatch_has_computed_kernel_for_dispatch_key(func.name(), "Meta")
            and not any(getattr(torch.Tag, tag) in func.tags for tag in _UNCOMPARED_TAGS))


def _on_meta(t: torch.Tensor, storages: dict[int, torch.Tensor]) -> torch.Tensor:
    """``t`` on ``meta``: its size, strides, storage offset and requires_grad, and a storage shared
    with every other argument that shares ``t``'s (as a fake mode's from_tensor keeps them)."""
    storage = t.untyped_storage()
    key = storage._cdata  # the StorageImpl: one per storage, however many tensors view it
    if key not in storages:
        storages[key] = torch.empty(storage.nbytes(), dtype=torch.uint8, device="meta")
    base = storages[key]
    with torch.no_grad():
        meta = torch.empty(0, dtype=t.dtype, device="meta").set_(base.untyped_storage(), t.storage_offset(),
                                                                  t.size(), t.stride())
    meta.requires_grad_(t.requires_grad)
    return meta.conj() if t.is_conj() else meta


def _same_outputs(real: Any, real_in: Any, meta: Any, meta_in: Any, device: torch.device) -> bool:
    """CrossRefFakeMode's comparison: the number of outputs, which are tensors, the aliasing, and
    each tensor's metadata (a meta output standing for one on ``device``)."""
    from torch._subclasses.fake_utils import _check_alias_info

    real_leaves, meta_leaves = tree_leaves(real), tree_leaves(meta)
    if len(real_leaves) != len(meta_leaves):
        return False
    try:
        _check_alias_info("", real, real_in, meta, meta_in)
    except Exception:
        return False
    for r, m in zip(real_leaves, meta_leaves):
        if isinstance(r, torch.Tensor) != isinstance(m, torch.Tensor):
            return False
        if isinstance(r, torch.Tensor) and not _same_tensor(r, m, device):
            return False
    return True


_SAME: tuple[Callable[[torch.Tensor, torch.Tensor], bool], ...] = (
    lambda r, m: r.requires_grad == m.requires_grad,
    lambda r, m: tuple(r.shape) == tuple(m.shape) and r.dtype == m.dtype,
    lambda r, m: r.storage_offset() == m.storage_offset() and r.is_conj() == m.is_conj(),
    lambda r, m: r.numel() == 0 or all(r.stride(i) == m.stride(i) for i in range(r.ndim) if r.shape[i] > 1),
)


def _same_tensor(real: torch.Tensor, meta: torch.Tensor, device: torch.device) -> bool:
    """_check_fake_real_tensors(sizes, strides, storage_offset, requires_grad) with compare_tensor_meta,
    on plain sizes."""
    if type(real) is not torch.Tensor or real.layout != torch.strided:
        return False
    if (device if meta.is_meta else meta.device) != real.device:
        return False
    return all(same(real, meta) for same in _SAME)


_TESTS: dict[str, Callable[[Any, tuple[Any, ...], dict[str, Any]], bool]] = {
    "test_schema": _schema,
    "test_autograd_registration": _autograd_registration,
    "test_faketensor": _fake,
}

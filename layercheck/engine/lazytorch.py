"""Torch's guards against what a worker never does, kept from importing torch._dynamo and sympy.

Note [torch internals a check does not need]
    Three of torch's conveniences import ``torch._dynamo`` (1 s of CPU, half an ``import torch``
    more) or ``torch.fx.experimental.symbolic_shapes`` and sympy (0.3 s) the first time they run,
    though no check that runs by default compiles anything or has a symbolic size:

    - ``torch._disable_dynamo(fn)`` (the Python meta kernels' and references' elementwise wrapper,
      every TorchDispatchMode subclass's ``__torch_dispatch__``, the optimizers' ``step``) imports
      ``torch._dynamo`` on the first call, to keep ``fn`` from being compiled. Where
      ``torch._dynamo`` is not imported nothing can be compiling it: the wrapper calls ``fn`` as
      is then, and hands it to ``torch._dynamo.disable`` once something has imported
      ``torch._dynamo`` (the opt-in ``compile_matches_eager``, a layer that compiles).
    - ``torch._check(cond, ...)`` (meta kernels, references such as ``randn`` on ``meta``) imports
      symbolic_shapes to ask whether a possibly symbolic ``cond`` holds; a plain ``True`` holds.
    - ``torch.autograd.backward`` and ``grad`` given gradient tensors import symbolic_shapes to
      compare sizes that may be symbolic; plain sizes compare as tuples of ints.

    :func:`install` (the fork server's, once, before any worker is forked) makes each of them
    take the short way in exactly the cases where torch's own way ends the same without the
    import, and leaves every other case to torch. The imports then happen only where they are
    needed, as before. Where the checks run in the caller's process (the API, the pytest
    plugin, ``--no-isolate``), :func:`lent` takes the same short ways only while the runner
    builds the layer or runs a check (``runner.TargetRun``), and puts torch's own back after:
    the first target checked in a process no longer pays a second and a half for imports no
    check needs (benchmarks/goals.py), and the caller's own code meets torch as it was.

    torch's Python meta kernels (the meta_device check runs them for nearly every layer) ask
    symbolic_shapes about every size (``guard_or_false``, ``sym_eq``, ``is_nested_int``...), and
    their type promotion imports sympy to ask whether a value is a sympy expression. While
    symbolic_shapes is not imported, :class:`_PlainShapes` stands in for it: the answers for
    plain ints and bools are the module's own lines for them; a symbolic value or any other name
    imports the module. While sympy is not imported no value can be a sympy expression, and the
    type promotion is told so without importing it, under every name it has: the meta kernels
    imported it by name (``sigmoid``'s, which a hand-written ``autograd.Function`` on ``meta``
    runs, imported sympy through that name, half of the start-up a four-line Swish paid beyond
    the bundled SReLU's).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import gc
import importlib
import inspect
import operator
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

import torch
import torch._compile
import torch.autograd

_installed = False
_lent = 0  # how many lent() blocks are open (they nest: a check's prerequisites run inside it)
_lock = threading.Lock()
_put_back: list[Callable[[], None]] = []  # what the outermost lent() undoes when it closes


def install() -> None:
    """Take the short ways of Note [torch internals a check does not need] for good (idempotent):
    the fork server's, before any worker is forked."""
    global _installed
    if _installed:
        return
    _installed = True
    _apply()
    _put_back.clear()  # for good: nothing to put back


@contextlib.contextmanager
def lent() -> Iterator[None]:
    """The short ways of Note [torch internals a check does not need] for the duration of the
    block, and torch's own again after it: the checks that run in the caller's process (the
    API, the pytest plugin, ``--no-isolate``) take them without leaving torch changed for the
    caller's own code. Blocks nest, on one thread or several (the last one to close puts torch's
    own back); after :func:`install` this does nothing."""
    global _lent
    if _installed:
        yield
        return
    with _lock:
        _lent += 1
        if _lent == 1:
            try:
                _apply()
            except BaseException:
                _lent = 0
                while _put_back:
                    _put_back.pop()()
                raise
    try:
        yield
    finally:
        with _lock:
            _lent -= 1
            if _lent == 0:
                while _put_back:
                    _put_back.pop()()


_F = TypeVar("_F", bound=Callable[..., Any])


def lending(method: _F) -> _F:
    """``method`` run inside :func:`lent`."""

    @functools.wraps(method)
    def inside(*args: Any, **kwargs: Any) -> Any:
        with lent():
            return method(*args, **kwargs)

    return cast(_F, inside)


def _apply() -> None:
    # Each one only where this torch has what it was written for (torch 2.13's internals); else torch's way.
    if callable(getattr(torch._compile, "_disable_dynamo", None)):
        _defer_dynamo_disables()
    if callable(getattr(torch, "_check_with", None)):
        _replace(torch, "_check_with", _plain_check(torch._check_with))
    make_grads = getattr(torch.autograd, "_make_grads", None)
    if callable(make_grads) and list(inspect.signature(make_grads).parameters) == ["outputs", "grads",
                                                                                   "is_grads_batched"]:
        _replace(torch.autograd, "_make_grads", _plain_grads(make_grads))
    _defer_symbolic_shapes()


def _replace(owner: Any, name: str, value: Any) -> None:
    """``owner.name = value``, put back when the outermost lent() block closes."""
    saved = getattr(owner, name)
    setattr(owner, name, value)
    _put_back.append(lambda: setattr(owner, name, saved))


# -- torch._disable_dynamo ---------------------------------------------------------------------

_calls: list[tuple[Any, Any]] = []  # (fn, its call that needs no torch._dynamo) of torch's wrappers
_found = False


def _defer_dynamo_disables() -> None:
    """Every ``torch._disable_dynamo`` wrapper made so far, and every one made from now on,
    calls its function as is while torch._dynamo is not imported."""
    global _found
    original = torch._compile._disable_dynamo
    if not _found:  # once per process: the wrappers are the functions with the code of this torch's
        _found = True
        code = original(_defer_dynamo_disables).__code__
        _calls.extend(call for obj in gc.get_referrers(code) if type(obj) is types.FunctionType
                      if (call := _deferred_call(obj)) is not None)
    deferred = [fn for fn, call in _calls if _defer(fn, call)]

    @functools.wraps(original)
    def disable_dynamo(fn: Any = None, recursive: bool = True) -> Any:
        if fn is None:  # the decorator with arguments: @torch._disable_dynamo(recursive=False)
            return functools.partial(disable_dynamo, recursive=recursive)
        wrapper = original(fn, recursive)
        if (made := _deferred_call(wrapper)) is not None:
            _calls.append(made)
            if _defer(*made):
                deferred.append(made[0])
        return wrapper

    _replace(torch._compile, "_disable_dynamo", disable_dynamo)
    _replace(torch, "_disable_dynamo", disable_dynamo)
    _put_back.append(lambda: _undefer(deferred))


def _undefer(functions: list[Any]) -> None:
    """Take the deferred calls off again where torch._dynamo has not put its own in their place."""
    for fn in functions:
        if getattr(getattr(fn, "__dynamo_disable", None), "lazytorch_deferred", False):
            del fn.__dynamo_disable


def _defer(fn: Any, call: Any) -> bool:
    """Fill the cache a wrapper keeps on its function (``fn.__dynamo_disable``, read before it
    imports torch._dynamo) with ``call``, unless it holds one already; whether it did."""
    if getattr(fn, "__dynamo_disable", None) is not None:
        return False
    try:
        fn.__dynamo_disable = call
    except (AttributeError, TypeError):  # a function that takes no attributes: torch's way
        return False
    return True


def _deferred_call(wrapper: Any) -> tuple[Any, Any] | None:
    """The function of one of torch's ``_disable_dynamo`` wrappers, and a call of it that needs no
    torch._dynamo until torch._dynamo is imported (then it is what torch's wrapper makes); None
    for a function that is not such a wrapper."""
    cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__ or ()))
    if "fn" not in cells or "recursive" not in cells:  # not the wrapper this torch makes
        return None
    fn, recursive = cells["fn"].cell_contents, cells["recursive"].cell_contents

    def unless_compiling(*args: Any, **kwargs: Any) -> Any:
        disable = getattr(sys.modules.get("torch._dynamo"), "disable", None)
        if disable is None:
            return fn(*args, **kwargs)
        disabled = disable(fn, recursive, wrapping=False)  # what torch's wrapper does, from now on
        fn.__dynamo_disable = disabled
        return disabled(*args, **kwargs)

    unless_compiling.lazytorch_deferred = True  # type: ignore[attr-defined]
    return fn, unless_compiling


# -- torch._check ------------------------------------------------------------------------------


def _plain_check(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def check_with(error_type: type[Exception], cond: Any, message: Any) -> None:
        if cond is True:  # what torch's expect_true(cond) answers for a plain True
            return
        original(error_type, cond, message)

    return check_with


# -- torch.autograd's gradient tensors ---------------------------------------------------------


def _plain_grads(original: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
    @functools.wraps(original)
    def make_grads(outputs: Sequence[Any], grads: Sequence[Any], is_grads_batched: bool) -> tuple[Any, ...]:
        pairs = list(zip(outputs, grads))
        if is_grads_batched or not all(grad is None or _same_plain_size(out, grad) for out, grad in pairs):
            return original(outputs, grads, is_grads_batched)
        # torch hands a gradient tensor on as is where the sizes match; the rest (None: a
        # scalar output's ones, or nothing) is torch's, which imports nothing for them.
        implicit = iter(original([out for out, grad in pairs if grad is None],
                                 [None] * sum(grad is None for _, grad in pairs), is_grads_batched))
        return tuple(next(implicit) if grad is None else grad for _, grad in pairs)

    return make_grads


def _same_plain_size(out: Any, grad: Any) -> bool:
    """Whether torch's check of ``grad`` against ``out`` comes down to equal tuples of ints:
    dense tensors (no subclass, not nested), plain sizes, both complex or neither."""
    if type(out) is not torch.Tensor or type(grad) is not torch.Tensor or out.is_nested or grad.is_nested:
        return False
    size = out.shape
    return (all(type(s) is int for s in size) and size == grad.shape
            and out.dtype.is_complex == grad.dtype.is_complex)


# -- torch.fx.experimental.symbolic_shapes and sympy -------------------------------------------

_SYMBOLIC_SHAPES = "torch.fx.experimental.symbolic_shapes"
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


class _PlainShapes(types.ModuleType):
    """Stands in for torch.fx.experimental.symbolic_shapes until something needs more of it than
    the questions torch's meta kernels ask about plain sizes: those it answers as the module
    would (for plain ints and bools the module's functions come down to these lines), anything
    else (a symbolic size, another name) imports the module and is the module's."""

    def __init__(self) -> None:
        super().__init__(_SYMBOLIC_SHAPES, "the plain-size answers of torch.fx.experimental.symbolic_shapes")
        self._module: types.ModuleType | None = None
        # inspect.getmodule reads every module's __file__ (register_fake does, for the fake
        # kernel's source): the module's own, without importing it
        if (file := _symbolic_shapes_file()) is not None:
            self.__file__ = file

    def real(self) -> types.ModuleType:
        if self._module is None:
            if sys.modules.get(_SYMBOLIC_SHAPES) is self:
                del sys.modules[_SYMBOLIC_SHAPES]
            try:
                self._module = importlib.import_module(_SYMBOLIC_SHAPES)
            except BaseException:
                sys.modules.setdefault(_SYMBOLIC_SHAPES, self)
                raise
        return self._module

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__") and name not in ("__file__", "__all__"):
            raise AttributeError(name)  # __path__ among them: the module is no package
        return getattr(self.real(), name)

    def guard_or_false(self, a: Any) -> Any:
        return a if type(a) is bool else self.real().guard_or_false(a)

    def guard_or_true(self, a: Any) -> Any:
        return a if type(a) is bool else self.real().guard_or_true(a)

    def guard_size_oblivious(self, expr: Any) -> Any:
        return expr if type(expr) is bool else self.real().guard_size_oblivious(expr)

    def expect_true(self, a: Any, skip: int = 0) -> Any:
        return a if type(a) is bool else self.real().expect_true(a, skip + 1)

    def statically_known_true(self, x: Any) -> Any:  # torch._refs.pow asks it of its exponent
        return x if type(x) is bool else self.real().statically_known_true(x)

    def is_nested_int(self, s: Any) -> bool:
        return False if not isinstance(s, torch.SymInt) else bool(self.real().is_nested_int(s))

    def has_guarding_hint(self, a: Any) -> bool:
        return True if not isinstance(a, _SYMBOLIC) else bool(self.real().has_guarding_hint(a))

    def guarding_hint_or_throw(self, a: Any) -> Any:
        return a if type(a) in (int, bool) else self.real().guarding_hint_or_throw(a)

    def sym_eq(self, x: Any, y: Any) -> Any:
        return _plain_eq(x, y) if _plain_sizes(x) and _plain_sizes(y) else self.real().sym_eq(x, y)

    def sym_and(self, x: Any, *others: Any) -> Any:
        if type(x) is bool and all(type(y) is bool for y in others):
            return functools.reduce(operator.and_, others, x)
        return self.real().sym_and(x, *others)

    def sym_or(self, x: Any, *others: Any) -> Any:
        if type(x) is bool and all(type(y) is bool for y in others):
            return functools.reduce(operator.or_, others, x)
        return self.real().sym_or(x, *others)


@functools.cache
def _symbolic_shapes_file() -> str | None:
    """Where symbolic_shapes' source is, found without importing it."""
    import importlib.machinery

    import torch.fx.experimental as experimental

    spec = importlib.machinery.PathFinder.find_spec(_SYMBOLIC_SHAPES.rpartition(".")[2], list(experimental.__path__))
    return spec.origin if spec is not None else None


def _plain_sizes(x: Any) -> bool:
    return type(x) is int or (isinstance(x, (tuple, list)) and all(_plain_sizes(v) for v in x))


def _plain_eq(x: Any, y: Any) -> bool:
    """symbolic_shapes.sym_eq of plain ints and (nested) sequences of them."""
    if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
        return len(x) == len(y) and all(_plain_eq(a, b) for a, b in zip(x, y))
    if isinstance(x, (tuple, list)) or isinstance(y, (tuple, list)):
        raise AssertionError(f"unexpected sym_eq between {type(x)} {type(y)}")
    return bool(x == y)


def _defer_symbolic_shapes() -> None:
    """Put :class:`_PlainShapes` in symbolic_shapes' place while it is not imported, and let
    torch's elementwise type promotion ask whether a value is a sympy expression without
    importing sympy while it is not imported (then no value can be one)."""
    if _SYMBOLIC_SHAPES in sys.modules:
        return
    import torch._prims_common as prims_common
    import torch.fx.experimental as experimental

    promotion = getattr(prims_common, "elementwise_dtypes", None)
    if not isinstance(promotion, types.FunctionType) or "sympy" not in promotion.__code__.co_names:
        return  # not the function this was written for
    plain = _PlainShapes()
    sys.modules[_SYMBOLIC_SHAPES] = plain
    experimental.symbolic_shapes = plain
    without, owners = _promotion_owners(promotion, prims_common)
    for module in owners:
        _replace(module, "elementwise_dtypes", without)
    _put_back.append(lambda: _put_back_symbolic_shapes(plain, experimental))


_owners: tuple[int, Any, Any, list[types.ModuleType]] | None = None  # (modules seen, promotion, clone, owners)


def _promotion_owners(promotion: Any, prims_common: types.ModuleType) -> tuple[Any, list[types.ModuleType]]:
    """The type promotion without sympy, and the modules that hold ``promotion`` by name: its
    own, and those that imported it by name (the meta kernels'), looked for again only when
    more modules have been imported since."""
    global _owners
    if _owners is None or _owners[0] != len(sys.modules) or _owners[1] is not promotion:
        owners = [prims_common, *(m for name, m in list(sys.modules.items()) if name.startswith("torch.")
                                  and m is not prims_common
                                  and getattr(m, "__dict__", {}).get("elementwise_dtypes") is promotion)]
        clone = _owners[2] if _owners is not None and _owners[1] is promotion else _without_sympy(promotion,
                                                                                                   prims_common)
        _owners = (len(sys.modules), promotion, clone, owners)
    return _owners[2], _owners[3]


def _put_back_symbolic_shapes(plain: _PlainShapes, experimental: Any) -> None:
    """symbolic_shapes as torch has it: not imported yet, or the module itself where something
    imported it through the stand-in."""
    if sys.modules.get(_SYMBOLIC_SHAPES) is plain:
        del sys.modules[_SYMBOLIC_SHAPES]
    if getattr(experimental, "symbolic_shapes", None) is plain:
        if plain._module is not None:
            experimental.symbolic_shapes = plain._module
        else:
            del experimental.symbolic_shapes


class _NoSympy(types.ModuleType):
    Basic = type("Basic", (), {})  # no value is one: sympy is not imported


def _without_sympy(fn: Any, module: types.ModuleType) -> Any:
    """``fn`` (a function of ``module``), whose ``import sympy`` gives a module of no expressions
    while sympy is not imported."""
    no_sympy = _NoSympy("sympy")

    def importing(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if name == "sympy" and not fromlist and level == 0 and "sympy" not in sys.modules:
            return no_sympy
        return builtins.__import__(name, globals, locals, fromlist, level)

    own = {**builtins.__dict__, "__import__": importing}
    namespace = module.__dict__
    saved = namespace["__builtins__"]
    namespace["__builtins__"] = own  # a function takes its builtins from its globals when it is made
    try:
        clone = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    finally:
        namespace["__builtins__"] = saved
    clone.__kwdefaults__ = fn.__kwdefaults__
    return functools.update_wrapper(clone, fn)

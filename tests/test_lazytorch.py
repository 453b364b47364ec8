"""A worker checks a layer without importing torch._dynamo or sympy, and gets torch's answers.

Note [torch internals a check does not need] (layercheck/engine/lazytorch.py): the fork server takes
torch's short ways where they end as torch's own would; anything symbolic is torch's.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest
import torch

from layercheck.engine import lazytorch

from conftest import ROOT

# What the default checks do to a small layer: its meta kernels (torch.where: Python ones),
# backward with gradient tensors, a dispatch mode. (An optimizer's step imports torch._dynamo
# itself: the train_step check steps by hand.)
WORK = textwrap.dedent("""
    import sys
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    {install}
    sys.path.insert(0, {layers!r})
    from srelu import SReLU

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {{}}))

    torch.manual_seed(0)
    layer = SReLU(16)
    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(8, 16)
    with Seen() as seen:
        y = layer(x)
    torch.autograd.backward([y], [w])
    grads = torch.autograd.grad([layer(x)], [x], [w])
    meta = SReLU(16).to("meta")
    xm = torch.randn(8, 16, device="meta", requires_grad=True)
    ym = meta(xm)
    ym.backward(torch.ones_like(ym))
    print(len(seen.ops) > 0, x.grad.sum().item(), grads[0].sum().item(), layer.tl.sum().item(),
          tuple(ym.shape), tuple(xm.grad.shape), xm.grad.device)
    print("imported:", "torch._dynamo" in sys.modules, "sympy" in sys.modules)
""")


def _work(install: bool) -> list[str]:
    code = WORK.format(install="from layercheck import lazytorch; lazytorch.install()" if install else "",
                       layers=str(ROOT / "layers"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_layer_is_checked_without_torch_dynamo_or_sympy_and_with_torch_s_results() -> None:
    results, imported = _work(install=True)
    torch_results, torch_imported = _work(install=False)
    assert results == torch_results
    assert imported == "imported: False False"
    assert torch_imported == "imported: True True"  # what lazytorch is for: torch's own way imports both


def test_a_deferred_dynamo_guard_is_torch_s_once_torch_dynamo_is_imported() -> None:
    def fn(a: int) -> int:
        return a + 1

    wrapper = torch._compile._disable_dynamo(fn)  # as torch's own wrappers were made
    lazytorch._defer(*lazytorch._deferred_call(wrapper))
    assert wrapper(1) == 2
    importlib.import_module("torch._dynamo")
    assert wrapper(2) == 3
    assert getattr(fn, "__dynamo_disable").__qualname__.startswith("DisableContext")


@pytest.mark.parametrize(("name", "args"), [
    ("guard_or_false", (True,)), ("guard_or_false", (False,)), ("guard_or_true", (False,)),
    ("guard_size_oblivious", (True,)), ("expect_true", (True,)), ("is_nested_int", (3,)),
    ("statically_known_true", (True,)), ("statically_known_true", (False,)),
    ("has_guarding_hint", (3,)), ("guarding_hint_or_throw", (7,)), ("guarding_hint_or_throw", (True,)),
    ("sym_eq", ((1, 2), [1, 2])), ("sym_eq", ((1, 2), (1, 3))), ("sym_eq", ((1, 2), (1,))), ("sym_eq", (4, 4)),
    ("sym_eq", ([(1, 2), 3], ((1, 2), 3))), ("sym_eq", ((), [])),
    ("sym_and", (True, True, False)), ("sym_and", (True,)), ("sym_or", (False, False, True)), ("sym_or", (False,)),
])
def test_the_plain_size_answers_are_symbolic_shapes_own(name: str, args: tuple) -> None:
    from torch.fx.experimental import symbolic_shapes

    plain = lazytorch._PlainShapes()
    mine = getattr(plain, name)(*args)
    theirs = getattr(symbolic_shapes, name)(*args)
    assert (mine, type(mine)) == (theirs, type(theirs))


def test_what_is_not_plain_is_symbolic_shapes_own() -> None:
    from torch.fx.experimental import symbolic_shapes

    plain = lazytorch._PlainShapes()
    assert plain.ShapeEnv is symbolic_shapes.ShapeEnv
    with pytest.raises(AssertionError, match="unexpected sym_eq"):
        plain.sym_eq((1, 2.0), (1, 2.0))
    with pytest.raises(AssertionError, match="unexpected sym_eq"):
        symbolic_shapes.sym_eq((1, 2.0), (1, 2.0))
    assert not hasattr(plain, "__path__")  # `from ... import name` must not take it for a package


# The checks in the caller's process (the API, the pytest plugin, --no-isolate) take the short
# ways only while a check runs: torch is torch's own again when check_layer returns.
IN_PROCESS = textwrap.dedent("""
    import sys
    import torch
    {first}
    import layercheck
    from torch import nn
    import torch._prims_common as prims_common
    import torch._meta_registrations as meta

    class _Swish(torch.autograd.Function):  # sigmoid's meta kernel promotes types: sympy
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * torch.sigmoid(x)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            s = torch.sigmoid(x)
            return grad * (s + x * s * (1 - s))

    class Swish(nn.Module):
        def forward(self, x):
            return _Swish.apply(x)

    owned = [(torch, "_check_with"), (torch.autograd, "_make_grads"), (torch, "_disable_dynamo"),
             (torch._compile, "_disable_dynamo"), (prims_common, "elementwise_dtypes"), (meta, "elementwise_dtypes")]
    before = [getattr(owner, name) for owner, name in owned]
    shapes = sys.modules.get("torch.fx.experimental.symbolic_shapes")
    report = layercheck.check_layer(Swish, "8,16:BC")
    print(sorted((r.check, r.variant, r.status.value) for r in report.runs[0].results))
    print("put back:", [getattr(owner, name) for owner, name in owned] == before,
          sys.modules.get("torch.fx.experimental.symbolic_shapes") is shapes)
    print("imported:", "torch._dynamo" in sys.modules, "sympy" in sys.modules)
""")


def _in_process(first: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", IN_PROCESS.format(first=first)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_check_layer_takes_the_short_ways_only_while_it_runs_and_judges_as_torch_s_own_way() -> None:
    results, put_back, imported = _in_process(first="")
    torch_results, torch_put_back, torch_imported = _in_process(first="import torch._dynamo")  # torch's own ways
    assert results == torch_results
    assert "('meta_device', '', 'passed')" in results
    assert put_back == torch_put_back == "put back: True True"
    assert imported == "imported: False False"
    assert torch_imported == "imported: True True"


# lent() does nothing in a process where install() ran (a test that imported layercheck.engine.serve,
# in the same xdist worker): each of these runs in a fresh process.
LENT = textwrap.dedent("""
    import sys
    import threading
    import torch
    from layercheck.engine import lazytorch


    def nest():
        owned = [(torch, "_check_with"), (torch.autograd, "_make_grads"), (torch, "_disable_dynamo")]
        before = [getattr(owner, name) for owner, name in owned]
        with lazytorch.lent():
            inside = [getattr(owner, name) for owner, name in owned]
            assert all(a is not b for a, b in zip(inside, before))
            with lazytorch.lent():
                assert [getattr(owner, name) for owner, name in owned] == inside
            assert [getattr(owner, name) for owner, name in owned] == inside  # the inner block leaves them
        assert [getattr(owner, name) for owner, name in owned] == before


    def guard():
        def fn(a):
            return a + 1

        wrapper = torch._compile._disable_dynamo(fn)
        with lazytorch.lent():
            made = torch._compile._disable_dynamo(fn)  # made inside the block: deferred too
            assert made(1) == 2
            assert getattr(fn, "__dynamo_disable").lazytorch_deferred
        assert getattr(fn, "__dynamo_disable", None) is None  # as torch made it: not called yet
        assert "torch._dynamo" not in sys.modules
        assert wrapper(1) == 2  # torch's own way now: it imports torch._dynamo
        assert "torch._dynamo" in sys.modules


    def threads():
        own = torch._check_with
        opened, closing = threading.Event(), threading.Event()

        def other():
            with lazytorch.lent():
                opened.set()
                closing.wait(60)

        thread = threading.Thread(target=other)
        with lazytorch.lent():
            thread.start()
            assert opened.wait(60)
        assert torch._check_with is not own  # the other thread's block is still open
        closing.set()
        thread.join(60)
        assert torch._check_with is own
        with lazytorch.lent():  # and a later block takes the short ways again
            assert torch._check_with is not own
        assert torch._check_with is own


    {name}()
    print("ok")
""")


@pytest.mark.parametrize("name", ["nest", "guard", "threads"])
def test_lent_blocks_nest_take_the_short_ways_and_the_last_to_close_puts_torch_back(name: str) -> None:
    """nest: blocks nest and put back what they replaced; guard: a deferred guard is as torch
    made it after the block; threads: the last block to close puts torch back, whichever thread
    opened the first."""
    done = subprocess.run([sys.executable, "-c", LENT.format(name=name)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"]


def test_inspect_getmodule_finds_modules_without_importing_symbolic_shapes() -> None:
    """register_fake looks up the fake kernel's source with inspect.getmodule, which reads every
    module's __file__: the stand-in has the module's own, and nothing is imported for it."""
    code = textwrap.dedent("""
        import inspect, sys
        from layercheck.engine import lazytorch
        lazytorch.install()
        from torch.fx.experimental import symbolic_shapes  # the stand-in
        import torch.library
        # a code object of a file no module has: every module's __file__ is read
        print(inspect.getmodule(compile("x = 1", "a_file_of_no_module.py", "exec")))
        print(symbolic_shapes.__file__.endswith("torch/fx/experimental/symbolic_shapes.py"))
        print(type(symbolic_shapes).__name__, "sympy" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["None", "True", "_PlainShapes False"]

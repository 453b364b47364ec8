"""Custom operators, right and wrong in each way opcheck's default tests judge, with the tests
opcheck passes on each: tests/test_optests.py holds the short ways of
layercheck/support/optests.py to opcheck's verdicts on them."""

from collections.abc import Callable
from typing import Any

import torch

NS = "layercheck_optests"
_lib = torch.library.Library(NS, "FRAGMENT")

W = torch.linspace(-1, 1, 8, requires_grad=True)  # a parameter a kernel reads: its output requires grad
C = torch.tensor(2.0)  # a real tensor constant: a fake mode refuses it in a fake kernel

Arguments = Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]


def _custom(name: str, fn: Callable[..., Any], fake: Callable[..., Any] | None = None,
            backward: Callable[..., Any] | None = None, mutates: tuple[str, ...] = ()) -> Any:
    op = torch.library.custom_op(f"{NS}::{name}", mutates_args=mutates)(fn)
    if fake is not None:
        op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs))
    return op._opoverload


def _defined(name: str, schema: str, cpu: Callable[..., Any], fake: Callable[..., Any] | None = None,
             meta: Callable[..., Any] | None = None) -> Any:
    """An operator defined through torch.library with a CPU kernel (no autograd kernel)."""
    _lib.define(f"{name}{schema}")
    _lib.impl(name, cpu, "CPU")
    if fake is not None:
        torch.library.register_fake(f"{NS}::{name}", fake, lib=_lib)
    if meta is not None:
        _lib.impl(name, meta, "Meta")
    return getattr(getattr(torch.ops, NS), name).default


def tanh_w(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * w


def _tanh_w_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, w = ctx.saved_tensors
    t = torch.tanh(x)
    return grad * (1 - t * t) * w, (grad * t).sum_to_size(w.shape)


def col_major(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x).t().contiguous().t()


def split2(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.sin(x), torch.cos(x).sum(0)


def mixed(xs: list[torch.Tensor], scale: float, n: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    out = xs[0] * scale * n + xs[1]
    return out if bias is None else out + bias


def positives(x: torch.Tensor) -> torch.Tensor:
    return x[x > 0].clone()


def _positives_fake(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(torch.library.get_ctx().new_dynamic_size())


def shifted_exp(x: torch.Tensor) -> torch.Tensor:
    return x.sub_(1.0).exp()  # writes into x, declared nowhere


def add_(x: torch.Tensor, y: torch.Tensor) -> None:
    x.add_(y)


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _x(*sizes: int) -> Arguments:
    return lambda: (tuple(torch.randn(*size, requires_grad=True) for size in sizes), {})


X1, X38 = _x((3, 8)), _x((3, 8), (8,))
ALL = {"test_schema", "test_faketensor", "test_autograd_registration"}

CASES: dict[str, tuple[Any, Arguments, set[str]]] = {
    # name: (operator, its arguments, the tests opcheck passes on it: it fails the others)
    "good": (_custom("tanh_w", tanh_w, lambda x, w: torch.empty_like(x * w), _tanh_w_backward), X38, ALL),
    "fake_wrong_size": (_custom("wrong_size", tanh_w, lambda x, w: x.new_empty((*x.shape[:-1], 1)),
                                _tanh_w_backward), X38, ALL - {"test_faketensor"}),
    "fake_wrong_dtype": (_custom("wrong_dtype", tanh_w, lambda x, w: torch.empty_like(x, dtype=torch.float64),
                                 _tanh_w_backward), X38, ALL - {"test_faketensor"}),
    "fake_wrong_strides": (_custom("col_major", col_major, torch.empty_like), X1, ALL - {"test_faketensor"}),
    "fake_right_strides": (_custom("col_major_ok", col_major, lambda x: x.new_empty(x.shape[::-1]).t()), X1, ALL),
    "fake_aliases": (_defined("fake_alias", "(Tensor x) -> Tensor", torch.clone, fake=lambda x: x), X1,
                     {"test_schema"}),
    "tuple_out": (_custom("split2", split2, lambda x: (torch.empty_like(x), x.new_empty(x.shape[1:]))), X1, ALL),
    "tuple_out_wrong": (_custom("split2_wrong", split2, lambda x: (torch.empty_like(x), x.new_empty(x.shape))), X1,
                        ALL - {"test_faketensor"}),
    "mixed_args": (_custom("mixed", mixed, lambda xs, scale, n, bias=None: torch.empty_like(xs[0])),
                   lambda: (([torch.randn(3, 8), torch.randn(3, 8)], 0.5, 2), {"bias": torch.randn(8)}), ALL),
    "data_dependent": (_custom("positives", positives, _positives_fake), X1, ALL),
    "undeclared_mutation": (_custom("shifted_exp", shifted_exp, torch.empty_like), X1, ALL - {"test_schema"}),
    "declared_mutation": (_custom("add_", add_, lambda x, y: None, mutates=("x",)),
                          lambda: ((torch.randn(3, 8), torch.randn(3, 8)), {}), ALL),
    "returns_input": (_defined("same", "(Tensor x) -> Tensor", lambda x: x, fake=lambda x: x), X1,
                      ALL - {"test_schema"}),
    "no_fake_kernel": (_custom("no_fake", double), X1, ALL - {"test_faketensor"}),
    "cpu_kernel_only": (_defined("cpu_only", "(Tensor x) -> Tensor", double), X1, {"test_schema"}),
    "meta_kernel": (_defined("with_meta", "(Tensor x) -> Tensor", double, meta=torch.empty_like), X1,
                    ALL - {"test_autograd_registration"}),
    "kernel_requires_grad": (_defined("grad_kernel", "(Tensor x) -> Tensor", lambda x: x * W,
                                      fake=torch.empty_like), X1, ALL - {"test_autograd_registration"}),
    "arguments_share_storage": (_custom("tanh_w_shared", tanh_w, lambda x, w: torch.empty_like(x * w),
                                                      _tanh_w_backward),
                                lambda: ((x := torch.randn(3, 8), x[1]), {}), ALL),
    "declared_view": (_defined("flat", "(Tensor(a) x) -> Tensor(a)", lambda x: x.view(-1),
                               fake=lambda x: x.view(-1)), X1, ALL - {"test_autograd_registration"}),
    "fake_forgets_the_view": (_defined("flat_wrong", "(Tensor(a) x) -> Tensor(a)", lambda x: x.view(-1),
                                       fake=lambda x: x.new_empty(x.numel())), X1, {"test_schema"}),
    "fake_reads_a_constant": (_custom("reads_constant", double, lambda x: torch.empty_like(x) + C), X1,
                              ALL - {"test_faketensor"}),
}

# The short way's known miss (Note [opcheck without its imports]): a fake kernel that branches on
# its inputs' device sees "meta" there and "cpu" under opcheck's fake mode.
DEVICE_BRANCH = (_custom("device_branch", double, lambda x: x.new_empty(x.shape[:1]) if x.device.type == "cpu"
                         else torch.empty_like(x)), X1)

"""The bundled reference layers (layers/): values and hand-written gradients against autograd."""

from __future__ import annotations

import importlib.util
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ROOT / "layers"
SPECS = ROOT / "specs"


@dataclass(frozen=True)
class FakeLayout:
    """Stand-in for layercheck.Layout: only what initialize may use."""

    size: tuple[int, ...]
    format: str

    @classmethod
    def parse(cls, text: str) -> FakeLayout:
        sizes, labels = text.split(":")
        return cls(tuple(int(s) for s in sizes.split(",")), labels)

    def finddim(self, label: str) -> tuple[int, ...]:
        return tuple(i for i, lab in enumerate(self.format) if lab == label)

    def __str__(self) -> str:
        return f"{','.join(map(str, self.size))}:{self.format}"


def load(name: str) -> ModuleType:
    """Load layers/<name>.py by path under a random module name, as a checker would."""
    spec = importlib.util.spec_from_file_location(f"ref_{name}_{uuid.uuid4().hex}", LAYERS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


prelu_mod = load("prelu")
srelu_mod = load("srelu")
function_mod = load("srelu_function")
SReLUFunction = function_mod.SReLUFunction

LAYOUTS = {"SSCB": ("4,5,3,2:SSCB", 2), "BCSS": ("2,3,4,4:BCSS", 1)}


# --- plain reference formulas, differentiated by autograd ---------------------------------


def prelu_ref(x: Tensor, slope: Tensor) -> Tensor:
    return torch.where(x > 0, x, slope * x)


def srelu_ref(x: Tensor, tl: Tensor, al: Tensor, tr: Tensor, ar: Tensor) -> Tensor:
    return torch.where(x >= tr, tr + ar * (x - tr), torch.where(x <= tl, tl + al * (x - tl), x))


def view_c(p: Tensor, ndim: int, dim: int) -> Tensor:
    shape = [1] * ndim
    shape[dim] = -1
    return p.view(shape)


def away_from(x: Tensor, kinks: list[Tensor], gap: float = 1e-2) -> Tensor:
    """Move elements of ``x`` that lie within ``gap`` of a kink by 5 * gap (kinks are far apart)."""
    for k in kinks:
        x = torch.where((x - k).abs() < gap, x + 5 * gap, x)
    return x


# --- builders --------------------------------------------------------------------------------


def make_prelu(layout: str, dtype: torch.dtype = torch.float64) -> nn.Module:
    layer = prelu_mod.PReLU()
    layer.initialize(FakeLayout.parse(layout))
    with torch.no_grad():  # distinct slopes per channel, so a wrong channel dim shows
        layer.slope.copy_(torch.linspace(-0.5, 0.7, layer.slope.numel()))
    return layer.to(dtype)


def make_srelu(layout: str, dtype: torch.dtype = torch.float64) -> nn.Module:
    layer = srelu_mod.SReLU()
    layer.initialize(FakeLayout.parse(layout))
    n = layer.tl.numel()
    with torch.no_grad():
        layer.tl.copy_(torch.linspace(-1.2, -0.6, n))
        layer.al.copy_(torch.linspace(0.05, 0.3, n))
        layer.tr.copy_(torch.linspace(0.5, 1.1, n))
        layer.ar.copy_(torch.linspace(0.4, 1.5, n))
    return layer.to(dtype)


def params_of(layer: nn.Module, dim: int, ndim: int) -> list[Tensor]:
    if isinstance(layer, prelu_mod.PReLU):
        return [view_c(layer.slope, ndim, dim)]
    return [view_c(getattr(layer, n), ndim, dim) for n in ("tl", "al", "tr", "ar")]


def ref_of(layer: nn.Module):
    return prelu_ref if isinstance(layer, prelu_mod.PReLU) else srelu_ref


def kinks_of(layer: nn.Module, x: Tensor, dim: int) -> list[Tensor]:
    if isinstance(layer, prelu_mod.PReLU):
        return [torch.zeros((), dtype=x.dtype)]
    return [view_c(layer.tl.detach(), x.ndim, dim), view_c(layer.tr.detach(), x.ndim, dim)]


MAKERS = {"PReLU": make_prelu, "SReLU": make_srelu}


# --- modules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fmt", LAYOUTS)
@pytest.mark.parametrize("kind", MAKERS)
def test_module_matches_autograd_reference(kind: str, fmt: str, dtype: torch.dtype) -> None:
    layout, cdim = LAYOUTS[fmt]
    layer = MAKERS[kind](layout, dtype)
    assert layer.channel_dim == cdim
    torch.manual_seed(0)
    x = (2 * torch.randn(FakeLayout.parse(layout).size, dtype=dtype)).requires_grad_()
    g = torch.randn_like(x)

    y = layer(x)
    params = list(layer.parameters())
    grads = torch.autograd.grad(y, [x, *params], g)

    x_ref = x.detach().clone().requires_grad_()
    p_ref = [p.detach().clone().requires_grad_() for p in params]
    y_ref = ref_of(layer)(x_ref, *(view_c(p, x.ndim, cdim) for p in p_ref))
    grads_ref = torch.autograd.grad(y_ref, [x_ref, *p_ref], g)

    torch.testing.assert_close(y, y_ref)
    for got, want in zip(grads, grads_ref):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("fmt", LAYOUTS)
@pytest.mark.parametrize("kind", MAKERS)
def test_module_gradcheck(kind: str, fmt: str) -> None:
    layout, cdim = LAYOUTS[fmt]
    layer = MAKERS[kind](layout)
    torch.manual_seed(1)
    x = torch.randn(FakeLayout.parse(layout).size, dtype=torch.float64)
    x = away_from(x, kinks_of(layer, x, cdim)).requires_grad_()
    names = [n for n, _ in layer.named_parameters()]

    def f(x: Tensor, *params: Tensor) -> Tensor:
        return torch.func.functional_call(layer, dict(zip(names, params)), (x,))

    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())
    assert torch.autograd.gradcheck(f, (x, *params))
    assert torch.autograd.gradgradcheck(f, (x, *params))


@pytest.mark.parametrize("kind", MAKERS)
def test_module_frozen_parameters_and_input_without_grad(kind: str) -> None:
    layout, cdim = LAYOUTS["SSCB"]
    layer = MAKERS[kind](layout)
    torch.manual_seed(2)
    x = torch.randn(FakeLayout.parse(layout).size, dtype=torch.float64)
    g = torch.randn_like(x)
    params = list(layer.parameters())
    p_ref = [p.detach().clone().requires_grad_() for p in params]
    x_ref = x.clone().requires_grad_()
    y_ref = ref_of(layer)(x_ref, *(view_c(p, x.ndim, cdim) for p in p_ref))
    want = torch.autograd.grad(y_ref, [x_ref, *p_ref], g)

    # only x requires grad
    for p in params:
        p.requires_grad_(False)
    xg = x.clone().requires_grad_()
    layer(xg).backward(g)
    torch.testing.assert_close(xg.grad, want[0])
    assert all(p.grad is None for p in params)

    # only one parameter requires grad, the input does not
    for i, p in enumerate(params):
        p.requires_grad_(True)
        (got,) = torch.autograd.grad(layer(x), [p], g)
        torch.testing.assert_close(got, want[1 + i])
        p.requires_grad_(False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", MAKERS)
def test_module_keeps_dtype(kind: str, dtype: torch.dtype) -> None:
    layout, _ = LAYOUTS["BCSS"]
    layer = MAKERS[kind](layout, dtype)
    x = torch.randn(FakeLayout.parse(layout).size, dtype=dtype, requires_grad=True)
    y = layer(x)
    y.sum().backward()
    assert y.dtype == dtype and x.grad.dtype == dtype
    assert all(p.grad.dtype == dtype for p in layer.parameters())


@pytest.mark.parametrize("kind", MAKERS)
def test_module_runs_on_meta_device(kind: str) -> None:
    layout, _ = LAYOUTS["SSCB"]
    layer = MAKERS[kind](layout).to("meta")
    x = torch.empty(FakeLayout.parse(layout).size, dtype=torch.float64, device="meta", requires_grad=True)
    y = layer(x)
    y.sum().backward()
    assert y.device.type == "meta" and x.grad.shape == x.shape


@pytest.mark.parametrize("kind", MAKERS)
def test_module_noncontiguous_input(kind: str) -> None:
    layout, _ = LAYOUTS["BCSS"]
    layer = MAKERS[kind](layout)
    x = torch.randn(2, 4, 4, 3, dtype=torch.float64).permute(0, 3, 1, 2)  # channels-last view
    assert not x.is_contiguous()
    torch.testing.assert_close(layer(x), layer(x.contiguous()))


def test_prelu_initialize_sizes_and_keeps_existing_slope() -> None:
    layer = prelu_mod.PReLU()
    layer.initialize(FakeLayout.parse("24,24,20,128:SSCB"))
    assert layer.slope.shape == (20,) and layer.channel_dim == 2
    with torch.no_grad():
        layer.slope.fill_(0.7)
    before = layer.slope
    layer.initialize(FakeLayout.parse("24,24,20,128:SSCB"))
    assert layer.slope is before and torch.all(layer.slope == 0.7)

    given = prelu_mod.PReLU(20, init=0.1)
    assert given.channel_dim == 1  # NCHW without a layout
    given.initialize(FakeLayout.parse("24,24,20,128:SSCB"))
    assert given.channel_dim == 2 and torch.all(given.slope == 0.1)
    assert given(torch.randn(24, 24, 20, 3)).shape == (24, 24, 20, 3)

    shared = prelu_mod.PReLU()
    shared.initialize(FakeLayout.parse("5,7:UB"))
    assert shared.slope.shape == (1,) and shared.channel_dim is None
    x = torch.randn(5, 7, dtype=torch.float64)
    torch.testing.assert_close(shared.double()(x), prelu_ref(x, torch.tensor(0.25, dtype=torch.float64)))

    with pytest.raises(ValueError, match="channels"):
        prelu_mod.PReLU(3).initialize(FakeLayout.parse("24,24,20,128:SSCB"))


def test_srelu_initialize_sizes_and_keeps_existing_parameters() -> None:
    layer = srelu_mod.SReLU()
    assert list(layer.parameters()) == []
    layer.initialize(FakeLayout.parse("128,20,24,24:BCSS"))
    assert layer.channel_dim == 1
    assert [n for n, _ in layer.named_parameters()] == ["tl", "al", "tr", "ar"]
    assert all(p.shape == (20,) for p in layer.parameters())
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.125)
    before = {n: (p, p.detach().clone()) for n, p in layer.named_parameters()}
    layer.initialize(FakeLayout.parse("128,20,24,24:BCSS"))
    for n, p in layer.named_parameters():
        assert p is before[n][0] and torch.equal(p, before[n][1])

    # the default parameters reach every branch on standard-normal data, and ar != 1
    fresh = srelu_mod.SReLU(num_channels=3)
    assert fresh.channel_dim == 1
    assert torch.all(fresh.tl == -1.0) and torch.all(fresh.tr == 1.0) and torch.all(fresh.ar != 1.0)


def test_srelu_module_uses_the_shared_function() -> None:
    layer = make_srelu("4,5,3,2:SSCB")
    y = layer(torch.randn(4, 5, 3, 2, dtype=torch.float64, requires_grad=True))
    assert type(y.grad_fn).__name__ == "SReLUFunctionBackward"


def test_layers_load_by_path_under_random_names_and_as_package(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load("srelu")  # neither a relative nor a plain import can work here
    assert mod.SReLU()._get_name() == "SReLU"
    assert mod.__all__ == ["SReLU"]
    monkeypatch.syspath_prepend(str(ROOT))
    pkg = importlib.import_module("layers.srelu")
    assert pkg.SReLU(2)(torch.zeros(1, 2, 3)).shape == (1, 2, 3)


def test_layers_do_not_import_layercheck() -> None:
    for path in LAYERS.glob("*.py"):
        assert "import layercheck" not in path.read_text() and "from layercheck" not in path.read_text()


# --- the custom operation ---------------------------------------------------------------------


def function_inputs(dtype: torch.dtype = torch.float64, seed: int = 3) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tl = -0.5 - torch.rand(1, 1, 3, 1, generator=gen, dtype=dtype)
    al = 0.5 * torch.rand(1, 1, 3, 1, generator=gen, dtype=dtype)
    tr = 0.5 + torch.rand(1, 1, 3, 1, generator=gen, dtype=dtype)
    ar = 0.2 + torch.rand(1, 1, 3, 1, generator=gen, dtype=dtype)
    x = away_from(1.5 * torch.randn(4, 5, 3, 2, generator=gen, dtype=dtype), [tl, tr])
    return [t.requires_grad_() for t in (x, tl, al, tr, ar)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_function_matches_autograd_reference(dtype: torch.dtype) -> None:
    inputs = function_inputs(dtype)
    g = torch.randn_like(inputs[0])
    y = SReLUFunction.apply(*inputs)
    grads = torch.autograd.grad(y, inputs, g)
    ref = [t.detach().clone().requires_grad_() for t in inputs]
    y_ref = srelu_ref(*ref)
    grads_ref = torch.autograd.grad(y_ref, ref, g)
    torch.testing.assert_close(y, y_ref)
    for got, want, t in zip(grads, grads_ref, inputs):
        assert got.shape == t.shape
        torch.testing.assert_close(got, want)


def test_function_gradcheck() -> None:
    inputs = tuple(function_inputs())
    assert torch.autograd.gradcheck(SReLUFunction.apply, inputs)
    assert torch.autograd.gradgradcheck(SReLUFunction.apply, inputs)


@pytest.mark.parametrize("which", range(5))
def test_function_honours_needs_input_grad(which: int) -> None:
    inputs = function_inputs()
    g = torch.randn_like(inputs[0])
    want = torch.autograd.grad(srelu_ref(*inputs), inputs, g)[which]

    only = [t.detach().requires_grad_(i == which) for i, t in enumerate(inputs)]
    (got,) = torch.autograd.grad(SReLUFunction.apply(*only), [only[which]], g)
    torch.testing.assert_close(got, want)

    # backward itself returns None for every input that needs no gradient
    ctx = SimpleNamespace(
        saved_tensors=tuple(t.detach() for t in inputs),
        needs_input_grad=tuple(i == which for i in range(5)),
    )
    out = SReLUFunction.backward(ctx, g)
    assert len(out) == 5
    assert [o is not None for o in out] == [i == which for i in range(5)]
    torch.testing.assert_close(out[which], want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_function_keeps_dtype(dtype: torch.dtype) -> None:
    inputs = function_inputs(dtype)
    y = SReLUFunction.apply(*inputs)
    grads = torch.autograd.grad(y.sum(), inputs)
    assert y.dtype == dtype and all(gr.dtype == dtype for gr in grads)


def test_function_on_meta_device() -> None:
    inputs = [t.detach().to("meta").requires_grad_() for t in function_inputs()]
    grads = torch.autograd.grad(SReLUFunction.apply(*inputs).sum(), inputs)
    assert [gr.shape for gr in grads] == [t.shape for t in inputs]


# --- specs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "n_inputs"), [("prelu", 1), ("srelu", 1), ("srelu_function", 5)]
)
def test_spec_names_an_existing_layer(name: str, n_inputs: int) -> None:
    yaml = pytest.importorskip("yaml")
    spec = yaml.safe_load((SPECS / f"{name}.yaml").read_text())
    assert set(spec) <= {"layer", "args", "kwargs", "inputs", "checks", "seed", "tolerance"}
    file, _, cls = spec["layer"].partition(":")
    path = (SPECS / file).resolve()
    assert path == LAYERS / f"{name}.py"
    assert hasattr(load(name), cls)
    assert len(spec["inputs"]) == n_inputs
    assert spec["inputs"][0]["layout"] == "24,24,20,128:SSCB"

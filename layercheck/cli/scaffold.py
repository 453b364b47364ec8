"""``layercheck init NAME``: a commented layer template and its spec, in the spirit of
MATLAB's custom layer template. The template passes every default check as written."""

from __future__ import annotations

import keyword
import string
import sys
from pathlib import Path

from layercheck.parent.errors import UsageError
from layercheck.parent.layout import Layout

DEFAULT_LAYOUT = "4,3,8,8:BCSS"
"""PyTorch's NCHW, small: the spec's input unless ``--layout`` says otherwise."""

# Names the template imports or defines at module level; a class named so would shadow them.
_TEMPLATE_NAMES = {"annotations", "Any", "torch", "Tensor", "nn"}

LAYER_TEMPLATE = string.Template('''\
"""$class_name: a custom PyTorch layer, written from layercheck's layer template.

The PyTorch counterpart of MATLAB's custom layer template. As written it is a working
layer, so that every part can be checked: a Swish activation with one learnable slope per
channel, y = x * sigmoid(beta * x), with a hand-written backward, and a running mean of
its output per channel as state. Replace the computation with yours; keep the parts you
need and delete the optional ones you don't (each says what it is for). Then run

    layercheck run $spec_name

after every change: it checks shapes, predict/forward agreement, gradients against finite
differences, dtypes, devices, state, batching and more. The file needs only torch.

Three rules every part below follows, because layercheck checks them:
  * create no tensor inside forward/predict/backward with torch.tensor(...) or a bare
    torch.zeros(...): it lands on the CPU in float32 whatever the input is. Derive new
    tensors from the input (torch.zeros_like(x), x.new_zeros(...)) or register them;
  * keep the input's dtype: no .float()/.double(), no numpy round trips;
  * never modify an input in place (x.mul_(...)): the caller still holds it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


class _${class_name}Function(torch.autograd.Function):
    """OPTIONAL hand-written backward (MATLAB: the layer's ``backward`` method).

    Most layers need none: autograd differentiates forward by itself. Write one when
    autograd cannot (a call outside torch), is too slow or uses too much memory (a fused
    kernel), or is numerically poor. Then call ``_${class_name}Function.apply(...)`` from the
    layer's forward. layercheck compares this backward with finite differences, for the
    inputs and for the learnable parameters, and with only some of them requiring grad.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, beta: Tensor) -> Tensor:
        # Save what backward needs: here the inputs; backward recomputes the sigmoid, which
        # costs a little time and saves the memory of keeping it.
        ctx.save_for_backward(x, beta)
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        # One gradient per forward input, in order; None for an input that needs none.
        x, beta = ctx.saved_tensors
        s = torch.sigmoid(beta * x)
        ds = s * (1 - s)  # the derivative of the sigmoid at beta * x
        grad_x = grad_beta = None
        # ctx.needs_input_grad is MATLAB's computeGradients: skip work nobody asked for
        # (frozen parameters, inputs without requires_grad).
        if ctx.needs_input_grad[0]:
            grad_x = grad * (s + beta * x * ds)
        if ctx.needs_input_grad[1]:
            # beta was broadcast along every dimension but the channel: sum the gradient
            # back to beta's own shape.
            grad_beta = (grad * x * x * ds).sum_to_size(beta.shape)
        return grad_x, grad_beta


class $class_name(nn.Module):
    """Swish with a learnable slope per channel: ``y = x * sigmoid(beta * x)``.

    Give ``num_channels`` (and ``channel_dim``, the input dimension the channels run
    along; 1 is PyTorch's NCHW), or leave them out and let ``initialize(layout)`` size the
    layer from its input's layout.
    """

    # Learnable parameters (MATLAB: properties (Learnable)): nn.Parameter attributes.
    # layercheck checks the gradient of every parameter with requires_grad=True.
    beta: nn.Parameter | None
    # State (MATLAB: properties (State)): OPTIONAL; buffers, registered with
    # register_buffer so that .to(), state_dict() and copies carry them along.
    running_mean: Tensor | None

    def __init__(self, num_channels: int | None = None, channel_dim: int = 1, *,
                 momentum: float = 0.1, beta_init: float = 1.0) -> None:
        super().__init__()
        # Plain settings (MATLAB: properties): Python values, not tensors.
        self.channel_dim: int | None = channel_dim
        self.momentum = momentum
        self.beta_init = beta_init
        # Register even what does not exist yet: a tensor kept in a plain attribute is
        # missed by .to(), state_dict() and optimisers.
        self.register_parameter("beta", None)
        self.register_buffer("running_mean", None)
        if num_channels is not None:
            self._create(num_channels)

    def _create(self, channels: int) -> None:
        self.beta = nn.Parameter(torch.full((channels,), float(self.beta_init)))
        self.running_mean = torch.zeros(channels)

    def initialize(self, layout: Any) -> None:
        """OPTIONAL (MATLAB: ``initialize``): create what depends on the input's size.

        Called once before the layer is used, with one layout per forward input (here
        one); a layout has ``.size``, ``.format`` and ``.finddim(label)`` (C channel,
        B batch, S spatial, T time, U unspecified). It must not change what is already set
        (a layer built with num_channels, or loaded from a checkpoint): create only what
        is still None. Lazy modules (nn.LazyLinear...) need no initialize.
        """
        if self.beta is not None:
            return
        found = layout.finddim("C")
        self.channel_dim = found[0] if found else None  # no C: one slope for every element
        self._create(layout.size[found[0]] if found else 1)

    def forward(self, x: Tensor) -> Tensor:
        """REQUIRED (MATLAB: ``forward``): the computation, in training and in eval mode.

        In train() mode this is what training runs, and where state may change; in eval()
        mode plain PyTorch calls it for inference too, so it must be right in both.
        """
        y = self.predict(x)
        if self.training and self.running_mean is not None:
            self._update_state(y)
        return y

    def predict(self, x: Tensor) -> Tensor:
        """OPTIONAL (MATLAB: ``predict``): the computation for inference.

        layercheck uses it, in eval mode, as the prediction path when it exists. Define it
        when inference differs from training (no dropout, no state update, running instead
        of batch statistics); delete it when forward alone says everything.
        """
        if self.beta is None:
            raise RuntimeError(f"{type(self).__name__} has no parameters yet: "
                               "pass num_channels, or call initialize(layout)")
        return _${class_name}Function.apply(x, self._broadcastable(self.beta, x))

    def reset_state(self) -> None:
        """OPTIONAL (MATLAB: ``resetState``): put the state back to its initial value.

        layercheck checks that after it the layer reproduces its first output. Reset in
        place (zero_, fill_) so the state keeps its dtype and device.
        """
        if self.running_mean is not None:
            self.running_mean.zero_()

    @torch.no_grad()
    def _update_state(self, y: Tensor) -> None:
        """The running mean of the output per channel (e.g. to watch for dead channels)."""
        assert self.running_mean is not None
        channel = None if self.channel_dim is None else self.channel_dim % y.ndim
        others = [d for d in range(y.ndim) if d != channel]
        mean = y.mean(dim=others) if others else y
        self.running_mean.lerp_(mean.reshape(self.running_mean.shape).to(self.running_mean.dtype), self.momentum)

    def _broadcastable(self, param: Tensor, x: Tensor) -> Tensor:
        """View a per-channel tensor so that it broadcasts along the channel dimension of x."""
        shape = [1] * x.ndim
        if self.channel_dim is not None:
            shape[self.channel_dim] = -1
        return param.view(shape)

    def extra_repr(self) -> str:
        channels = None if self.beta is None else self.beta.numel()
        return f"num_channels={channels}, channel_dim={self.channel_dim}, momentum={self.momentum}"
''')

SPEC_TEMPLATE = string.Template('''\
# layercheck spec for $layer_file: `layercheck run $spec_name` checks $class_name.
layer: $layer_file:$class_name  # relative to this file; or a module path such as mypkg.layers:$class_name
args: []                      # constructor positional arguments
kwargs: {}                    # constructor keyword arguments, e.g. {num_channels: $channels}
inputs:                       # one entry per forward input, in call order
  - layout: $layout  # SIZES:FORMAT; labels: B batch, C channel, S spatial, T time, U unspecified
checks:
  skip: []                    # check ids not to run (`layercheck checks` lists them)
  enable: []                  # opt-in checks to run as well: compile, export, gradgrad, forward_ad
seed: 0                       # seed of the generated inputs and of the random stream
tolerance: {}                 # per-dtype overrides for numerical checks, e.g. {float32: 1.0e-4}
''')


OP_TEMPLATE = string.Template('''\
"""A custom operator, the PyTorch 2 way: torch.library.custom_op with a fake kernel and a
registered backward, so that it works in eager mode, under torch.compile and torch.export, and
with tensor subclasses. `layercheck run $spec_name` checks it: every gradient against finite
differences (which torch.library.opcheck does not do), and opcheck's own tests as op_schema,
op_fake and op_autograd_registration.

Write a Module when the layer owns parameters or state, an operator (this file) when it is a
function of its inputs that needs its own kernel or backward, a plain function when autograd's
own derivative is right.
"""

from __future__ import annotations

import torch


# "$namespace::$op_name" is the operator's name in torch.ops: torch.ops.$namespace.$op_name.
# mutates_args lists every argument the kernel writes into (none here): op_schema holds it to that.
@torch.library.custom_op("$namespace::$op_name", mutates_args=())
def $op_name(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """y = scale * tanh(x), scale broadcast over x (one value per channel, say)."""
    return torch.tanh(x) * scale


@$op_name.register_fake
def _(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # What torch.compile, export and meta tensors run: an empty tensor of the real output's
    # size, dtype, device and strides (op_fake compares them).
    return torch.empty_like(x * scale)


def _setup_context(ctx, inputs, output):
    x, scale = inputs
    ctx.save_for_backward(x, scale)


def _backward(ctx, grad):
    # One gradient per input, the input's size (sum_to_size undoes the broadcast), None for an
    # input that needs none (ctx.needs_input_grad): gradients and needs_input_grad check both.
    x, scale = ctx.saved_tensors
    t = torch.tanh(x)
    grad_x = grad * (1 - t * t) * scale if ctx.needs_input_grad[0] else None
    grad_scale = (grad * t).sum_to_size(scale.shape) if ctx.needs_input_grad[1] else None
    return grad_x, grad_scale


$op_name.register_autograd(_backward, setup_context=_setup_context)
''')

OP_SPEC_TEMPLATE = string.Template('''\
# layercheck spec for $layer_file: `layercheck run $spec_name` checks the custom operator $op_name.
layer: $layer_file:$op_name  # relative to this file; or a module path such as mypkg.ops:$op_name
inputs:                       # one entry per tensor argument, in call order
  - layout: $layout  # x: SIZES:FORMAT; labels: B batch, C channel, S spatial, T time, U unspecified
  - layout: $scale_layout  # scale: one value per channel, broadcast over the others
checks:
  skip: []
  enable: [op_aot_dispatch]   # opt-in: traces the operator as torch.compile's backward does
seed: 0
''')


def class_name_for(stem: str) -> str:
    """``my_layer`` -> ``MyLayer``."""
    return "".join(part[:1].upper() + part[1:] for part in stem.split("_") if part) or "Layer"


def write(name: Path, *, layout: Layout | None = None, class_name: str | None = None,
          operator: bool = False) -> tuple[Path, Path]:
    """Write ``NAME.py`` and ``NAME.yaml`` (a layer class, or with ``operator`` a custom
    operator); raises UsageError (and writes nothing) when either exists or the name cannot be
    a Python module and class."""
    stem = name.name.removesuffix(".py")
    if not stem.isidentifier() or keyword.iskeyword(stem):
        raise UsageError(f"{name}: NAME must be a Python identifier (letters, digits, _), e.g. my_layer")
    if stem in sys.stdlib_module_names or stem in ("torch", "layercheck"):
        raise UsageError(f"{name}: {stem}.py would shadow the module {stem!r}; choose another NAME")
    cls = class_name or class_name_for(stem)
    if not cls.isidentifier() or keyword.iskeyword(cls) or cls in _TEMPLATE_NAMES:
        raise UsageError(f"--class-name {cls!r}: not usable as the class name; choose another")
    layout = layout or Layout.parse(DEFAULT_LAYOUT)
    folder = name.parent
    layer_file, spec_file = folder / f"{stem}.py", folder / f"{stem}.yaml"
    for path in (layer_file, spec_file):
        if path.exists():
            raise UsageError(f"{path} already exists; layercheck init never overwrites (choose another NAME)")
    channels = layout.size[layout.finddim("C")[0]] if layout.finddim("C") else 1
    if operator:
        scale = Layout(tuple(size if label == "C" else 1 for size, label in zip(layout.size, layout.format)),
                       "U" * len(layout.size))
        layer_text = OP_TEMPLATE.substitute(namespace=stem, op_name=stem, spec_name=spec_file.name)
        spec_text = OP_SPEC_TEMPLATE.substitute(layer_file=layer_file.name, spec_name=spec_file.name, op_name=stem,
                                                layout=layout, scale_layout=scale)
    else:
        layer_text = LAYER_TEMPLATE.substitute(class_name=cls, spec_name=spec_file.name)
        spec_text = SPEC_TEMPLATE.substitute(layer_file=layer_file.name, spec_name=spec_file.name, class_name=cls,
                                             channels=channels, layout=layout)
    folder.mkdir(parents=True, exist_ok=True)
    _create(layer_file, layer_text)
    try:
        _create(spec_file, spec_text)
    except BaseException:
        layer_file.unlink(missing_ok=True)
        raise
    return layer_file, spec_file


def _create(path: Path, text: str) -> None:
    """Write a new file; mode "x" refuses one that appeared since we looked."""
    try:
        with path.open("x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError:
        raise UsageError(f"{path} already exists; layercheck init never overwrites (choose another NAME)") from None

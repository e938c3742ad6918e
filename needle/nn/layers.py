"""Basic layers: Identity, Flatten, activations, Sequential, Residual, Linear, Dropout."""

from __future__ import annotations

import math
from typing import Any

from .. import init, ops
from ..arguments import check_range, flag, integer
from ..autograd import Tensor
from ..autograd.torch_names import flattened_shape
from ..backends import Device
from .module import Module, Parameter, check_size


class Identity(Module):
    """Returns its input unchanged."""

    def forward(self, x: Tensor) -> Tensor:
        """x."""
        return x


class Flatten(Module):
    """Axes `start_dim`..`end_dim` (inclusive) merged into one, as PyTorch's; the default is
    the course's (N, d1, d2, ...) -> (N, d1 * d2 * ...), (N,) -> (N, 1) included."""

    start_dim, end_dim = 1, -1  # (the course's Flatten: a module pickled before had neither)

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = integer("Flatten", "start_dim", start_dim)
        self.end_dim = integer("Flatten", "end_dim", end_dim)
        start, end = self.start_dim, self.end_dim
        if (start < 0) == (end < 0) and start > end:  # (else known once the input's ndim is)
            raise ValueError(f"Flatten: start_dim {start} comes after end_dim {end}")

    def forward(self, x: Tensor) -> Tensor:
        """x with axes start_dim..end_dim merged (the course's: all but the first)."""
        shape = x.shape
        if (self.start_dim, self.end_dim) != (1, -1):
            return ops.reshape(x, flattened_shape("Flatten", shape, self.start_dim, self.end_dim))
        if len(shape) < 1:
            raise ValueError(f"Flatten expects at least 1 dimension (N, ...), found shape {shape}")
        return ops.reshape(x, (shape[0], math.prod(shape[1:])))

    def extra_repr(self) -> str:
        """PyTorch's repr: `Flatten(start_dim=1, end_dim=-1)`."""
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class ReLU(Module):
    """max(x, 0), elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        """relu(x)."""
        return ops.relu(x)


class Tanh(Module):
    """tanh(x), elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        """tanh(x)."""
        return ops.tanh(x)


class Sigmoid(Module):
    """1 / (1 + e^-x), elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        """sigmoid(x)."""
        return ops.sigmoid(x)


class Sequential(Module):
    """Applies its modules one after another; `.modules` is the list of them."""

    def __init__(self, *modules: Module):
        super().__init__()
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential: argument {i} must be a Module, found "
                                f"{type(m).__name__}")
        self.modules = list(modules)

    def forward(self, x: Any) -> Any:
        """The modules applied in order."""
        for module in self.modules:
            x = module(x)
        return x

    def __getitem__(self, index: int | slice) -> Module:
        """The module at `index`; a slice gives a Sequential of those modules (as PyTorch)."""
        if isinstance(index, slice):
            out = Sequential(*self.modules[index])
            out.training = self.training
            return out
        return self.modules[index]

    def __len__(self) -> int:
        return len(self.modules)

    def __iter__(self):
        return iter(self.modules)

    def _repr_name(self, name: str) -> str:
        return name.removeprefix("modules.")


class Residual(Module):
    """fn(x) + x."""

    def __init__(self, fn: Module):
        super().__init__()
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        """fn(x) + x."""
        return self.fn(x) + x


class Linear(Module):
    """y = x @ weight + bias, with weight (in_features, out_features), over any leading dims."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: Device | None = None, dtype: str = "float32"):
        super().__init__()
        self.in_features = in_features = check_size("Linear", "in_features", in_features)
        self.out_features = out_features = check_size("Linear", "out_features", out_features)
        bias = flag("Linear", "bias", bias)  # (bias="no" is true to Python)
        # the course's order: weight drawn first, then bias (with fan_in = out_features)
        self.weight = Parameter(init.kaiming_uniform(in_features, out_features,
                                                     device=device, dtype=dtype))
        if bias:
            b = init.kaiming_uniform(out_features, 1, device=device, dtype=dtype)
            self.bias = Parameter(ops.reshape(b, (1, out_features)))
        else:
            self.bias = None

    def forward(self, x: Tensor) -> Tensor:
        """x @ weight + bias; the bias broadcasts over the leading dimensions."""
        found = x.shape[-1] if x.ndim else None
        if found != self.in_features:
            raise ValueError(f"Linear: expected input with {self.in_features} features "
                             f"(last dimension), found {found} (input shape {x.shape})")
        if self.bias is None:
            return x @ self.weight
        if x.ndim >= 2:
            return ops.affine(x, self.weight, self.bias)  # one node, bias added in place
        bias = self.bias
        if bias.shape == (1, self.out_features):  # a 1-d x gives (out_features,), as PyTorch
            bias = ops.reshape(bias, (self.out_features,))
        return x @ self.weight + bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Dropout(Module):
    """Zeroes each entry with probability p in training (scaling the rest by 1/(1-p))."""

    #: checked at every assignment
    _setting_checks = {"p": lambda owner, name, value: check_range(owner, name, value, 0.0, 1.0,
                                                                   high_inclusive=True)}

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        """x * mask / (1 - p) with mask = rand <= 1 - p in training; x in eval and at p = 0,
        zeros at p = 1."""
        if not self.training or self.p == 0.0:
            return x  # p = 0 draws nothing, as in PyTorch
        if self.p == 1.0:  # zeros, drawing nothing, as PyTorch's (1 / (1 - p) is no number)
            return x * 0.0
        device = x.device
        keep = 1.0 - self.p
        # drawn on the device (numpy's global state on cpu: the course's float64 draws and
        # its randb mask), then x * mask / keep in the course's float32 order, one node
        draws = device.random(x.shape)
        return ops.dropout_mask(x, Tensor.make_const(draws, device=device), keep)

    def extra_repr(self) -> str:
        return f"p={self.p}"

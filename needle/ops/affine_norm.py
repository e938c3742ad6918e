"""BatchNorm's and LayerNorm's training forward as one node each: the standardisation (see
norm.py) and the affine map `y * w + b`, with (C,) `w` and `b` along one axis of x.

    BatchNorm: x (N, C, ...) standardised over every axis but 1; w and b along axis 1.
    LayerNorm: x (..., C) standardised over the last axis; w and b along it.

Each computes through a kernel whose reference is NORMALIZE then the product and the shift
(the numbers of Normalize and ScaleShift, the two nodes they replace); on torch PyTorch's
own batch and layer norm with their affine map, one op each way. The three adjoints are one
tuple op (BatchNormGrad, LayerNormGrad) whose own gradient keeps second order working:
with N(x, u) = s P u NormalizeGrad's map (linear and symmetric in u, and y's adjoint map),
F(x, w, g) = (N(x, g w), sum(g y), sum(g)) over the axes but the parameters' one, and for
the adjoints (hx, hw, hb):
    d/dg = N(x, hx) w + Op(x, hw, hb),   d/dw = sum(g N(x, hx)),
    d/dx = [d<N(x, u), hx>/dx at u = g w] + N(x, g hw).
"""

from __future__ import annotations

from typing import Any

from ..arguments import check_range, real
from ..autograd.tensor import Tensor
from ..autograd.tensor_tuple import TensorTupleOp
from ..backends import namespace
from ..kernels import ADD_TO_FRESH, SUM, Kernel
from .dtypes import PromotingOp, check_floating
from .movement import reshape
from .norm import NORMALIZE, NORMALIZE_GRAD, NormalizeGrad, _normalize_grad_x
from .reduce import summation


def _batch_axes(ndim: int) -> tuple[int, ...]:
    """Every axis but 1 (the channels) of an input of `ndim` >= 2 axes."""
    return (0, *range(2, ndim))


def _along(ndim: int, axis: int) -> tuple[int, ...]:
    """The shape that makes a (C,) vector broadcast along `axis` of `ndim` axes."""
    return (-1,) + (1,) * (ndim - axis - 1)


def batch_norm_portable(x: Any, w: Any, b: Any, eps: float
                        ) -> tuple[Any, Any, Any, Any, Any]:
    """(out, y, s, mean, var): y = NORMALIZE over every axis but 1, out = y w + b with the
    (C,) w and b along axis 1; s, mean and var keepdims."""
    xp = namespace(x)
    y, s, mean, var = NORMALIZE(x, _batch_axes(x.ndim), eps)
    along = _along(x.ndim, 1)
    return ADD_TO_FRESH(y * xp.reshape(w, along), xp.reshape(b, along)), y, s, mean, var


def batch_norm_grad_portable(g: Any, x: Any, w: Any, y: Any, s: Any, mean: Any
                             ) -> tuple[Any, Any, Any]:
    """(dx, dw, db) of out = y w + b for the output's adjoint g: dx = s P (g w), dw = sum(g y)
    and db = sum(g) over every axis but 1; y is recomputed as (x - mean) s where the forward
    kept none (a fast version's)."""
    xp = namespace(g)
    axes = _batch_axes(g.ndim)
    if y is None:
        y = (x - mean) * s
    dx = NORMALIZE_GRAD(g * xp.reshape(w, _along(g.ndim, 1)), y, s, axes)
    return dx, SUM(g * y, axes), SUM(g, axes)


def layer_norm_portable(x: Any, w: Any, b: Any, eps: float) -> tuple[Any, Any, Any, Any]:
    """(out, y, s, mean): y = NORMALIZE over the last axis, out = y w + b; s and mean
    keepdims (what the backward reads; no running statistics)."""
    y, s, mean, _ = NORMALIZE(x, (x.ndim - 1,), eps)
    return ADD_TO_FRESH(y * w, b), y, s, mean


def layer_norm_grad_portable(g: Any, x: Any, w: Any, y: Any, s: Any, mean: Any
                             ) -> tuple[Any, Any, Any]:
    """(dx, dw, db) of out = y w + b for the output's adjoint g: dx = s P (g w) over the last
    axis, dw = sum(g y) and db = sum(g) over the others; y recomputed where none was kept."""
    leading = tuple(range(g.ndim - 1))
    if y is None:
        y = (x - mean) * s
    dx = NORMALIZE_GRAD(g * w, y, s, (g.ndim - 1,))
    return dx, SUM(g * y, leading), SUM(g, leading)


#: on torch PyTorch's batch and layer norm with their affine map: one op forward (batch norm:
#: with var_mean for the running statistics) and one backward for all three adjoints, where
#: Normalize and ScaleShift make about nine; on cuda BatchNorm is one kernel each way that
#: keeps a convolution's channels-last layout (backends/affine_norm.py), LayerNorm one
#: forward and two or three backward (backends/layer_norm.py), the reference's numbers to
#: the bit; elsewhere the reference, on NORMALIZE's fast versions
BATCH_NORM = Kernel("batch_norm", batch_norm_portable,
                    fast={"torch": "needle.backends.normalize_torch:batch_norm_torch",
                          "cuda": "needle.backends.affine_norm:batch_norm_cuda"})
BATCH_NORM_GRAD = Kernel("batch_norm_grad", batch_norm_grad_portable,
                         fast={"torch": "needle.backends.normalize_torch:batch_norm_grad_torch",
                               "cuda": "needle.backends.affine_norm:batch_norm_grad_cuda"})
LAYER_NORM = Kernel("layer_norm", layer_norm_portable,
                    fast={"torch": "needle.backends.normalize_torch:layer_norm_torch",
                          "cuda": "needle.backends.layer_norm:layer_norm_cuda"})
LAYER_NORM_GRAD = Kernel("layer_norm_grad", layer_norm_grad_portable,
                         fast={"torch": "needle.backends.normalize_torch:layer_norm_grad_torch",
                               "cuda": "needle.backends.layer_norm:layer_norm_grad_cuda"})


class _AffineNorm(PromotingOp):
    """y = the standardisation of x, out = y w + b with (C,) w and b along `param_axis`;
    after `compute`, `stats` holds the statistics it used, keepdims: BatchNorm's (mean, var)
    (the running statistics read them), LayerNorm's (mean,)."""

    saves = True
    kernel: Kernel

    def __init__(self, eps: float = 1e-5):
        # (eps < 0: NaN; a layer's float eps, checked when the layer was made, is taken as is:
        # these ops are made at every forward)
        self.eps = eps if eps.__class__ is float and 0.0 <= eps < 1e308 else check_range(
            self.op_name, "eps", eps, 0.0)
        self.stats = None

    @staticmethod
    def param_axis(ndim: int) -> int:
        raise NotImplementedError

    @staticmethod
    def axes(ndim: int) -> tuple[int, ...]:
        """The standardised axes."""
        raise NotImplementedError

    def grad_op(self, saved: tuple | None) -> _AffineNormGrad:
        """The op of the three adjoints, reading `saved` (the forward's (x, y, s, mean))."""
        raise NotImplementedError

    def compute(self, x, w, b):
        return self.forward(x, w, b)[0]

    def forward(self, x, w, b):
        shape = tuple(x.shape)
        c = shape[self.param_axis(len(shape))] if len(shape) >= self.min_ndim else None
        if c is None or tuple(w.shape) != (c,) or tuple(b.shape) != (c,):
            raise ValueError(f"{self.op_name}: expected an input of shape {self.layout} and a "
                             f"weight and bias of shape (C,), found {shape}, {tuple(w.shape)} "
                             f"and {tuple(b.shape)}")
        check_floating(self.op_name, x)
        out, y, s, mean, *var = self.kernel(x, w, b, self.eps)
        self.stats = (mean, *var)
        return out, (x, y, s, mean)

    def gradient(self, out_grad, node):
        x, w, _ = node.inputs
        parts = self.grad_op(node.saved)(x, w, out_grad)
        return parts[0], parts[1], parts[2]


class _AffineNormGrad(TensorTupleOp):
    """The adjoints (dx, dw, db) of an _AffineNorm at (x, w) for the output's adjoint g: with
    y = the standardised x and P NormalizeGrad's projection, dx = s P (g w), dw = sum(g y)
    and db = sum(g) over every axis but the parameters'."""

    forward_op: type[_AffineNorm]
    kernel: Kernel

    def __init__(self, eps: float, saved: tuple | None = None):
        self.eps = eps
        self.saved = saved  # (x, y or None, s, mean) from the forward of this x

    def compute(self, x, w, g):
        saved = self.saved
        if saved is not None and saved[0] is x:
            y, s, mean = saved[1:]
        else:
            y, s, mean, _ = NORMALIZE(x, self.forward_op.axes(x.ndim), self.eps)
        return self.kernel(g, x, w, y, s, mean)

    def gradient(self, out_grad, node):
        x, w, g = node.inputs
        need_x, need_w, need_g = node.needs_input_grad
        hx, hw, hb = out_grad[0], out_grad[1], out_grad[2]
        ndim = len(x.shape)
        axes = self.forward_op.axes(ndim)
        p = self.forward_op.param_axis(ndim)
        along, sums = _along(ndim, p), tuple(i for i in range(ndim) if i != p)
        n_hx = NormalizeGrad(axes, self.eps)(x, hx) if need_w or need_g else None
        grad_g = (n_hx * reshape(w, along) + self.forward_op(self.eps)(x, hw, hb)
                  if need_g else None)
        grad_w = summation(g * n_hx, sums) if need_w else None
        grad_x = None
        if need_x:
            grad_x = (_normalize_grad_x(x, g * reshape(w, along), hx, axes, self.eps)
                      + NormalizeGrad(axes, self.eps)(x, g * reshape(hw, along)))
        return grad_x, grad_w, grad_g


class BatchNorm(_AffineNorm):
    """BatchNorm's training forward in one node: x (N, C, ...) standardised over every axis
    but 1 (batch mean, biased variance, plus eps), times w plus b, both (C,)."""

    op_name, layout, min_ndim = "batch_norm", "(N, C, ...)", 2
    kernel = BATCH_NORM
    axes = staticmethod(_batch_axes)

    def __init__(self, eps: float = 1e-5):
        # PyTorch's rule: with eps 0 a constant channel is 0/0, which torch's kernel makes 0
        # and the others NaN (checked before the base class's eps >= 0, for this message)
        value = real("batch_norm", "eps", eps)
        if not value > 0:
            raise ValueError(f"batch_norm: eps must be positive in training, got {value}")
        super().__init__(value)

    @staticmethod
    def param_axis(ndim: int) -> int:
        return 1

    def grad_op(self, saved: tuple | None) -> BatchNormGrad:
        """BatchNormGrad at this eps, reading `saved` (the forward's (x, y, s, mean))."""
        return BatchNormGrad(self.eps, saved)


class BatchNormGrad(_AffineNormGrad):
    """BatchNorm's three adjoints: (x, w, g) -> (dx, dw, db)."""

    forward_op, kernel = BatchNorm, BATCH_NORM_GRAD


class LayerNorm(_AffineNorm):
    """LayerNorm's forward in one node: x (..., C) standardised over the last axis (biased
    variance, plus eps), times w plus b, both (C,)."""

    op_name, layout, min_ndim = "layer_norm", "(..., C)", 1
    kernel = LAYER_NORM

    @staticmethod
    def axes(ndim: int) -> tuple[int, ...]:
        return (ndim - 1,)

    @staticmethod
    def param_axis(ndim: int) -> int:
        return ndim - 1

    def grad_op(self, saved: tuple | None) -> LayerNormGrad:
        """LayerNormGrad at this eps, reading `saved` (the forward's (x, y, s, mean))."""
        return LayerNormGrad(self.eps, saved)


class LayerNormGrad(_AffineNormGrad):
    """LayerNorm's three adjoints: (x, w, g) -> (dx, dw, db)."""

    forward_op, kernel = LayerNorm, LAYER_NORM_GRAD


def batch_norm(x: Tensor, w: Tensor, b: Tensor, eps: float = 1e-5) -> Tensor:
    """BatchNorm's training forward: x standardised over every axis but 1, times w plus b."""
    return BatchNorm(eps)(x, w, b)


def layer_norm(x: Tensor, w: Tensor, b: Tensor, eps: float = 1e-5) -> Tensor:
    """LayerNorm: x standardised over the last axis, times w plus b."""
    return LayerNorm(eps)(x, w, b)

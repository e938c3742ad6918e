"""Standardisation over axes, fused: the core of BatchNorm and LayerNorm in one node.

Written as a composite (mean, subtract, square, mean, power, multiply) it costs a dozen
nodes forward and about twice that backward; batch and layer norm are hot enough to earn
one fused op. Its gradient is one fused op too, whose own gradient (second order) is built
from needle ops, so higher-order gradients still work.

With y = (x - mean) * s over `axes`, s = (var + eps)^(-1/2) and the biased variance:
    dy/dx = s P,  P v = v - mean(v) - y * mean(y v)      (P is symmetric)
"""

from __future__ import annotations

from typing import Any

from ..arguments import check_range
from ..autograd.tensor import Tensor, TensorOp
from ..backends import namespace
from ..backends.rows import as_rows, channels, from_rows
from ..kernels import Kernel
from .axes import freeze_axes, normalize_axes
from .dtypes import check_floating
from .movement import reshape
from .reduce import keepdims_shape, summation


def _mean(xp, x, axes):
    """The keepdims mean over `axes` (sum / count: numpy's mean is several times slower)."""
    count = 1
    for ax in axes:
        count *= x.shape[ax]
    return xp.sum(x, axis=axes, keepdims=True) / count


def _half(xp, x) -> bool:
    """Whether x is float16, whose statistics are computed in float32 (as PyTorch's): a sum
    of float16 overflows past 65504 (a mean of 10s over 8192 rows gave NaN)."""
    return getattr(xp, "float16", None) is not None and x.dtype == xp.float16


def _stats(xp, x, axes, eps):
    """(y, s, mean, var): the standardised x, the inverse standard deviation, the mean and
    the biased variance (all keepdims). In the course's order of float32 operations (its
    LayerNorm1d and BatchNorm1d): mean = sum / n, var = sum((x - mean)^2) / n,
    y = (x - mean) / (var + eps)^(1/2), so float32 goldens hold. float16 in float32."""
    if _half(xp, x):
        return tuple(xp.astype(a, x.dtype) for a in _stats(xp, xp.astype(x, xp.float32),
                                                           axes, eps))
    mean = _mean(xp, x, axes)
    centered = x - mean
    var = _mean(xp, centered * centered, axes)
    std = xp.sqrt(var + eps)
    return centered / std, 1.0 / std, mean, var


def normalize_portable(x: Any, axes: tuple[int, ...], eps: float
                       ) -> tuple[Any, Any, Any, Any]:
    """(y, s, mean, var) of x standardised over the non-negative `axes` (see `_stats`).
    BatchNorm's NC... layout (every axis but 1) is standardised as (N * ..., C) rows over
    axis 0, the numbers of the course's BatchNorm2d (which permuted and reshaped to
    BatchNorm1d's layout in nodes of its own); the statistics are keepdims in x's layout."""
    xp = namespace(x)
    c = channels(tuple(x.shape), axes)
    if c is None:
        return _stats(xp, x, axes, eps)
    y, s, mean, var = _stats(xp, as_rows(xp, x, c), (0,), eps)
    keep = keepdims_shape(tuple(x.shape), axes)
    return (from_rows(xp, y, tuple(x.shape)), xp.reshape(s, keep), xp.reshape(mean, keep),
            xp.reshape(var, keep))


def normalize_grad_portable(g: Any, y: Any, s: Any, axes: tuple[int, ...]) -> Any:
    """s P g = s (g - mean(g) - y mean(g y)) over `axes`: the adjoint at the x that gave
    (y, s), for the output adjoint g (BatchNorm's NC... layout as rows, as above)."""
    xp = namespace(g)
    c = channels(tuple(g.shape), axes)
    if c is not None:
        g2, y2 = as_rows(xp, g, c), as_rows(xp, y, c)
        return from_rows(xp, normalize_grad_portable(g2, y2, xp.reshape(s, (1, c)), (0,)),
                         tuple(g.shape))
    if _half(xp, g):  # in float32, as the forward (`_stats`)
        wide = normalize_grad_portable(*(xp.astype(a, xp.float32) for a in (g, y, s)), axes)
        return xp.astype(wide, g.dtype)
    return s * (g - _mean(xp, g, axes) - y * _mean(xp, g * y, axes))


#: on cuda one kernel each way (a block per row or per 32 columns) instead of about eight
#: arrays forward and six backward, two of them reductions, each a launch of tens of us;
#: on torch, PyTorch's one-pass reductions: five ops each way
NORMALIZE = Kernel("normalize", normalize_portable,
                   fast={"cuda": "needle.backends.normalize:normalize_cuda",
                         "torch": "needle.backends.normalize_torch:normalize_torch"})
NORMALIZE_GRAD = Kernel("normalize_grad", normalize_grad_portable,
                        fast={"cuda": "needle.backends.normalize:normalize_grad_cuda",
                              "torch": "needle.backends.normalize_torch:normalize_grad_torch"})


class Normalize(TensorOp):
    """(x - mean) / sqrt(var + eps) over `axes`, with the biased variance.

    After `compute`, `stats` holds the (mean, var) it used (keepdims arrays): BatchNorm's
    running statistics read them instead of reducing the batch again. The node keeps
    (x, y, s) for the gradient (`node.saved`).
    """

    saves = True

    def __init__(self, axes, eps: float = 1e-5):
        self.axes = freeze_axes(axes)
        self.eps = eps if eps.__class__ is float and 0.0 <= eps < 1e308 else check_range(
            "normalize", "eps", eps, 0.0)  # (eps < 0: NaN; a float is taken at once)
        self.stats = None

    def compute(self, x):
        return self.forward(x)[0]

    def forward(self, x):
        axes = normalize_axes("normalize", self.axes, x.shape)
        check_floating("normalize", x)
        y, s, mean, var = NORMALIZE(x, axes, self.eps)
        self.stats = (mean, var)
        return y, (x, y, s)

    def gradient(self, out_grad, node):
        return NormalizeGrad(self.axes, self.eps, node.saved)(node.inputs[0], out_grad)


def normalize(x: Tensor, axes: int | tuple[int, ...] | None, eps: float = 1e-5) -> Tensor:
    """Standardise `x` over `axes`: zero mean, unit (biased) variance, plus `eps`."""
    return Normalize(axes, eps)(x)


class NormalizeGrad(TensorOp):
    """The adjoint of Normalize at x for the output adjoint g: s P g."""

    def __init__(self, axes: tuple, eps: float, saved: tuple | None = None):
        self.axes = freeze_axes(axes)
        self.eps = eps
        self.saved = saved  # (x, y, s) from the Normalize of this x

    def compute(self, x, g):
        axes = normalize_axes("normalize", self.axes, x.shape)
        saved = self.saved
        if saved is not None and saved[0] is x:
            y, s = saved[1], saved[2]
        else:
            y, s = NORMALIZE(x, axes, self.eps)[:2]
        return NORMALIZE_GRAD(g, y, s, axes)

    def gradient(self, h, node):
        # F(x, g) = s P g. F is linear in g with a symmetric map: d<F,h>/dg = s P h.
        # d<F,h>/dx = -s^2 [(mean(gh) - mean(g) mean(h) - m n) y + n P g + m P h],
        # with m = mean(y g) and n = mean(y h).
        x, g = node.inputs
        need_x, need_g = node.needs_input_grad
        grad_g = NormalizeGrad(self.axes, self.eps)(x, h) if need_g else None
        if not need_x:
            return None, grad_g
        return _normalize_grad_x(x, g, h, self.axes, self.eps), grad_g


def _normalize_grad_x(x: Tensor, g: Tensor, h: Tensor, axes, eps: float) -> Tensor:
    """d<F(x, g), h>/dx for F(x, g) = s P g, NormalizeGrad's adjoint (needle ops):
    -s^2 [(mean(gh) - mean(g) mean(h) - m n) y + n P g + m P h], with m = mean(y g) and
    n = mean(y h)."""
    shape = tuple(x.shape)
    axes = normalize_axes("normalize", axes, shape)
    count = 1
    for ax in axes:
        count *= shape[ax]
    keep = keepdims_shape(shape, axes)

    def mean(t: Tensor) -> Tensor:  # keepdims, so it broadcasts against (…, x.shape)
        return reshape(summation(t, axes), keep) / count

    y = normalize(x, axes, eps)
    centered = x - mean(x)
    s2 = (mean(centered * centered) + eps) ** -1
    m, n = mean(y * g), mean(y * h)

    def project(v: Tensor) -> Tensor:
        return v - mean(v) - y * mean(y * v)

    inner = (mean(g * h) - mean(g) * mean(h) - m * n) * y + n * project(g) + m * project(h)
    return -(s2 * inner)

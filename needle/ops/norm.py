"""Standardisation over axes, fused: the core of BatchNorm and LayerNorm in one node.

Written as a composite (mean, subtract, square, mean, power, multiply) it costs a dozen
nodes forward and about twice that backward; batch and layer norm are hot enough to earn
one fused op. Its gradient is one fused op too, whose own gradient (second order) is built
from needle ops, so higher-order gradients still work.

With y = (x - mean) * s over `axes`, s = (var + eps)^(-1/2) and the biased variance:
    dy/dx = s P,  P v = v - mean(v) - y * mean(y v)      (P is symmetric)
"""

from __future__ import annotations

from ..autograd.tensor import Tensor, TensorOp, TensorTupleOp
from ..backends import namespace
from ..backends.rows import as_rows, channels, from_rows
from ..kernels import ADD_TO_FRESH, SUM, Kernel
from .axes import freeze_axes, normalize_axes
from .dtypes import PromotingOp
from .movement import reshape
from .reduce import keepdims_shape, summation


def _mean(xp, x, axes):
    """The keepdims mean over `axes` (sum / count: numpy's mean is several times slower)."""
    count = 1
    for ax in axes:
        count *= x.shape[ax]
    return xp.sum(x, axis=axes, keepdims=True) / count


def _stats(xp, x, axes, eps):
    """(y, s, mean, var): the standardised x, the inverse standard deviation, the mean and
    the biased variance (all keepdims). In the course's order of float32 operations (its
    LayerNorm1d and BatchNorm1d): mean = sum / n, var = sum((x - mean)^2) / n,
    y = (x - mean) / (var + eps)^(1/2), so float32 goldens hold."""
    mean = _mean(xp, x, axes)
    centered = x - mean
    var = _mean(xp, centered * centered, axes)
    std = xp.sqrt(var + eps)
    return centered / std, 1.0 / std, mean, var


def normalize_portable(x, axes: tuple[int, ...], eps: float):
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


def normalize_grad_portable(g, y, s, axes: tuple[int, ...]):
    """s P g = s (g - mean(g) - y mean(g y)) over `axes`: the adjoint at the x that gave
    (y, s), for the output adjoint g (BatchNorm's NC... layout as rows, as above)."""
    xp = namespace(g)
    c = channels(tuple(g.shape), axes)
    if c is not None:
        g2, y2 = as_rows(xp, g, c), as_rows(xp, y, c)
        return from_rows(xp, normalize_grad_portable(g2, y2, xp.reshape(s, (1, c)), (0,)),
                         tuple(g.shape))
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
        self.eps = float(eps)
        self.stats = None

    def compute(self, x):
        return self.forward(x)[0]

    def forward(self, x):
        axes = normalize_axes("normalize", self.axes, x.shape)
        y, s, mean, var = NORMALIZE(x, axes, self.eps)
        self.stats = (mean, var)
        return y, (x, y, s)

    def gradient(self, out_grad, node):
        return NormalizeGrad(self.axes, self.eps, node.saved)(node.inputs[0], out_grad)


def normalize(x: Tensor, axes, eps: float = 1e-5) -> Tensor:
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


# ----- batch norm: the normalisation over every axis but 1 and the affine map, one node ------
def _batch_axes(ndim: int) -> tuple[int, ...]:
    """Every axis but 1 (the channels) of an input of `ndim` >= 2 axes."""
    return (0, *range(2, ndim))


def _along_channels(xp, v, ndim: int):
    """A (C,) vector shaped to broadcast along axis 1 of an input of `ndim` axes."""
    return xp.reshape(v, (-1,) + (1,) * (ndim - 2))


def batch_norm_portable(x, w, b, eps: float):
    """(out, y, s, mean, var): y = NORMALIZE over every axis but 1, out = y w + b with the
    (C,) w and b along axis 1 (the two nodes' numbers: Normalize and ScaleShift); s, mean
    and var keepdims."""
    xp = namespace(x)
    y, s, mean, var = NORMALIZE(x, _batch_axes(x.ndim), eps)
    out = ADD_TO_FRESH(y * _along_channels(xp, w, x.ndim), _along_channels(xp, b, x.ndim))
    return out, y, s, mean, var


def batch_norm_grad_portable(g, x, w, y, s, mean):
    """(dx, dw, db) of out = y w + b for the output's adjoint g: dx = s P (g w), dw = sum(g y)
    and db = sum(g) over every axis but 1; y is recomputed as (x - mean) s where the forward
    kept none (a fast version's)."""
    xp = namespace(g)
    axes = _batch_axes(g.ndim)
    if y is None:
        y = (x - mean) * s
    dx = NORMALIZE_GRAD(g * _along_channels(xp, w, g.ndim), y, s, axes)
    return dx, SUM(g * y, axes), SUM(g, axes)


#: on torch PyTorch's batch norm with its affine map, one op forward (with var_mean for the
#: course's statistics) and one backward for all three adjoints, where Normalize and
#: ScaleShift make nine; elsewhere the reference, on NORMALIZE's fast versions
BATCH_NORM = Kernel("batch_norm", batch_norm_portable,
                    fast={"torch": "needle.backends.normalize_torch:batch_norm_torch"})
BATCH_NORM_GRAD = Kernel("batch_norm_grad", batch_norm_grad_portable,
                         fast={"torch": "needle.backends.normalize_torch:batch_norm_grad_torch"})


class BatchNorm(PromotingOp):
    """BatchNorm's training forward in one node: x (N, C, ...) standardised over every axis
    but 1 (batch mean, biased variance, plus eps), times w plus b, both (C,).

    The numbers of Normalize then ScaleShift(axis=1). After `compute`, `stats` holds the
    (mean, var) it used (keepdims): the running statistics read them.
    """

    op_name = "batch_norm"
    saves = True

    def __init__(self, eps: float = 1e-5):
        self.eps = float(eps)
        self.stats = None

    def compute(self, x, w, b):
        return self.forward(x, w, b)[0]

    def forward(self, x, w, b):
        shape = tuple(x.shape)
        if len(shape) < 2 or tuple(w.shape) != (shape[1],) or tuple(b.shape) != (shape[1],):
            raise ValueError(f"batch_norm: expected an input of shape (N, C, ...) and a weight "
                             f"and bias of shape (C,), found {shape}, {tuple(w.shape)} and "
                             f"{tuple(b.shape)}")
        out, y, s, mean, var = BATCH_NORM(x, w, b, self.eps)
        self.stats = (mean, var)
        return out, (x, y, s, mean)

    def gradient(self, out_grad, node):
        x, w, _ = node.inputs
        parts = BatchNormGrad(self.eps, node.saved)(x, w, out_grad)
        return parts[0], parts[1], parts[2]


def batch_norm(x: Tensor, w: Tensor, b: Tensor, eps: float = 1e-5) -> Tensor:
    """BatchNorm's training forward: x standardised over every axis but 1, times w plus b."""
    return BatchNorm(eps)(x, w, b)


class BatchNormGrad(TensorTupleOp):
    """The adjoints (dx, dw, db) of BatchNorm at (x, w) for the output's adjoint g: with
    y = normalize(x) and P NormalizeGrad's projection, dx = s P (g w), dw = sum(g y) and
    db = sum(g) over every axis but 1."""

    def __init__(self, eps: float, saved: tuple | None = None):
        self.eps = eps
        self.saved = saved  # (x, y or None, s, mean) from the BatchNorm of this x

    def compute(self, x, w, g):
        saved = self.saved
        if saved is not None and saved[0] is x:
            y, s, mean = saved[1:]
        else:
            y, s, mean, _ = NORMALIZE(x, _batch_axes(x.ndim), self.eps)
        return BATCH_NORM_GRAD(g, x, w, y, s, mean)

    def gradient(self, out_grad, node):
        # F(x, w, g) = (N(x, g w), sum(g y), sum(g)), N(x, u) = s P u (NormalizeGrad: linear
        # and symmetric in u, and y's own adjoint map). For adjoints (hx, hw, hb):
        #   d/dg = w N(x, hx) + y hw + hb = N(x, hx) w + BatchNorm(x, hw, hb)
        #   d/dw = sum(g N(x, hx)),  d/dx = [d<N(x, u), hx>/dx at u = g w] + N(x, g hw)
        x, w, g = node.inputs
        need_x, need_w, need_g = node.needs_input_grad
        hx, hw, hb = out_grad[0], out_grad[1], out_grad[2]
        ndim = len(x.shape)
        axes = _batch_axes(ndim)
        along = (-1,) + (1,) * (ndim - 2)
        n_hx = NormalizeGrad(axes, self.eps)(x, hx) if need_w or need_g else None
        grad_g = (n_hx * reshape(w, along) + BatchNorm(self.eps)(x, hw, hb)
                  if need_g else None)
        grad_w = summation(g * n_hx, axes) if need_w else None
        grad_x = None
        if need_x:
            grad_x = (_normalize_grad_x(x, g * reshape(w, along), hx, axes, self.eps)
                      + NormalizeGrad(axes, self.eps)(x, g * reshape(hw, along)))
        return grad_x, grad_w, grad_g

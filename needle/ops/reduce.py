"""Reductions: summation, max, and the max-stabilised logsumexp and logsoftmax."""

from __future__ import annotations

import math
from typing import Any

from ..autograd.graph import array_function, array_of
from ..autograd.tensor import Tensor, TensorOp, constant_like
from ..backends import device_of, namespace
from ..kernels import SUM, Kernel
from .axes import freeze_axes, normalize_axes
from .dtypes import check_floating, default_int, is_bool
from .indices import as_index_array
from .movement import broadcast_to, reshape
from .unary import exp


def mean_factor(n: int) -> float:
    """1 / n for a mean over n items; NaN for none (PyTorch's mean of an empty batch)."""
    return 1.0 / n if n else math.nan


def mean(a: Tensor, axes: int | tuple[int, ...] | None = None) -> Tensor:
    """The mean over `axes` (all when None; NaN over no items), as sum / count; float16
    summed and divided in float32 (as PyTorch's: a float16 sum passes 65504 soon)."""
    from .dtypes import AsType  # (dtypes imports this module's neighbours)

    shape = a.shape
    axes = normalize_axes("mean", axes, shape)
    count = math.prod(shape[ax] for ax in axes)
    narrow = a.dtype.kind == "f" and a.dtype.itemsize < 4
    total = Summation(axes)(AsType("float32")(a) if narrow else a)
    out = total / count if count else total * math.nan
    return AsType(a.dtype)(out) if narrow else out


def keepdims_shape(shape: tuple, axes: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` with the reduced `axes` (non-negative) set to 1."""
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def expand_reduced(t: Tensor, in_shape: tuple, axes: tuple[int, ...]) -> Tensor:
    """Broadcast a reduction's result (or adjoint) over normalised `axes` back to `in_shape`."""
    axes = tuple(sorted(axes))
    if axes != tuple(range(len(axes))):  # leading axes come back by broadcasting alone
        t = reshape(t, keepdims_shape(in_shape, axes))
    return broadcast_to(t, in_shape)


def _finite_max(xp, a, axes: tuple[int, ...]):
    """The keepdims max over `axes`, with 0 for all -inf (or inf) slices, for shifting by.

    Empty slices (a reduced axis of size 0) are shifted by 0 too: their logsumexp is -inf
    and their softmax empty, as PyTorch's are.
    """
    if 0 in a.shape and any(a.shape[ax] == 0 for ax in axes):
        return xp.zeros(keepdims_shape(tuple(a.shape), axes), dtype=a.dtype, device=a.device)
    m = xp.max(a, axis=axes, keepdims=True)
    # shifting such a slice by 0 instead gives -inf (inf) for logsumexp, not NaN
    return xp.where(xp.isfinite(m), m, xp.zeros_like(m))


class Summation(TensorOp):
    """Sum over `axes` (None: all); bools are counted in the default integer dtype."""

    def __init__(self, axes=None):
        self.axes = freeze_axes(axes)

    def compute(self, a):
        axes = None if self.axes is None else normalize_axes("sum", self.axes, a.shape)
        try:
            return SUM(a, axes)
        except TypeError:  # strict refuses bools: counted as numpy, torch and jax count them
            if not is_bool(a):
                raise
            return SUM(namespace(a).astype(a, default_int(a)), axes)

    def gradient(self, out_grad, node):
        shape = tuple(node.inputs[0].shape)
        return expand_reduced(out_grad, shape, normalize_axes("sum", self.axes, shape))


def summation(a: Tensor, axes: int | tuple[int, ...] | None = None) -> Tensor:
    """Sum over `axes` (None, an int, a tuple or a list)."""
    return Summation(axes)(a)


class Max(TensorOp):
    """Maximum over `axes` (of bools: any); the adjoint is shared equally by the maximal
    entries."""

    def __init__(self, axes=None, keepdims: bool = False):
        self.axes = freeze_axes(axes)
        self.keepdims = keepdims

    def compute(self, a):
        axes = None if self.axes is None else normalize_axes("max", self.axes, a.shape)
        if 0 in a.shape and any(a.shape[ax] == 0 for ax in
                                (range(a.ndim) if axes is None else axes)):
            raise ValueError(f"max: cannot reduce over an empty axis (shape {tuple(a.shape)}, "
                             f"axes {self.axes}): the maximum of no elements is undefined")
        xp = namespace(a)
        try:
            return xp.max(a, axis=axes, keepdims=self.keepdims)
        except TypeError:  # strict refuses bools: any, numpy's, torch's and jax's max of them
            if not is_bool(a):
                raise
            return xp.any(a, axis=axes, keepdims=self.keepdims)

    def gradient(self, out_grad, node):
        a = array_of(node.inputs[0])
        axes = normalize_axes("max", self.axes, a.shape)
        share = _max_share(a, axes)  # a constant
        grad = expand_reduced(out_grad, tuple(a.shape), axes)
        return grad * constant_like(grad, share)


@array_function
def _max_share(a, axes: tuple[int, ...]):
    """[a == max over axes] / (number of maximal entries): Max's adjoint shares."""
    xp = namespace(a)
    mask = xp.astype(a == xp.max(a, axis=axes, keepdims=True), a.dtype)
    return mask / xp.sum(mask, axis=axes, keepdims=True)


def max(a: Tensor, axes: int | tuple[int, ...] | None = None,  # noqa: A001
        keepdims: bool = False) -> Tensor:
    """Maximum over `axes`."""
    return Max(axes, keepdims)(a)


class LogSumExp(TensorOp):
    """log(sum(exp(a))) over `axes`, stabilised by the max: exact for huge magnitudes."""

    def __init__(self, axes=None):
        self.axes = freeze_axes(axes)

    def compute(self, a):
        xp = namespace(a)
        check_floating("logsumexp", a)
        axes = normalize_axes("logsumexp", self.axes, a.shape)
        shape = tuple(s for i, s in enumerate(a.shape) if i not in axes)
        if 0 in a.shape and any(a.shape[ax] == 0 for ax in axes):  # log(0), no warning
            return xp.full(shape, -math.inf, dtype=a.dtype, device=a.device)
        m = _finite_max(xp, a, axes)
        out = xp.log(xp.sum(xp.exp(a - m), axis=axes, keepdims=True)) + m
        return xp.reshape(out, shape)

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        shape = tuple(a.shape)
        axes = normalize_axes("logsumexp", self.axes, shape)
        # d/da logsumexp(a) = softmax(a) = exp(logsoftmax(a)); exp(a - logsumexp(a)) would
        # lose it for huge float32 a, whose logsumexp rounds to a multiple of a's spacing
        return expand_reduced(out_grad, shape, axes) * exp(logsoftmax(a, axes))


def logsumexp(a: Tensor, axes: int | tuple[int, ...] | None = None) -> Tensor:
    """log(sum(exp(a))) over `axes`, max-stabilised."""
    return LogSumExp(axes)(a)


class LogSoftmax(TensorOp):
    """a - logsumexp(a) over `axes`, as (a - m) - log(sum(exp(a - m))) with m the max.

    Shifting first keeps the answer for huge float32 logits: a - m is exact where the two
    are close, while logsumexp(a) itself rounds to a's spacing (8 at 1e8).
    """

    def __init__(self, axes=-1):
        self.axes = freeze_axes(axes)

    def compute(self, a):
        xp = namespace(a)
        check_floating("logsoftmax", a)
        axes = normalize_axes("logsoftmax", self.axes, a.shape)
        if 0 in a.shape:  # nothing to compute (and no log(0) warning for an empty axis)
            return xp.zeros_like(a)
        shifted = a - _finite_max(xp, a, axes)
        return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axes, keepdims=True))

    def gradient(self, out_grad, node):
        # y = a - logsumexp(a): the adjoint is g - softmax(a) sum(g), and softmax(a) = exp(y)
        shape = tuple(out_grad.shape)
        axes = normalize_axes("logsoftmax", self.axes, shape)
        total = expand_reduced(Summation(axes)(out_grad), shape, axes)
        return out_grad - exp(node.result) * total


def logsoftmax(a: Tensor, axes: int | tuple[int, ...] | None = -1) -> Tensor:
    """log(softmax(a)) over `axes` (the last by default), max-stabilised."""
    return LogSoftmax(axes)(a)


def softmax_xent_portable(logits: Any, labels: Any) -> tuple[Any, Any, Any]:
    """(mean cross-entropy, exp(logits - row max), row sums) of (N, k) logits against the
    int64 (N,) `labels`: the forward and what its gradient needs."""
    xp = namespace(logits)
    n = logits.shape[0]
    shifted = logits - _finite_max(xp, logits, (1,))
    e = xp.exp(shifted)
    sums = xp.sum(e, axis=1, keepdims=True)
    picked = xp.take_along_axis(shifted, xp.reshape(labels, (n, 1)), axis=1)
    return xp.sum(xp.log(sums) - picked) * mean_factor(n), e, sums


def softmax_xent_grad_portable(e: Any, sums: Any, labels: Any, g: Any,
                               overwrite: bool = False) -> Any:
    """g (softmax - onehot(labels)) / N from e = exp(logits - row max) and its row sums
    (`overwrite`: e is used by nothing else, and a fast version may write the result over it)."""
    xp = namespace(e)
    n, k = e.shape
    scale = g * mean_factor(n)
    p = e * (scale / sums)
    classes = xp.arange(k, dtype=labels.dtype, device=labels.device)
    hit = xp.reshape(labels, (n, 1)) == classes
    return xp.where(hit, p - scale, p)


#: the cpu's versions make fewer fresh (N, k) arrays: exp in place, the adjoint over e; the
#: cuda ones are a kernel per row (and a sum) forward and one elementwise kernel backward;
#: torch's the same arithmetic in half the ops
SOFTMAX_XENT = Kernel("softmax_xent", softmax_xent_portable,
                      fast={"cpu": "needle.backends.cross_entropy:softmax_xent_cpu",
                            "cuda": "needle.backends.cross_entropy:softmax_xent_cuda",
                            "torch": "needle.backends.cross_entropy_torch:softmax_xent_torch"})
SOFTMAX_XENT_GRAD = Kernel(
    "softmax_xent_grad", softmax_xent_grad_portable,
    fast={"cpu": "needle.backends.cross_entropy:softmax_xent_grad_cpu",
          "cuda": "needle.backends.cross_entropy:softmax_xent_grad_cuda",
          "torch": "needle.backends.cross_entropy_torch:softmax_xent_grad_torch"})


class SoftmaxCrossEntropy(TensorOp):
    """The mean over rows of -logsoftmax(logits)[i, labels[i]]: (N, k) logits -> a scalar.

    `labels` is a constant int64 array (N,) of the logits' device. Fused, it passes over the
    (N, k) logits four times forward (max, shift, exp, sum) and keeps exp(shifted) and the row
    sums for the gradient (`node.saved`), (softmax - onehot) / N, which costs four more.
    """

    saves = True

    def __init__(self, labels):
        self.labels = labels

    def compute(self, logits):
        return self.forward(logits)[0]

    def forward(self, logits):
        check_floating("softmax_cross_entropy", logits)
        if logits.ndim != 2:
            raise ValueError(f"softmax_cross_entropy: expected logits of shape (N, k), found "
                             f"{tuple(logits.shape)}")
        loss, e, sums = SOFTMAX_XENT(logits, self.labels)
        return loss, (logits, e, sums)

    def gradient(self, out_grad, node):
        # a walk that does not retain the graph drops node.saved after this rule: the
        # gradient may then be written over the forward's exponentials
        return SoftmaxCrossEntropyGrad(self.labels, node.saved, consume=not node.retains)(
            node.inputs[0], out_grad)


class SoftmaxCrossEntropyGrad(TensorOp):
    """The adjoint of SoftmaxCrossEntropy at logits x for a scalar adjoint g:
    g * (softmax(x) - onehot(labels)) / N."""

    def __init__(self, labels, saved: tuple | None = None, consume: bool = False):
        self.labels = labels
        self.saved = saved  # (x, exp(x - max), row sums) from the forward of this x
        self.consume = consume  # nothing reads saved's exponentials after this op

    def compute(self, x, g):
        saved = self.saved
        if saved is not None and saved[0] is x:
            # read only unless consumed: a second backward over a retained graph reads them
            e, sums, own = saved[1], saved[2], self.consume
        else:
            # recomputed as the forward computed them (on cuda a kernel's row sums differ
            # from the portable rule's by a few ulps)
            _, e, sums = SoftmaxCrossEntropy(self.labels).forward(x)[1]
            own = True
        return SOFTMAX_XENT_GRAD(e, sums, self.labels, g, own)

    def gradient(self, h, node):
        # F(x, g) = g/N (s - Y) with s = softmax(x): dF/dg . h = sum(h (s - Y)) / N and
        # dF/dx . h = g/N s (h - sum(s h, rows))
        x, g = node.inputs
        need_x, need_g = node.needs_input_grad
        n, k = x.shape
        s = exp(logsoftmax(x, 1))
        y = constant_like(h, _one_hot(self.labels, k, array_of(s).dtype))
        grad_g = Summation()(h * (s - y)) / n if need_g else None
        if not need_x:
            return None, grad_g
        rows = broadcast_to(reshape(Summation((1,))(s * h), (n, 1)), (n, k))
        return s * (h - rows) * broadcast_to(reshape(g / n, (1, 1)), (n, k)), grad_g


@array_function
def _one_hot(labels, k: int, dtype):
    """(n, k) rows of the identity picked by the (n,) labels, in `dtype`."""
    xp = namespace(labels)
    classes = xp.arange(k, dtype=labels.dtype, device=labels.device)
    return xp.astype(xp.reshape(labels, (labels.shape[0], 1)) == classes, dtype)


def softmax_cross_entropy(logits: Tensor, labels: Any) -> Tensor:
    """Mean softmax cross-entropy of (N, k) logits against (N,) `labels` (an array or a
    Tensor of the logits' device: integers, or floats holding whole numbers, in [0, k))."""
    shape = tuple(logits.shape)
    if len(shape) != 2:
        raise ValueError(f"softmax_cross_entropy: expected logits of shape (N, k), found "
                         f"{shape}")
    device = logits.device
    labels = _labels_on(device, labels)
    if tuple(labels.shape) != shape[:1]:
        raise ValueError(f"softmax_cross_entropy: expected labels of shape ({shape[0]},) for "
                         f"logits of shape {shape}, found {tuple(labels.shape)}")
    # one 0-d reduction read back (on an accelerator: deferred to the next read)
    labels = as_index_array(device.xp, labels, shape[1], "softmax_cross_entropy", "labels",
                            device)
    return SoftmaxCrossEntropy(labels)(logits)


def _labels_on(device: Any, labels: Any) -> Any:
    """`labels` (a Tensor or an array) checked to be on `device`."""
    if isinstance(labels, Tensor):
        where = labels.device
    elif hasattr(labels, "shape"):
        where = device_of(labels)
    else:
        raise TypeError(f"softmax_cross_entropy: expected labels as an array or a Tensor, "
                        f"found {type(labels).__name__}")
    if where != device:
        raise ValueError(f"softmax_cross_entropy: logits on {device}, labels on {where}; "
                         "move them with .to() or the device's asarray")
    return labels

"""Reductions: summation, max, logsumexp (max-stabilised) and logsoftmax."""

from __future__ import annotations

from ..autograd import Tensor, TensorOp
from ..backends import namespace
from .elementwise import exp
from .movement import broadcast_to, reshape


def normalize_axes(axes, ndim: int, op: str = "reduce") -> tuple[int, ...]:
    """`axes` (None, an int or a tuple, negatives allowed) as a sorted tuple of axes."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    out = []
    for ax in axes:
        if not -ndim <= ax < ndim:
            raise ValueError(f"{op}: axis {ax} is out of range for a {ndim}-d tensor")
        out.append(ax % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: repeated axis in {tuple(axes)}")
    return tuple(sorted(out))


def keepdims_shape(shape: tuple, axes: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` with the reduced `axes` set to 1."""
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def expand_reduced(t: Tensor, in_shape: tuple, axes) -> Tensor:
    """Broadcast a reduction's result (or adjoint) back to the input's shape."""
    axes = normalize_axes(axes, len(in_shape))
    return broadcast_to(reshape(t, keepdims_shape(in_shape, axes)), in_shape)


class Summation(TensorOp):
    """Sum over `axes` (None: all)."""

    def __init__(self, axes=None):
        self.axes = axes

    def compute(self, a):
        axes = normalize_axes(self.axes, a.ndim, "summation")
        return namespace(a).sum(a, axis=axes)

    def gradient(self, out_grad, node):
        return expand_reduced(out_grad, node.inputs[0].shape, self.axes)


def summation(a: Tensor, axes=None) -> Tensor:
    """Sum over `axes` (None, an int or a tuple)."""
    return Summation(axes)(a)


def sum_to_shape(t: Tensor, shape: tuple) -> Tensor:
    """Sum a broadcast adjoint back to `shape` (the one un-broadcast in needle)."""
    if t.shape == shape:
        return t
    lead = t.ndim - len(shape)
    if lead < 0 or any(s != 1 and t.shape[lead + i] != s for i, s in enumerate(shape)):
        raise ValueError(f"cannot sum a gradient of shape {t.shape} to shape {shape}")
    axes = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(shape) if s == 1 and t.shape[lead + i] != 1
    )
    return reshape(summation(t, axes), shape)


class Max(TensorOp):
    """Maximum over `axes`; the adjoint is shared equally by the maximal entries."""

    def __init__(self, axes=None, keepdims: bool = False):
        self.axes = axes
        self.keepdims = keepdims

    def compute(self, a):
        axes = normalize_axes(self.axes, a.ndim, "max")
        return namespace(a).max(a, axis=axes, keepdims=self.keepdims)

    def gradient(self, out_grad, node):
        a = node.inputs[0].realize_cached_data()
        xp = namespace(a)
        axes = normalize_axes(self.axes, a.ndim)
        m = xp.max(a, axis=axes, keepdims=True)
        mask = xp.astype(a == m, a.dtype)
        share = mask / xp.sum(mask, axis=axes, keepdims=True)  # a constant
        grad = expand_reduced(out_grad, tuple(a.shape), axes)
        return grad * Tensor.make_const(share, device=node.device)


def max(a: Tensor, axes=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum over `axes`."""
    return Max(axes, keepdims)(a)


class LogSumExp(TensorOp):
    """log(sum(exp(a))) over `axes`, stabilised by the max: exact for huge magnitudes."""

    def __init__(self, axes=None):
        self.axes = axes

    def compute(self, a):
        xp = namespace(a)
        axes = normalize_axes(self.axes, a.ndim, "logsumexp")
        m = xp.max(a, axis=axes, keepdims=True)
        # an all -inf (or inf) slice: shift by 0 instead, so the result is -inf (inf), not NaN
        m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))
        out = xp.log(xp.sum(xp.exp(a - m), axis=axes, keepdims=True)) + m
        return xp.reshape(out, tuple(s for i, s in enumerate(a.shape) if i not in axes))

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        shape = a.shape
        # d/da logsumexp(a) = softmax(a) = exp(a - logsumexp(a))
        softmax = exp(a - expand_reduced(node, shape, self.axes))
        return expand_reduced(out_grad, shape, self.axes) * softmax


def logsumexp(a: Tensor, axes=None) -> Tensor:
    """log(sum(exp(a))) over `axes`, max-stabilised."""
    return LogSumExp(axes)(a)


def logsoftmax(a: Tensor) -> Tensor:
    """log(softmax(a)) over the last axis."""
    return a - expand_reduced(logsumexp(a, axes=(a.ndim - 1,)), a.shape, (a.ndim - 1,))


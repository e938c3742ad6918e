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
    if axes != tuple(range(len(axes))):  # leading axes come back by broadcasting alone
        t = reshape(t, keepdims_shape(in_shape, axes))
    return broadcast_to(t, in_shape)


class Summation(TensorOp):
    """Sum over `axes` (None: all)."""

    def __init__(self, axes=None):
        self.axes = (axes,) if isinstance(axes, int) else axes

    def compute(self, a):
        return namespace(a).sum(a, axis=self.axes)

    def gradient(self, out_grad, node):
        return expand_reduced(out_grad, node.inputs[0].shape, self.axes)


def summation(a: Tensor, axes=None) -> Tensor:
    """Sum over `axes` (None, an int or a tuple)."""
    return Summation(axes)(a)


class SumToShape(TensorOp):
    """Sum over `axes` (keeping them), then reshape to `shape`: the one un-broadcast in needle.

    `sum_to_shape` works out the axes from the broadcast shape and the target shape.
    """

    def __init__(self, shape, axes):
        self.shape = tuple(shape)
        self.axes = tuple(axes)

    def compute(self, a):
        xp = namespace(a)
        out = xp.sum(a, axis=self.axes, keepdims=True) if self.axes else a
        return out if out.shape == self.shape else xp.reshape(out, self.shape)

    def gradient(self, out_grad, node):
        return broadcast_to(out_grad, node.inputs[0].shape)


def sum_to_shape(t: Tensor, shape: tuple) -> Tensor:
    """`t` summed back to `shape`, from which it was broadcast (`t` itself if it has it)."""
    shape, t_shape = tuple(shape), t.shape
    if t_shape == shape:
        return t
    lead = len(t_shape) - len(shape)
    if lead < 0 or any(s != 1 and t_shape[lead + i] != s for i, s in enumerate(shape)):
        raise ValueError(f"cannot sum shape {t_shape} to shape {shape}")
    axes = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(shape) if s == 1 and t_shape[lead + i] != 1
    )
    return SumToShape(shape, axes)(t)


class Max(TensorOp):
    """Maximum over `axes`; the adjoint is shared equally by the maximal entries."""

    def __init__(self, axes=None, keepdims: bool = False):
        self.axes = (axes,) if isinstance(axes, int) else axes
        self.keepdims = keepdims

    def compute(self, a):
        return namespace(a).max(a, axis=self.axes, keepdims=self.keepdims)

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


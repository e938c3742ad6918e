"""Reductions that need no gradient: argmax and argmin (int64 indices) and the minimum of
integer or bool tensors (a floating minimum is -max(-x), differentiable)."""

from __future__ import annotations

from typing import Any

from ..autograd.tensor import Tensor, TensorOp
from ..backends import namespace
from ..grad_mode import no_grad
from .axes import normalize_axes
from .dtypes import is_bool


class NoGradReduce(TensorOp):
    """argmax or argmin (`name`) along the int `axis`, or min over `axis` (int or tuple);
    None: over every element (argmax and argmin index the flattened tensor)."""

    def __init__(self, name: str, axis: Any = None, keepdims: bool = False):
        if name != "min" and not (axis is None or hasattr(axis, "__index__")):
            raise TypeError(f"{name}: dim must be an int or None, got {axis!r}")
        self.name, self.axis, self.keepdims = name, axis, keepdims

    def compute(self, a):
        xp, shape, name = namespace(a), tuple(a.shape), self.name
        axes = normalize_axes(name, self.axis, shape)
        if any(shape[ax] == 0 for ax in axes):
            raise ValueError(f"{name}: cannot reduce over an empty axis (shape {shape}, dim "
                             f"{self.axis}): no element to pick")
        axis = None if self.axis is None else axes
        if name == "min":  # (strict takes no bools: their minimum is all)
            return (xp.all if is_bool(a) else xp.min)(a, axis=axis, keepdims=self.keepdims)
        if is_bool(a):  # numpy's, torch's and jax's False < True (strict takes no bools)
            a = xp.astype(a, xp.int8)
        fn = xp.argmax if name == "argmax" else xp.argmin
        # (the default index dtype: int64; int32 on jax without 64-bit types)
        if axis is not None:
            return fn(a, axis=axis[0], keepdims=self.keepdims)
        out = fn(xp.reshape(a, (-1,)), axis=0)  # the index into the flattened tensor
        return xp.reshape(out, (1,) * len(shape)) if self.keepdims else out

    def gradient(self, out_grad, node):
        return (None,)  # (never asked: the output needs no gradient)


def no_grad_reduce(name: str, a: Tensor, axis: Any = None, keepdims: bool = False) -> Any:
    """`name` ("argmax", "argmin" or "min") of `a` along `axis`, recorded without a gradient."""
    with no_grad():
        return NoGradReduce(name, axis, keepdims)(a)

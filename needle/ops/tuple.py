"""Tuple-valued ops: make_tuple, tuple_get_item, fused_add_scalars, stack and split."""

from __future__ import annotations

from ..autograd import Tensor, TensorOp, TensorTuple, TensorTupleOp, ZeroAdjoint
from ..backends import namespace
from .axes import normalize_axis
from .elementwise import as_scalar


class MakeTensorTuple(TensorTupleOp):
    """Bundle tensors into a TensorTuple."""

    def compute(self, *args):
        return tuple(args)

    def gradient(self, out_grad, node):
        return tuple(out_grad[i] for i in range(len(node.inputs)))


def make_tuple(*args: Tensor) -> TensorTuple:
    """A TensorTuple of the given tensors."""
    return MakeTensorTuple()(*args)


class TupleGetItem(TensorOp):
    """Element `index` of a TensorTuple."""

    def __init__(self, index: int):
        self.index = index

    def __call__(self, a: TensorTuple) -> Tensor:
        if isinstance(a.op, MakeTensorTuple):
            return a.inputs[self.index]  # no node for make_tuple(...)[i]
        return Tensor.make_from_op(self, [a])

    def compute(self, a):
        return a[self.index]

    def gradient(self, out_grad, node):
        index = self.index
        parts = []
        for i, value in enumerate(node.inputs[0].realize_cached_data()):
            if i == index:
                parts.append(out_grad)
            else:
                parts.append(ZeroAdjoint.make_const(namespace(value).zeros_like(value),
                                                    device=node.device))
        return make_tuple(*parts)


def tuple_get_item(value: TensorTuple, index: int) -> Tensor:
    """Element `index` of a TensorTuple."""
    return TupleGetItem(index)(value)


class FusedAddScalars(TensorTupleOp):
    """(a + c0, a + c1) in one op."""

    def __init__(self, c0, c1):
        self.c0 = as_scalar(c0, "fused_add_scalars")
        self.c1 = as_scalar(c1, "fused_add_scalars")

    def compute(self, a):
        return a + self.c0, a + self.c1

    def gradient(self, out_grad, node):
        return out_grad[0] + out_grad[1]


def fused_add_scalars(x: Tensor, c0, c1) -> TensorTuple:
    """The tuple (x + c0, x + c1)."""
    return FusedAddScalars(c0, c1)(x)


class Stack(TensorOp):
    """Stack a TensorTuple of equally shaped tensors along a new axis."""

    def __init__(self, axis: int):
        self.axis = axis

    def compute(self, args):
        if not args:
            raise ValueError("stack: needs at least one tensor, got none")
        shapes = {tuple(a.shape) for a in args}
        if len(shapes) > 1:
            raise ValueError(f"stack: tensors must share one shape, got {sorted(shapes)}")
        shape = tuple(args[0].shape)  # the new axis makes one more: -(ndim+1)..ndim
        axis = normalize_axis("stack", self.axis, shape, len(shape) + 1)
        return namespace(args[0]).stack(args, axis=axis)

    def gradient(self, out_grad, node):
        return split(out_grad, self.axis)


def stack(args, axis: int) -> Tensor:
    """Stack tensors along a new axis."""
    tensors = list(args)
    if not tensors:
        raise ValueError(f"stack: needs at least one tensor, got {args!r}")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"stack: expected Tensors, got {type(t).__name__} at position {i}")
    return Stack(axis)(make_tuple(*tensors))


class Split(TensorTupleOp):
    """Split a tensor along `axis` into a TensorTuple (removing that axis)."""

    def __init__(self, axis: int):
        self.axis = axis

    def compute(self, a):
        return tuple(namespace(a).unstack(a, axis=normalize_axis("split", self.axis, a.shape)))

    def gradient(self, out_grad, node):
        return Stack(self.axis)(out_grad)


def split(a: Tensor, axis: int) -> TensorTuple:
    """Split along `axis` into a TensorTuple of tensors without that axis."""
    return Split(axis)(a)

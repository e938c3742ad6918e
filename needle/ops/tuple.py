"""Tuple-valued ops: make_tuple, tuple_get_item, fused_add_scalars, stack and split."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..autograd.graph import Value
from ..autograd.tensor import Tensor, TensorOp
from ..autograd.tensor_tuple import OneHotAdjoint, TensorTuple, TensorTupleOp
from ..backends import namespace
from .axes import normalize_axis
from .dtypes import promote
from .elementwise import AddN
from .scalar import as_scalar


def _one_adjoint(adjoint: Any) -> Any:
    """A TensorTuple input's adjoint as a gradient returns it: on raw arrays a tuple of arrays,
    so in a 1-tuple (the engine reads a tuple as one adjoint per input)."""
    return adjoint if isinstance(adjoint, Value) else (adjoint,)


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
        if not isinstance(a, Value):  # a tuple of arrays
            return a[self.index]
        if isinstance(a.op, MakeTensorTuple):
            return a.inputs[self.index]  # no node for make_tuple(...)[i]
        return Tensor.make_from_op(self, [a])

    def compute(self, a):
        return a[self.index]

    def gradient(self, out_grad, node):
        source = node.inputs[0]
        if not isinstance(source, Value):  # raw arrays: what OneHotTuple gives them, without
            out: list = [None] * len(source)  # the (shape, dtype) of every element (a loop
            out[self.index] = out_grad  # over all T steps of a split, for each step)
            return (tuple(out),)
        like = tuple((tuple(v.shape), v.dtype) for v in source._array)
        return _one_adjoint(OneHotTuple(self.index, like)(out_grad))


class OneHotTuple(TensorTupleOp):
    """The adjoint TupleGetItem(index) gives its TensorTuple: `a` at `index` and zeros at the
    other places, one zeros array per distinct (shape, dtype) shared by them (adjoints are
    never written in place). Tuple adjoints are added by picking `a` alone, so T steps of a
    split cost T nodes backward, not T^2 zeros. On a raw array `a` it gives a tuple with
    None for the zeros, which `sum_tuple_adjoints` fills in."""

    def __init__(self, index: int, like: tuple):
        self.index = index
        self.like = like  # (shape, dtype) of every element

    def __call__(self, a: Tensor) -> OneHotAdjoint:
        if not isinstance(a, Value):
            out: list = [None] * len(self.like)  # None: a zero element
            out[self.index] = a
            return tuple(out)
        value = OneHotAdjoint.make_from_op(self, (a,))
        value.index, value.element = self.index, a  # what the engine adds, graph or not
        return value

    def compute(self, a):
        xp = namespace(a)
        zeros: dict = {}
        out = []
        for i, (shape, dtype) in enumerate(self.like):
            if i == self.index:
                out.append(a)
                continue
            zero = zeros.get((shape, dtype))
            if zero is None:
                zero = zeros[(shape, dtype)] = xp.zeros(shape, dtype=dtype,
                                                        device=getattr(a, "device", None))
            out.append(zero)
        return tuple(out)

    def gradient(self, out_grad, node):
        return tuple_get_item(out_grad, self.index)


def tuple_get_item(value: TensorTuple, index: int) -> Tensor:
    """Element `index` of a TensorTuple."""
    return TupleGetItem(index)(value)


def sum_tuple_adjoints(partials: list, node: TensorTuple) -> Any:
    """The elementwise sum of the partial adjoints of the TensorTuple `node`, one AddN per
    element, zeros left out: TensorTuples while a graph is recorded, else tuples of arrays
    (None: zeros). Each of T `split(x)[t]` contributes a one-hot adjoint, zero but for
    element t: added tuple by tuple that would be T^2 additions, here it is T picks."""
    columns: list[list] = [[] for _ in node._array]
    for partial in partials:
        if partial.__class__ is tuple:
            elems = partial
        elif partial.__class__ is OneHotAdjoint:
            elems = [None] * len(columns)
            elems[partial.index] = partial.element
        elif isinstance(partial.op, MakeTensorTuple):
            elems = partial.inputs
        else:
            elems = partial.tuple()
        for column, elem in zip(columns, elems):
            if elem is not None:
                column.append(elem)
    raw = partials[0].__class__ is tuple
    summed = []
    for i, column in enumerate(columns):
        if not column:  # no partial reached this element: its zeros
            data = node._array[i]
            column = [node.device.xp.zeros_like(data) if raw else partials[0][i]]
        summed.append(column[0] if len(column) == 1 else AddN()(*column))
    return tuple(summed) if raw else make_tuple(*summed)


class FusedAddScalars(TensorTupleOp):
    """(a + c0, a + c1) in one op."""

    def __init__(self, c0, c1):
        self.c0 = as_scalar(c0, "fused_add_scalars")
        self.c1 = as_scalar(c1, "fused_add_scalars")

    def compute(self, a):
        return a + self.c0, a + self.c1

    def gradient(self, out_grad, node):
        return out_grad[0] + out_grad[1]


def fused_add_scalars(x: Tensor, c0: Any, c1: Any) -> TensorTuple:
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
        return _one_adjoint(split(out_grad, self.axis))


def stack(args: Iterable[Any], axis: int) -> Tensor:
    """Stack tensors along a new axis."""
    if isinstance(args, Tensor):  # (its rows would be stacked back; a TensorTuple is fine)
        raise TypeError(f"stack: expected a sequence of tensors, got a {type(args).__name__}"
                        f" of shape {args.shape}")
    tensors = list(args)
    if not tensors:
        raise ValueError(f"stack: needs at least one tensor, got {args!r}")
    if not any(isinstance(t, Value) for t in tensors):  # raw arrays (a gradient rule's)
        return Stack(axis)(tuple(tensors))
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"stack: expected Tensors, got {type(t).__name__} at position {i}")
    return Stack(axis)(make_tuple(*promote("stack", tuple(tensors))))


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

"""Elementwise arithmetic: with tensors (broadcasting) and with Python scalars."""

from __future__ import annotations

from typing import Any

from ..autograd.graph import Value, array_function, array_of
from ..autograd.tensor import Tensor, TensorOp, constant_like
from ..backends import device_of, namespace
from ..kernels import ADD_TO_FRESH, Kernel
from .dtypes import (
    PromotingOp,
    check_not_bool,
    is_bool,
    kind_name,
    promote,
)
from .movement import reshape, sum_to_shape
from .reduce import summation
from .scalar import check_int_exponents
from .unary import log


def unbroadcast(adjoint: Any, x: Any) -> Any:
    """An adjoint summed back to the shape of the input `x` it belongs to (itself if equal);
    Tensors or raw arrays alike."""
    if adjoint is None:
        return None
    shape = array_of(x).shape
    if array_of(adjoint).shape == shape:  # the common case, kept cheap
        return adjoint
    return sum_to_shape(adjoint, tuple(shape))


def _promoted(op: str, a: Any, b: Any) -> tuple:
    """(a, b) with Tensors of different dtypes promoted (raw arrays as they are)."""
    if isinstance(a, Value) and isinstance(b, Value) and a._array.dtype is not b._array.dtype:
        return promote(op, (a, b))  # (strict's never differ)
    return a, b


def check_broadcast(op: str, a: Any, b: Any) -> None:
    """ValueError naming both shapes unless they broadcast (checked here, not by the library:
    numpy raises ValueError, torch RuntimeError, jax TypeError)."""
    sa, sb = a.shape, b.shape
    if sa == sb:
        return
    for m, n in zip(reversed(sa), reversed(sb)):
        if m != n and m != 1 and n != 1:
            raise ValueError(f"{op}: shapes {tuple(sa)} and {tuple(sb)} are not broadcastable "
                             f"(sizes {m} and {n} from the right)")


class EWiseAdd(TensorOp):
    """a + b (of bools: logical or)."""

    def __call__(self, a: Tensor, b: Tensor) -> Tensor:
        return Tensor.make_from_op(self, _promoted("add", a, b))

    def compute(self, a, b):
        if a.shape != b.shape:  # (inline: the equal-shape case is the hot one)
            check_broadcast("add", a, b)
        try:
            return a + b
        except TypeError:  # strict refuses bools: logical or, numpy's, torch's and jax's b + b
            if not (is_bool(a) and is_bool(b)):
                raise
            return namespace(a).logical_or(a, b)

    def gradient(self, out_grad, node):
        a, b = node.inputs
        if (a._array.shape == b._array.shape if isinstance(a, Value)  # no broadcasting
                else a.shape == b.shape):
            return out_grad, out_grad
        need_a, need_b = node.needs_input_grad
        return (unbroadcast(out_grad, a) if need_a else None,
                unbroadcast(out_grad, b) if need_b else None)


def add(a: Tensor, b: Tensor) -> Tensor:
    """a + b, broadcasting."""
    return EWiseAdd()(a, b)


def add_n_portable(first: Any, *rest: Any) -> Any:
    """a0 + a1 + ..., left to right: the first sum is fresh, the rest are added into it (in
    place where ADD_TO_FRESH allows)."""
    out = first
    add = None
    for a in rest:
        if a.shape != out.shape:
            check_broadcast("add_n", out, a)
        if add is None:
            out = out + a
            add = ADD_TO_FRESH.on(out)
        else:
            out = add(out, a)
    return out


#: AddN's sum (the engine's sum of a value's partial adjoints): on the cpu one loop of
#: in-place adds, with no Python call or shape test per array
ADD_N = Kernel("add_n", add_n_portable, fast={"cpu": "needle.backends.add_to_fresh:add_n_cpu"})


class AddN(TensorOp):
    """a0 + a1 + ... in one node (the engine sums partial adjoints with it: they have their
    input's dtype, so it leaves promotion to `add_n`)."""

    def compute(self, *arrays):
        if len(arrays) == 1:
            return arrays[0]
        try:
            return ADD_N(*arrays)
        except TypeError:  # strict refuses bools: logical or, as EWiseAdd
            if not all(is_bool(a) for a in arrays):
                raise
            out, xp = arrays[0], namespace(arrays[0])
            for a in arrays[1:]:
                out = xp.logical_or(out, a)
            return out

    def gradient(self, out_grad, node):
        return tuple(unbroadcast(out_grad, x) if need else None
                     for x, need in zip(node.inputs, node.needs_input_grad))


def add_n(*tensors: Tensor) -> Tensor:
    """The sum of any number of tensors, as one node."""
    if not tensors:
        raise TypeError("add_n: needs at least one tensor")
    return tensors[0] if len(tensors) == 1 else AddN()(*promote("add_n", tensors))


class ScaleShift(PromotingOp):
    """x * w + b in one node (the affine half of a normalisation layer), broadcasting; with
    `axis`, w and b are vectors along that axis of x (BatchNorm2d's channels of NCHW).

    The shift is added to the product's fresh array (in place where the device allows); the
    gradient is (g w, sum(g x), sum(g)), each summed back to its input's shape, needle ops.
    """

    op_name = "scale_shift"

    def __init__(self, axis: int | None = None):
        self.axis = axis

    def _along_axis(self, x, v, what: str):
        """The vector `v` shaped to broadcast along `axis` of x."""
        axis, shape = self.axis, tuple(x.shape)
        if not 0 <= axis < len(shape):
            raise ValueError(f"scale_shift: axis {axis} is out of range for an input of shape "
                             f"{shape}")
        if tuple(v.shape) != (shape[axis],):
            raise ValueError(f"scale_shift: the {what} must have shape ({shape[axis]},) along "
                             f"axis {axis} of an input of shape {shape}, found {tuple(v.shape)}")
        return namespace(v).reshape(v, (-1,) + (1,) * (len(shape) - axis - 1))

    def compute(self, x, w, b):
        if self.axis is not None:
            w, b = self._along_axis(x, w, "scale"), self._along_axis(x, b, "shift")
        check_broadcast("scale_shift", x, w)
        out = x * w
        check_broadcast("scale_shift", out, b)
        return ADD_TO_FRESH(out, b)

    def gradient(self, out_grad, node):
        x, w, b = node.inputs
        need_x, need_w, need_b = node.needs_input_grad
        if self.axis is None:
            return (unbroadcast(out_grad * w, x) if need_x else None,
                    unbroadcast(out_grad * x, w) if need_w else None,
                    unbroadcast(out_grad, b) if need_b else None)
        ndim = len(x.shape)
        others = tuple(i for i in range(ndim) if i != self.axis)
        along = (-1,) + (1,) * (ndim - self.axis - 1)
        return (out_grad * reshape(w, along) if need_x else None,
                summation(out_grad * x, others) if need_w else None,
                summation(out_grad, others) if need_b else None)


def scale_shift(x: Tensor, w: Tensor, b: Tensor, axis: int | None = None) -> Tensor:
    """x * w + b as one node; with `axis`, w and b are vectors along that axis of x."""
    return ScaleShift(axis)(x, w, b)


class EWiseMul(TensorOp):
    """a * b (of bools: logical and)."""

    def __call__(self, a: Tensor, b: Tensor) -> Tensor:
        return Tensor.make_from_op(self, _promoted("multiply", a, b))

    def compute(self, a, b):
        if a.shape != b.shape:  # (inline: the equal-shape case is the hot one)
            check_broadcast("multiply", a, b)
        try:
            return a * b
        except TypeError:  # strict refuses bools: logical and, as the others take b * b
            if not (is_bool(a) and is_bool(b)):
                raise
            return namespace(a).logical_and(a, b)

    def gradient(self, out_grad, node):
        a, b = node.inputs
        # no multiply for an operand that needs no gradient (a mask, a one-hot matrix)
        need_a, need_b = node.needs_input_grad
        if (a._array.shape == b._array.shape if isinstance(a, Value)  # no broadcasting
                else a.shape == b.shape):
            return (out_grad * b if need_a else None, out_grad * a if need_b else None)
        return (unbroadcast(out_grad * b, a) if need_a else None,
                unbroadcast(out_grad * a, b) if need_b else None)


def multiply(a: Tensor, b: Tensor) -> Tensor:
    """a * b, broadcasting."""
    return EWiseMul()(a, b)


class EWisePow(PromotingOp):
    """a ** b, elementwise."""

    op_name = "power"

    def compute(self, a, b):
        check_broadcast("power", a, b)
        check_int_exponents("power", b)
        try:
            out = namespace(a).pow(a, b)
        except (TypeError, NotImplementedError):  # strict's and torch's bools
            check_not_bool("power", a, b)
            raise
        if out.dtype is not a.dtype:  # bools: int8 on numpy, int32 on jax
            check_not_bool("power", a, b)
        return out

    def gradient(self, out_grad, node):
        # d/da a^b = b a^(b-1);  d/db a^b = a^b log a. Where a == 0 both would be 0 * inf
        # = NaN at points PyTorch defines as 0: there a is replaced by 1 (a constant shift).
        a, b = node.inputs
        a_data, b_data = array_of(a), array_of(b)
        need_a, need_b = node.needs_input_grad
        grad_a = grad_b = None
        if need_a:  # 0 where b == 0
            one = constant_like(out_grad, _zero_base(a_data, b_data, True))
            grad_a = unbroadcast(out_grad * b * power(a + one, b - 1), a)
        if need_b:  # 0 where b >= 0 (a^b is 0 or 1 there)
            one = constant_like(out_grad, _zero_base(a_data, b_data, False))
            grad_b = unbroadcast(out_grad * node.result * log(a + one), b)
        return grad_a, grad_b


@array_function
def _zero_base(a, b, exponent_zero: bool):
    """1 where a == 0 and (b == 0 if exponent_zero else b >= 0), else 0, in a's dtype."""
    xp = namespace(a)
    where_b = b == 0 if exponent_zero else b >= 0
    return xp.astype((a == 0) & where_b, a.dtype)


def power(a: Tensor, b: Tensor) -> Tensor:
    """a ** b, elementwise, broadcasting."""
    return EWisePow()(a, b)


class EWiseDiv(PromotingOp):
    """a / b (true division: floating tensors)."""

    op_name = "divide"

    def compute(self, a, b):
        check_broadcast("divide", a, b)
        try:
            out = a / b
        except TypeError:  # strict: integer true division
            out = None
        if out is None or out.dtype is not a.dtype and out.dtype != a.dtype:
            name = device_of(a).public_dtype(a.dtype).name
            raise TypeError(f"divide: true division needs floating tensors, got {name} "
                            f"({kind_name(name)}); convert them first, e.g. with "
                            "ndl.ops.astype(x, \"float32\")")
        return out

    def gradient(self, out_grad, node):
        a, b = node.inputs
        need_a, need_b = node.needs_input_grad
        # d/db a/b = -a / b^2
        return (unbroadcast(out_grad / b, a) if need_a else None,
                unbroadcast(-(out_grad * a) / (b * b), b) if need_b else None)


def divide(a: Tensor, b: Tensor) -> Tensor:
    """a / b, broadcasting."""
    return EWiseDiv()(a, b)


class Negate(TensorOp):
    """-a."""

    def compute(self, a):
        try:
            return -a
        except (TypeError, RuntimeError):  # bools (torch: RuntimeError)
            check_not_bool("negate (in -x and in a - x)", a)
            raise

    def gradient(self, out_grad, node):
        return -out_grad


def negate(a: Tensor) -> Tensor:
    """-a."""
    return Negate()(a)

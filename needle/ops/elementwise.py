"""Elementwise ops: arithmetic with tensors and with Python scalars, and unary functions."""

from __future__ import annotations

import math
from typing import Any

from ..autograd.graph import Value, array_function, array_of
from ..autograd.tensor import Tensor, TensorOp, constant_like
from ..backends import device_of, namespace
from .dtypes import (
    PromotingOp,
    check_scalar_result,
    floating_only,
    kind_name,
    promote,
    scalar_error,
)
from .movement import sum_to_shape


def as_scalar(value: Any, op: str = "scalar op") -> int | float | bool:
    """A Python number from a number, a numpy scalar or any one-element array.

    (The arithmetic scalar ops take a bool as the int it equals, True as 1, so it takes a
    numeric tensor's dtype on every device: strict refuses bools there.)

    Arrays become Python numbers, which every namespace (strict included) accepts and which
    keep the tensor's dtype; larger arrays raise TypeError (they belong in a Tensor).
    """
    kind = type(value)
    if kind is float or kind is int or kind is bool:
        return value
    if isinstance(value, Tensor):
        raise TypeError(f"{op}: expected a number, got a Tensor (use the elementwise op)")
    shape = getattr(value, "shape", None)
    if shape is not None:
        if math.prod(shape) != 1:
            raise TypeError(f"{op}: expected a number or a one-element array, got an array of "
                            f"shape {tuple(shape)}; use a Tensor for an elementwise operand")
        return _item(value)
    if isinstance(value, int):  # subclasses of int and float (bool has none)
        return int(value)
    if isinstance(value, float):
        return float(value)
    raise TypeError(f"{op}: expected a Tensor or a Python number, got {kind.__name__}")


def _item(array: Any) -> int | float | bool | complex:
    """The Python number in a one-element array of any namespace."""
    if hasattr(array, "item"):
        return array.item()
    xp = array.__array_namespace__()
    array = xp.reshape(array, ())
    for kind, cast in (("bool", bool), ("integral", int), ("real floating", float)):
        if xp.isdtype(array.dtype, kind):
            return cast(array)
    return complex(array)


def unbroadcast(adjoint: Any, x: Any) -> Any:
    """An adjoint summed back to the shape of the input `x` it belongs to (itself if equal);
    Tensors or raw arrays alike."""
    if adjoint is None:
        return None
    shape = array_of(x).shape
    if array_of(adjoint).shape == shape:  # the common case, kept cheap
        return adjoint
    return sum_to_shape(adjoint, tuple(shape))


def _same_shape(a: Any, b: Any) -> bool:
    """Whether two Tensors (or two arrays) have one shape."""
    if isinstance(a, Value):
        return a._array.shape == b._array.shape
    return a.shape == b.shape


def _promoted(op: str, a: Any, b: Any) -> tuple:
    """(a, b) with Tensors of different dtypes promoted (raw arrays as they are)."""
    if isinstance(a, Value) and isinstance(b, Value) and a._array.dtype is not b._array.dtype:
        return promote(op, (a, b))  # (strict's never differ)
    return a, b


def check_broadcast(op: str, a, b) -> None:
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
    """a + b."""

    def __call__(self, a: Tensor, b: Tensor) -> Tensor:
        return Tensor.make_from_op(self, _promoted("add", a, b))

    def compute(self, a, b):
        if a.shape != b.shape:  # (inline: the equal-shape case is the hot one)
            check_broadcast("add", a, b)
        return a + b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        if _same_shape(a, b):  # no broadcasting
            return out_grad, out_grad
        need_a, need_b = node.needs_input_grad
        return (unbroadcast(out_grad, a) if need_a else None,
                unbroadcast(out_grad, b) if need_b else None)


def add(a: Tensor, b: Tensor) -> Tensor:
    """a + b, broadcasting."""
    return EWiseAdd()(a, b)


class AddN(TensorOp):
    """a0 + a1 + ... in one node (the engine sums partial adjoints with it: they have their
    input's dtype, so it leaves promotion to `add_n`)."""

    def compute(self, *arrays):
        out = arrays[0]
        add = None
        for a in arrays[1:]:
            if a.shape != out.shape:
                check_broadcast("add_n", out, a)
            if add is None:
                out = out + a  # fresh: the rest are added into it (in place where allowed)
                add = device_of(out).add_to_fresh
            else:
                out = add(out, a)
        return out

    def gradient(self, out_grad, node):
        return tuple(unbroadcast(out_grad, x) if need else None
                     for x, need in zip(node.inputs, node.needs_input_grad))


def add_n(*tensors: Tensor) -> Tensor:
    """The sum of any number of tensors, as one node."""
    return tensors[0] if len(tensors) == 1 else AddN()(*promote("add_n", tensors))


class ScaleShift(PromotingOp):
    """x * w + b in one node (the affine half of a normalisation layer), broadcasting.

    The shift is added to the product's fresh array (in place where the device allows); the
    gradient is (g w, sum(g x), sum(g)), each summed back to its input's shape, needle ops.
    """

    op_name = "scale_shift"

    def compute(self, x, w, b):
        check_broadcast("scale_shift", x, w)
        out = x * w
        check_broadcast("scale_shift", out, b)
        return device_of(out).add_to_fresh(out, b)

    def gradient(self, out_grad, node):
        x, w, b = node.inputs
        need_x, need_w, need_b = node.needs_input_grad
        return (unbroadcast(out_grad * w, x) if need_x else None,
                unbroadcast(out_grad * x, w) if need_w else None,
                unbroadcast(out_grad, b) if need_b else None)


def scale_shift(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """x * w + b as one node."""
    return ScaleShift()(x, w, b)


class AddScalar(TensorOp):
    """a + scalar."""

    def __init__(self, scalar):
        scalar = as_scalar(scalar, "add_scalar")
        self.scalar = int(scalar) if scalar.__class__ is bool else scalar  # True: 1

    def compute(self, a):
        try:
            out = a + self.scalar
        except TypeError:  # strict refuses what the others promote
            raise scalar_error("add_scalar", a, self.scalar) from None
        if out.dtype is not a.dtype:
            check_scalar_result("add_scalar", a, self.scalar, out)
        return out

    def gradient(self, out_grad, node):
        return out_grad


def add_scalar(a: Tensor, scalar) -> Tensor:
    """a + scalar."""
    return AddScalar(scalar)(a)


class EWiseMul(TensorOp):
    """a * b."""

    def __call__(self, a: Tensor, b: Tensor) -> Tensor:
        return Tensor.make_from_op(self, _promoted("multiply", a, b))

    def compute(self, a, b):
        if a.shape != b.shape:  # (inline: the equal-shape case is the hot one)
            check_broadcast("multiply", a, b)
        return a * b

    def gradient(self, out_grad, node):
        a, b = node.inputs
        # no multiply for an operand that needs no gradient (a mask, a one-hot matrix)
        need_a, need_b = node.needs_input_grad
        if _same_shape(a, b):  # no broadcasting
            return (out_grad * b if need_a else None, out_grad * a if need_b else None)
        return (unbroadcast(out_grad * b, a) if need_a else None,
                unbroadcast(out_grad * a, b) if need_b else None)


def multiply(a: Tensor, b: Tensor) -> Tensor:
    """a * b, broadcasting."""
    return EWiseMul()(a, b)


class MulScalar(TensorOp):
    """a * scalar."""

    def __init__(self, scalar):
        scalar = as_scalar(scalar, "mul_scalar")
        self.scalar = int(scalar) if scalar.__class__ is bool else scalar  # True: 1

    def compute(self, a):
        try:
            out = a * self.scalar
        except TypeError:  # strict refuses what the others promote
            raise scalar_error("mul_scalar", a, self.scalar) from None
        if out.dtype is not a.dtype:
            check_scalar_result("mul_scalar", a, self.scalar, out)
        return out

    def gradient(self, out_grad, node):
        return out_grad * self.scalar


def mul_scalar(a: Tensor, scalar) -> Tensor:
    """a * scalar."""
    return MulScalar(scalar)(a)


class EWisePow(PromotingOp):
    """a ** b, elementwise."""

    op_name = "power"

    def compute(self, a, b):
        check_broadcast("power", a, b)
        return namespace(a).pow(a, b)

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


class PowerScalar(TensorOp):
    """a ** scalar."""

    def __init__(self, scalar):
        scalar = as_scalar(scalar, "power_scalar")
        self.scalar = int(scalar) if scalar.__class__ is bool else scalar  # True: 1

    def compute(self, a):
        try:
            out = a**self.scalar
        except TypeError:  # strict refuses what the others promote
            raise scalar_error("power_scalar", a, self.scalar) from None
        if out.dtype is not a.dtype:
            check_scalar_result("power_scalar", a, self.scalar, out)
        return out

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        if self.scalar == 0:
            return out_grad * 0
        return out_grad * self.scalar * a ** (self.scalar - 1)


def power_scalar(a: Tensor, scalar) -> Tensor:
    """a ** scalar."""
    return PowerScalar(scalar)(a)


class RPowerScalar(TensorOp):
    """scalar ** a."""

    def __init__(self, scalar):
        scalar = as_scalar(scalar, "rpower_scalar")
        self.scalar = int(scalar) if scalar.__class__ is bool else scalar  # True: 1

    def compute(self, a):
        try:
            out = self.scalar**a
        except TypeError:  # strict refuses what the others promote
            raise scalar_error("rpower_scalar", a, self.scalar) from None
        if out.dtype is not a.dtype:
            check_scalar_result("rpower_scalar", a, self.scalar, out)
        return out

    def gradient(self, out_grad, node):
        # d/da c^a = c^a log c. As PyTorch: NaN for c < 0 (no real log); for c == 0, 0 where
        # a >= 0 (c^a is 0 or 1 there) and -inf where a < 0
        c = self.scalar
        if c != 0:
            return out_grad * node.result * (math.log(c) if c > 0 else math.nan)
        log_c = _log_zero_base(array_of(node.result), array_of(node.inputs[0]))
        return out_grad * node.result * constant_like(out_grad, log_c)


@array_function
def _log_zero_base(out, a):
    """"log 0" as PyTorch takes it in d/da 0^a: -inf where a < 0, else 0 (out's shape)."""
    xp = namespace(out)
    return xp.where(a < 0, xp.full_like(out, -math.inf), xp.zeros_like(out))


def rpower_scalar(a: Tensor, scalar) -> Tensor:
    """scalar ** a, elementwise (`scalar ** tensor`)."""
    return RPowerScalar(scalar)(a)


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


class DivScalar(TensorOp):
    """a / scalar."""

    def __init__(self, scalar):
        scalar = as_scalar(scalar, "divide_scalar")
        self.scalar = int(scalar) if scalar.__class__ is bool else scalar  # True: 1

    def compute(self, a):
        try:
            out = a / self.scalar
        except TypeError:  # strict refuses what the others promote
            raise scalar_error("divide", a, self.scalar) from None
        if out.dtype is not a.dtype:
            check_scalar_result("divide", a, self.scalar, out)
        return out

    def gradient(self, out_grad, node):
        return out_grad / self.scalar


def divide_scalar(a: Tensor, scalar) -> Tensor:
    """a / scalar."""
    return DivScalar(scalar)(a)


class Negate(TensorOp):
    """-a."""

    def compute(self, a):
        return -a

    def gradient(self, out_grad, node):
        return -out_grad


def negate(a: Tensor) -> Tensor:
    """-a."""
    return Negate()(a)


class Log(TensorOp):
    """Natural logarithm."""

    def compute(self, a):
        return floating_only("log", namespace(a).log, a)

    def gradient(self, out_grad, node):
        return out_grad / node.inputs[0]  # d/da log a = 1/a


def log(a: Tensor) -> Tensor:
    """Elementwise natural logarithm."""
    return Log()(a)


class Exp(TensorOp):
    """e ** a."""

    def compute(self, a):
        return floating_only("exp", namespace(a).exp, a)

    def gradient(self, out_grad, node):
        return out_grad * node.result  # d/da e^a = e^a


def exp(a: Tensor) -> Tensor:
    """Elementwise e ** a."""
    return Exp()(a)


class ReLU(TensorOp):
    """max(a, 0)."""

    def compute(self, a):
        return namespace(a).maximum(a, 0)

    def gradient(self, out_grad, node):
        mask = _positive(array_of(node.inputs[0]))  # the derivative, a constant
        return out_grad * constant_like(out_grad, mask)


@array_function
def _positive(a):
    """1 where a > 0, else 0, in a's dtype (ReLU's derivative)."""
    return namespace(a).astype(a > 0, a.dtype)


def relu(a: Tensor) -> Tensor:
    """Elementwise max(a, 0)."""
    return ReLU()(a)


class Tanh(TensorOp):
    """Hyperbolic tangent."""

    def compute(self, a):
        return floating_only("tanh", namespace(a).tanh, a)

    def gradient(self, out_grad, node):
        return out_grad * (1 - node.result**2)  # d/da tanh a = 1 - tanh^2 a


def tanh(a: Tensor) -> Tensor:
    """Elementwise tanh."""
    return Tanh()(a)


def _sigmoid_formula(x):
    return (namespace(x).tanh(x * 0.5) + 1) * 0.5


class Sigmoid(TensorOp):
    """1 / (1 + e^-a), computed as (1 + tanh(a/2)) / 2 so it never overflows."""

    def compute(self, a):
        return floating_only("sigmoid", _sigmoid_formula, a)

    def gradient(self, out_grad, node):
        y = node.result
        return out_grad * y * (1 - y)  # s' = s (1 - s)


def sigmoid(a: Tensor) -> Tensor:
    """Elementwise logistic sigmoid."""
    return Sigmoid()(a)

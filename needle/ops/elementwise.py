"""Elementwise ops: arithmetic with tensors and with Python scalars, and unary functions."""

from __future__ import annotations

import math
from typing import Any

from ..autograd import Tensor, TensorOp
from ..backends import namespace


def as_scalar(value: Any) -> int | float | bool:
    """A Python number for a scalar operand (numpy scalars would upset strict namespaces)."""
    kind = type(value)
    if kind is float or kind is int or kind is bool:
        return value
    if isinstance(value, Tensor):
        raise TypeError("expected a Python number, got a Tensor (use the elementwise op)")
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        return value.item()  # numpy scalar or 0-d array
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    raise TypeError(f"expected a Tensor or a Python number, got {kind.__name__}")


def math_log(value: Any) -> float:
    """log of a Python number."""
    return math.log(as_scalar(value))


def shape_error(op: str, a, b, error: Exception) -> ValueError:
    """The ValueError for operands whose shapes do not broadcast, naming both shapes."""
    return ValueError(f"{op}: shapes {tuple(a.shape)} and {tuple(b.shape)} are not "
                      f"broadcastable ({error})")


class EWiseAdd(TensorOp):
    """a + b."""

    def compute(self, a, b):
        try:
            return a + b
        except ValueError as e:
            raise shape_error("add", a, b, e) from None

    def gradient(self, out_grad, node):
        return out_grad, out_grad


def add(a: Tensor, b: Tensor) -> Tensor:
    """a + b, broadcasting."""
    return EWiseAdd()(a, b)


class AddN(TensorOp):
    """a0 + a1 + ... in one node (the engine sums partial adjoints with it)."""

    def compute(self, *arrays):
        out = arrays[0]
        for a in arrays[1:]:
            try:
                out = out + a
            except ValueError as e:
                raise shape_error("add_n", out, a, e) from None
        return out

    def gradient(self, out_grad, node):
        return (out_grad,) * len(node.inputs)


def add_n(*tensors: Tensor) -> Tensor:
    """The sum of any number of tensors, as one node."""
    return tensors[0] if len(tensors) == 1 else AddN()(*tensors)


class AddScalar(TensorOp):
    """a + scalar."""

    def __init__(self, scalar):
        self.scalar = as_scalar(scalar)

    def compute(self, a):
        return a + self.scalar

    def gradient(self, out_grad, node):
        return out_grad


def add_scalar(a: Tensor, scalar) -> Tensor:
    """a + scalar."""
    return AddScalar(scalar)(a)


class EWiseMul(TensorOp):
    """a * b."""

    def compute(self, a, b):
        try:
            return a * b
        except ValueError as e:
            raise shape_error("multiply", a, b, e) from None

    def gradient(self, out_grad, node):
        a, b = node.inputs
        # no multiply for an operand that needs no gradient (a mask, a one-hot matrix)
        return (out_grad * b if a.requires_grad else None,
                out_grad * a if b.requires_grad else None)


def multiply(a: Tensor, b: Tensor) -> Tensor:
    """a * b, broadcasting."""
    return EWiseMul()(a, b)


class MulScalar(TensorOp):
    """a * scalar."""

    def __init__(self, scalar):
        self.scalar = as_scalar(scalar)

    def compute(self, a):
        return a * self.scalar

    def gradient(self, out_grad, node):
        return out_grad * self.scalar


def mul_scalar(a: Tensor, scalar) -> Tensor:
    """a * scalar."""
    return MulScalar(scalar)(a)


class EWisePow(TensorOp):
    """a ** b, elementwise."""

    def compute(self, a, b):
        try:
            return namespace(a).pow(a, b)
        except ValueError as e:
            raise shape_error("power", a, b, e) from None

    def gradient(self, out_grad, node):
        a, b = node.inputs
        # d/da a^b = b a^(b-1);  d/db a^b = a^b log a
        return (out_grad * b * a ** (b - 1) if a.requires_grad else None,
                out_grad * node * log(a) if b.requires_grad else None)


def power(a: Tensor, b: Tensor) -> Tensor:
    """a ** b, elementwise, broadcasting."""
    return EWisePow()(a, b)


class PowerScalar(TensorOp):
    """a ** scalar."""

    def __init__(self, scalar):
        self.scalar = as_scalar(scalar)

    def compute(self, a):
        return a**self.scalar

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        if self.scalar == 0:
            return out_grad * 0
        return out_grad * self.scalar * a ** (self.scalar - 1)


def power_scalar(a: Tensor, scalar) -> Tensor:
    """a ** scalar."""
    return PowerScalar(scalar)(a)


class EWiseDiv(TensorOp):
    """a / b."""

    def compute(self, a, b):
        try:
            return a / b
        except ValueError as e:
            raise shape_error("divide", a, b, e) from None

    def gradient(self, out_grad, node):
        a, b = node.inputs
        # d/db a/b = -a / b^2
        return (out_grad / b if a.requires_grad else None,
                -(out_grad * a) / (b * b) if b.requires_grad else None)


def divide(a: Tensor, b: Tensor) -> Tensor:
    """a / b, broadcasting."""
    return EWiseDiv()(a, b)


class DivScalar(TensorOp):
    """a / scalar."""

    def __init__(self, scalar):
        self.scalar = as_scalar(scalar)

    def compute(self, a):
        return a / self.scalar

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
        return namespace(a).log(a)

    def gradient(self, out_grad, node):
        return out_grad / node.inputs[0]  # d/da log a = 1/a


def log(a: Tensor) -> Tensor:
    """Elementwise natural logarithm."""
    return Log()(a)


class Exp(TensorOp):
    """e ** a."""

    def compute(self, a):
        return namespace(a).exp(a)

    def gradient(self, out_grad, node):
        return out_grad * node  # d/da e^a = e^a


def exp(a: Tensor) -> Tensor:
    """Elementwise e ** a."""
    return Exp()(a)


class ReLU(TensorOp):
    """max(a, 0)."""

    def compute(self, a):
        return namespace(a).maximum(a, 0)

    def gradient(self, out_grad, node):
        a = node.inputs[0].realize_cached_data()
        mask = namespace(a).astype(a > 0, a.dtype)  # the derivative, a constant
        return out_grad * Tensor.make_const(mask, device=node.device)


def relu(a: Tensor) -> Tensor:
    """Elementwise max(a, 0)."""
    return ReLU()(a)


class Tanh(TensorOp):
    """Hyperbolic tangent."""

    def compute(self, a):
        return namespace(a).tanh(a)

    def gradient(self, out_grad, node):
        return out_grad * (1 - node**2)  # d/da tanh a = 1 - tanh^2 a


def tanh(a: Tensor) -> Tensor:
    """Elementwise tanh."""
    return Tanh()(a)


class Sigmoid(TensorOp):
    """1 / (1 + e^-a), computed as (1 + tanh(a/2)) / 2 so it never overflows."""

    def compute(self, a):
        return (namespace(a).tanh(a * 0.5) + 1) * 0.5

    def gradient(self, out_grad, node):
        return out_grad * node * (1 - node)  # s' = s (1 - s)


def sigmoid(a: Tensor) -> Tensor:
    """Elementwise logistic sigmoid."""
    return Sigmoid()(a)

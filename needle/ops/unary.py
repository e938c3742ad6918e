"""Elementwise functions of one tensor: log, exp, sqrt, relu, tanh and sigmoid."""

from __future__ import annotations

from typing import Any

from ..autograd.tensor import Tensor, TensorOp
from ..backends import namespace
from ..kernels import Kernel
from .dtypes import check_not_bool, floating_only


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


class Sqrt(TensorOp):
    """Square root (NaN below 0, -0.0 at -0.0, as xp.sqrt)."""

    def compute(self, a):
        return floating_only("sqrt", namespace(a).sqrt, a)

    def gradient(self, out_grad, node):
        return out_grad / (node.result * 2)  # d/da sqrt a = 1 / (2 sqrt a)


def sqrt(a: Tensor) -> Tensor:
    """Elementwise square root."""
    return Sqrt()(a)


def relu_portable(a: Any) -> Any:
    """max(a, 0) elementwise (NaN kept, -0 made +0)."""
    return namespace(a).maximum(a, 0)


#: cuda: one raw kernel, where cupy's maximum with a Python scalar costs twice its host time
RELU = Kernel("relu", relu_portable, fast={"cuda": "needle.backends.relu:relu_cuda"})


class ReLU(TensorOp):
    """max(a, 0)."""

    def compute(self, a):
        try:
            out = RELU(a)
        except TypeError:  # strict's bools
            check_not_bool("relu", a)
            raise
        if out.dtype is not a.dtype:  # bools: int64 on numpy, torch and jax
            check_not_bool("relu", a)
        return out

    def gradient(self, out_grad, node):
        return ReLUGrad()(out_grad, node.inputs[0])


def relu_grad_portable(g: Any, a: Any) -> Any:
    """g times ReLU's derivative at a: g * (1 where a > 0, else 0, in a's dtype)."""
    return g * namespace(a).astype(a > 0, a.dtype)


#: one op on torch (the product by the boolean mask) and one kernel on cuda, where the
#: portable rule makes three: the comparison, its cast and the product
RELU_GRAD = Kernel("relu_grad", relu_grad_portable,
                   fast={"cuda": "needle.backends.relu:relu_grad_cuda",
                         "torch": "needle.backends.relu_torch:relu_grad_torch"})


class ReLUGrad(TensorOp):
    """ReLU's adjoint at its input a for the output's adjoint g: g where a > 0, else 0 * g.

    Linear in g; the derivative in a is 0 almost everywhere, so a gets no adjoint."""

    def compute(self, g, a):
        return RELU_GRAD(g, a)

    def gradient(self, out_grad, node):
        return ReLUGrad()(out_grad, node.inputs[1]), None


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


def _sigmoid_exact(x):
    """1 / (1 + e^-x) as e^min(x, 0) / (1 + e^-|x|): never overflows, and keeps its relative
    accuracy in the negative tail (the tanh form rounds sigmoid(-20) to 0 in float32); no
    data-dependent `where`, which costs more than the second exp."""
    xp = namespace(x)
    return xp.exp(xp.minimum(x, 0)) / (1 + xp.exp(-xp.abs(x)))


class Sigmoid(TensorOp):
    """1 / (1 + e^-a), computed from e^-|a| so it never overflows and stays accurate in the
    negative tail."""

    def compute(self, a):
        return floating_only("sigmoid", _sigmoid_exact, a)

    def gradient(self, out_grad, node):
        y = node.result
        return out_grad * y * (1 - y)  # s' = s (1 - s)


def sigmoid(a: Tensor) -> Tensor:
    """Elementwise logistic sigmoid."""
    return Sigmoid()(a)

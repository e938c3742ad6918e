"""Elementwise comparisons (==, !=, <, <=, >, >=) of a Tensor with a Tensor or a number:
bool Tensors that need no gradient, as PyTorch's."""

from __future__ import annotations

import operator
from typing import Any, Callable

from ..autograd.tensor import Tensor, TensorOp
from ..grad_mode import no_grad
from .dtypes import promote
from .elementwise import check_broadcast

#: each comparison's operator and its name in error messages
COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge}


class Compare(TensorOp):
    """a <op> b elementwise (b a Tensor, or the number `scalar`): a bool Tensor."""

    def __init__(self, name: str, scalar: Any = None):
        self.name, self.fn, self.scalar = name, COMPARISONS[name], scalar

    def compute(self, a, b=None):
        if b is None:
            return self.fn(a, self.scalar)
        if a.shape != b.shape:
            check_broadcast(self.name, a, b)
        return self.fn(a, b)

    def gradient(self, out_grad, node):
        return (None,) * len(node.inputs)  # (never asked: the output needs no gradient)


def compare(name: str, a: Tensor, b: Any) -> Any:
    """`a <name> b` as a bool Tensor; NotImplemented for operands that are no Tensor or
    number (Python then compares identities: None, a Module, a string)."""
    if isinstance(b, Tensor):
        with no_grad():
            a, b = promote(name, (a, b)) if a.dtype != b.dtype else (a, b)
            return Compare(name)(a, b)
    if type(b) in (int, float, bool):
        with no_grad():
            return Compare(name, b)(a)
    if hasattr(b, "__array__") or hasattr(b, "__array_namespace__") or hasattr(b, "__dlpack__"):
        raise TypeError(f"Tensor {name}: compare a Tensor with a Tensor or a number, not a "
                        f"{type(b).__name__}; make it a Tensor first (ndl.Tensor(array, "
                        "device=...)), or compare the host copies (t.numpy())")
    return NotImplemented

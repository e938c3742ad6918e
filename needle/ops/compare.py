"""Elementwise comparisons (==, !=, <, <=, >, >=) of a Tensor with a Tensor or a number:
bool Tensors that need no gradient, as PyTorch's."""

from __future__ import annotations

import operator
from typing import Any, Callable

from ..autograd.tensor import Tensor, TensorOp
from ..backends import namespace
from ..grad_mode import no_grad
from .dtypes import is_bool, promote, scalar_error
from .elementwise import check_broadcast
from .scalar import as_scalar, int_range

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
            return _with_scalar(self.name, self.fn, a, self.scalar)
        if a.shape != b.shape:
            check_broadcast(self.name, a, b)
        if self.name not in ("eq", "ne") and is_bool(a):  # (strict has no bool order)
            raise TypeError(f"{self.name}: bool tensors are only compared with == and !=; "
                            "convert them first, e.g. with ndl.ops.astype(x, \"int8\")")
        return self.fn(a, b)

    def gradient(self, out_grad, node):
        return (None,) * len(node.inputs)  # (never asked: the output needs no gradient)


def _with_scalar(name: str, fn: Callable, a: Any, scalar: Any) -> Any:
    """a <name> scalar by one rule on every device (the scalar ops' rule: an int compares
    with any numeric tensor, a float with floating ones, a bool with bool ones by == and
    !=); an int past an integer dtype's range compares as the number it is."""
    bounds = None
    if is_bool(a):
        if scalar.__class__ is not bool or name not in ("eq", "ne"):
            raise TypeError(f"{name}: a bool tensor compares with True or False by == and != "
                            f"only, not with {scalar!r}; convert it first, e.g. with "
                            "ndl.ops.astype(x, \"int8\")")
    else:
        if scalar.__class__ is bool:
            scalar = int(scalar)  # (True: 1, as the scalar ops take it)
        bounds = int_range(a)
        if bounds is not None and scalar.__class__ is int and not (
                bounds[0] <= scalar <= bounds[1]):
            xp = namespace(a)  # (numpy gave the answer, torch and strict OverflowError)
            value = {"eq": False, "ne": True, "lt": scalar > bounds[1],
                     "le": scalar > bounds[1], "gt": scalar < bounds[0],
                     "ge": scalar < bounds[0]}[name]
            return xp.full(tuple(a.shape), value, dtype=xp.bool, device=a.device)
    if bounds is not None and scalar.__class__ is not int:  # (an int tensor and a float)
        raise scalar_error(name, a, scalar)
    try:
        return fn(a, scalar)
    except TypeError:  # strict refuses what numpy and torch promote: one rule everywhere
        raise scalar_error(name, a, scalar) from None


def compare(name: str, a: Tensor, b: Any) -> Any:
    """`a <name> b` as a bool Tensor; NotImplemented for operands that are no Tensor,
    number or one-element array (Python then compares identities: None, a Module, a str)."""
    if isinstance(b, Tensor):
        with no_grad():
            a, b = promote(name, (a, b)) if a.dtype != b.dtype else (a, b)
            return Compare(name)(a, b)
    if isinstance(b, (int, float)) or getattr(b, "shape", None) is not None:
        if getattr(b, "shape", ()) != () and (len(b.shape) != 1 or b.shape[0] != 1):
            raise TypeError(f"Tensor {name}: compare a Tensor with a Tensor or a number, not "
                            f"a {type(b).__name__} of shape {tuple(b.shape)}; make it a Tensor "
                            "first (ndl.Tensor(array, device=...)), or compare the host copies "
                            "(t.numpy())")
        with no_grad():
            return Compare(name, as_scalar(b, name))(a)
    if hasattr(b, "__array__") or hasattr(b, "__array_namespace__") or hasattr(b, "__dlpack__"):
        raise TypeError(f"Tensor {name}: compare a Tensor with a Tensor or a number, not a "
                        f"{type(b).__name__}; make it a Tensor first (ndl.Tensor(array, "
                        "device=...)), or compare the host copies (t.numpy())")
    return NotImplemented

"""Elementwise arithmetic of a tensor with a Python scalar: +, *, **, scalar ** tensor, /."""

from __future__ import annotations

import math
from typing import Any

from ..autograd.graph import array_function, array_of
from ..autograd.tensor import Tensor, TensorOp, constant_like
from ..backend_ndarray import unwrap
from ..backends import device_of, namespace
from .dtypes import check_scalar_result, is_bool, scalar_error


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
    """The Python number in a one-element array of any namespace (or an NDArray view)."""
    array = unwrap(array)
    if hasattr(array, "item"):
        return array.item()
    xp = array.__array_namespace__()
    array = xp.reshape(array, ())
    for kind, cast in (("bool", bool), ("integral", int), ("real floating", float)):
        if xp.isdtype(array.dtype, kind):
            return cast(array)
    return complex(array)


#: (dtype class, native dtype) -> (lowest, highest) of an integer dtype, None for the others
#: (keyed by the class too: strict's dtypes hash as numpy's and warn when compared with them)
_INT_RANGES: dict[tuple[type, Any], tuple[int, int] | None] = {}


def int_range(a: Any) -> tuple[int, int] | None:
    """(lowest, highest) value of integer array `a`'s dtype; None for other dtypes."""
    dtype = a.dtype
    key = (dtype.__class__, dtype)
    try:
        return _INT_RANGES[key]
    except KeyError:
        xp = namespace(a)
        bounds = None
        if xp.isdtype(dtype, "integral"):
            info = xp.iinfo(dtype)
            bounds = (int(info.min), int(info.max))
        _INT_RANGES[key] = bounds
        return bounds


def int_operand(op: str, a: Any, scalar: Any) -> Any:
    """`scalar` as the operand of `op` with array `a`: a Python int outside the range of a's
    integer dtype is a ValueError naming both (numpy and strict raise OverflowError, torch
    and jax wrap it: int8 * 300 is -124 there); one beyond int64's (the top half of uint64)
    becomes a 0-d array of a's dtype (jax reads a Python int as an int64)."""
    if scalar.__class__ is not int or 0 <= scalar < 128:  # fits every integer dtype
        return scalar
    bounds = int_range(a)
    if bounds is None:
        return scalar
    if not bounds[0] <= scalar <= bounds[1]:
        raise int_range_error(op, a, scalar, bounds)
    if scalar >= 2**63:
        return namespace(a).asarray(scalar, dtype=a.dtype, device=getattr(a, "device", None))
    return scalar


def int_range_error(op: str, a: Any, scalar: int, bounds: tuple[int, int]) -> ValueError:
    """The ValueError for a Python int outside the range of `a`'s integer dtype."""
    name = device_of(a).public_dtype(a.dtype).name
    return ValueError(f"{op}: the scalar {scalar} is out of the range of {name} "
                      f"[{bounds[0]}, {bounds[1]}]: needle does not wrap a Python int into a "
                      f"tensor's dtype; convert the tensor first, e.g. with "
                      f"ndl.ops.astype(x, \"int64\")")


def _add_int(a: Any, scalar: int) -> Any:
    """a + scalar for a Python int that may be outside the range of a's dtype."""
    bounds = int_range(a)
    if bounds is not None and scalar < 0 and bounds[0] == 0 and -scalar <= bounds[1]:
        return a - int_operand("add_scalar", a, -scalar)  # x - c, unsigned: wraps as numpy's
    return a + int_operand("add_scalar", a, scalar)


class AddScalar(TensorOp):
    """a + scalar.

    `x - c` is AddScalar(-c): on an unsigned tensor a negative scalar whose magnitude the
    dtype holds is subtracted instead, so `x - 1` wraps as numpy's does ([3, 0] - 1 is
    [2, 255] in uint8); any other int outside the dtype's range is a ValueError.
    """

    def __init__(self, scalar):
        scalar = as_scalar(scalar, "add_scalar")
        self.scalar = int(scalar) if scalar.__class__ is bool else scalar  # True: 1

    def compute(self, a):
        scalar = self.scalar
        try:
            if scalar.__class__ is int and not 0 <= scalar < 128:
                out = _add_int(a, scalar)
            else:
                out = a + scalar
        except TypeError:  # strict refuses what the others promote
            raise scalar_error("add_scalar", a, self.scalar) from None
        if out.dtype is not a.dtype:
            check_scalar_result("add_scalar", a, self.scalar, out)
        return out

    def gradient(self, out_grad, node):
        return out_grad


def add_scalar(a: Tensor, scalar: Any) -> Tensor:
    """a + scalar."""
    return AddScalar(scalar)(a)


class MulScalar(TensorOp):
    """a * scalar."""

    def __init__(self, scalar):
        scalar = as_scalar(scalar, "mul_scalar")
        self.scalar = int(scalar) if scalar.__class__ is bool else scalar  # True: 1

    def compute(self, a):
        try:
            out = a * int_operand("mul_scalar", a, self.scalar)
        except TypeError:  # strict refuses what the others promote
            raise scalar_error("mul_scalar", a, self.scalar) from None
        if out.dtype is not a.dtype:
            check_scalar_result("mul_scalar", a, self.scalar, out)
        return out

    def gradient(self, out_grad, node):
        return out_grad * self.scalar


def mul_scalar(a: Tensor, scalar: Any) -> Tensor:
    """a * scalar."""
    return MulScalar(scalar)(a)


class PowerScalar(TensorOp):
    """a ** scalar."""

    def __init__(self, scalar):
        scalar = as_scalar(scalar, "power_scalar")
        self.scalar = int(scalar) if scalar.__class__ is bool else scalar  # True: 1

    def compute(self, a):
        scalar = self.scalar
        if scalar.__class__ is int and scalar < 0 and int_range(a) is not None:
            raise negative_power_error(a, scalar)
        operand = int_operand("power_scalar", a, scalar)
        try:
            out = a ** operand
        except TypeError:  # strict refuses what the others promote
            raise scalar_error("power_scalar", a, self.scalar) from None
        except (ValueError, RuntimeError):  # numpy's and torch's bools to negative powers
            if is_bool(a):
                raise scalar_error("power_scalar", a, self.scalar) from None
            raise
        if out.dtype is not a.dtype:
            check_scalar_result("power_scalar", a, self.scalar, out)
        return out

    def gradient(self, out_grad, node):
        a = node.inputs[0]
        if self.scalar == 0:
            return out_grad * 0
        return out_grad * self.scalar * a ** (self.scalar - 1)


def negative_power_error(a: Any, scalar: int) -> ValueError:
    """The ValueError for an integer tensor to a negative int power, numpy's (torch and jax
    raise their own errors), as check_int_exponents."""
    name = device_of(a).public_dtype(a.dtype).name
    return ValueError(f"power_scalar: the {name} tensor to the negative power {scalar}: "
                     "integers to negative integer powers are not allowed (the results are "
                     "fractions); convert the tensor first, e.g. with "
                     "ndl.ops.astype(x, \"float32\")")


def check_int_exponents(op: str, b: Any) -> None:
    """ValueError where the integer exponents `b` hold a negative entry, on every device
    (numpy's rule: the results are fractions; torch and jax gave 2 ** -1 = 0). One read of
    the device; deferred to its next read on an accelerator."""
    if int_range(b) is None:
        return
    xp, device = namespace(b), device_of(b)
    bad = xp.any(b < 0)
    message = (f"{op}: an integer tensor to negative integer powers (the results are "
               "fractions); convert the tensors first, e.g. with ndl.ops.astype(x, \"float32\")")
    if device.defers_checks:
        device.defer_check(bad, lambda: message)
    elif bool(bad):
        raise ValueError(message)


def power_scalar(a: Tensor, scalar: Any) -> Tensor:
    """a ** scalar."""
    return PowerScalar(scalar)(a)


class RPowerScalar(TensorOp):
    """scalar ** a."""

    def __init__(self, scalar):
        scalar = as_scalar(scalar, "rpower_scalar")
        self.scalar = int(scalar) if scalar.__class__ is bool else scalar  # True: 1

    def compute(self, a):
        if self.scalar.__class__ is int:
            check_int_exponents("rpower_scalar", a)
        try:
            out = int_operand("rpower_scalar", a, self.scalar) ** a
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


def rpower_scalar(a: Tensor, scalar: Any) -> Tensor:
    """scalar ** a, elementwise (`scalar ** tensor`)."""
    return RPowerScalar(scalar)(a)


class DivScalar(TensorOp):
    """a / scalar."""

    def __init__(self, scalar):
        scalar = as_scalar(scalar, "divide_scalar")
        self.scalar = int(scalar) if scalar.__class__ is bool else scalar  # True: 1

    def compute(self, a):
        scalar = self.scalar
        if scalar.__class__ is int and not 0 <= scalar < 128 and int_range(a) is not None:
            raise scalar_error("divide", a, scalar)  # before numpy's OverflowError
        try:
            out = a / self.scalar
        except TypeError:  # strict refuses what the others promote
            raise scalar_error("divide", a, self.scalar) from None
        if out.dtype is not a.dtype:
            check_scalar_result("divide", a, self.scalar, out)
        return out

    def gradient(self, out_grad, node):
        return out_grad / self.scalar


def divide_scalar(a: Tensor, scalar: Any) -> Tensor:
    """a / scalar."""
    return DivScalar(scalar)(a)

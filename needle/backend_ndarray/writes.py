"""What a write into an NDArray view takes (`a[idx] = v`, `a.fill(v)`): a value of the array's
device and dtype, by the rules of a tensor's array operands and scalars."""

from __future__ import annotations

import math
from typing import Any

from ..autograd.tensor_checks import check_operand_dtype
from ..backends import Device, device_of, is_device_array
from ..ops.scalar import int_operand, int_range
from .ndarray import NDArray


def written_value(self: Any, other: Any) -> Any:
    """`other` as an array of the device of `self` (the NDArray written to): host data
    (numpy's) is copied over, another device's array is a ValueError, as in arithmetic;
    its dtype must fit, as a tensor's array operands' (tensor_checks.check_operand_dtype)."""
    if other.__class__ is NDArray:
        value, source = other._array, other.device
    elif hasattr(other, "_realize") and isinstance(getattr(other, "device", None), Device):
        value, source = other._realize(), other.device  # a Tensor
    elif is_device_array(other):
        value, source = other, device_of(other)
    else:
        return self.device.asarray(written_number(self, other), dtype=self._array.dtype)
    if source != self.device:
        if source.kind != "cpu":
            raise ValueError(f"NDArray write: the value is on {source}, the array on "
                             f"{self.device}; move it with .to({self.device})")
        check_operand_dtype(self, value, source)  # (as a tensor's array operands)
        value = self.device.asarray(value)  # host data
    elif value.dtype != self._array.dtype:
        check_operand_dtype(self, value, source)
    return value


def written_number(self: Any, value: Any) -> Any:
    """A Python number written into the NDArray `self`: a ValueError where the dtype cannot hold
    it (an int out of an integer dtype's range, NaN or inf into integers), as numpy's."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, int):
        return int_operand("NDArray write", self._array, value)
    if int_range(self._array) is not None and not math.isfinite(value):
        raise ValueError(f"NDArray write: {value} into an array of dtype {self.dtype}, "
                         "which holds no NaN or infinity")
    return value

"""What a Tensor checks in what users hand it: a `.grad`, backward()'s `out_grad`, an array
given to its arithmetic operators, what a user op's `compute` returns (each a ValueError or
TypeError naming both sides)."""

from __future__ import annotations

import functools
from math import prod
from typing import Any, Callable

from ..backend_ndarray import unwrap
from ..backends import Device, device_of, is_device_array

NUMBERS = (int, float, bool, complex)  # the scalar ops' operands, told apart at once


def check_grad(tensor: Any, value: Any, kind: type) -> None:
    """Raise unless `value` is a `kind` (Tensor) of `tensor`'s shape and device (PyTorch
    refuses other `.grad`s too; another float dtype is allowed: the optimizers keep the
    parameter's)."""
    if not isinstance(value, kind):
        raise TypeError(f"grad: a tensor's gradient is a needle Tensor or None, got "
                        f"{type(value).__name__}")
    for what, mine, theirs in (("shape", tensor.shape, value.shape),
                               ("device", tensor.device, value.device)):
        if mine != theirs:
            raise ValueError(f"grad: assigned a gradient with {what} {theirs} to a tensor "
                             f"with {what} {mine}; a gradient has its tensor's {what}")


def check_out_grad(tensor: Any, out_grad: Any) -> None:
    """Raise a ValueError naming both sides unless `out_grad` fits `tensor` (its device,
    shape and dtype: gradients keep their tensor's dtype)."""
    if out_grad.device != tensor.device:
        raise ValueError(f"backward: out_grad is on {out_grad.device}, the tensor is on "
                         f"{tensor.device}; move it with .to()")
    if out_grad.shape != tensor.shape:
        raise ValueError(f"backward: out_grad has shape {out_grad.shape}, the tensor has "
                         f"{tensor.shape}")
    if out_grad.dtype != tensor.dtype:
        raise ValueError(f"backward: out_grad has dtype {out_grad.dtype}, the tensor has "
                         f"{tensor.dtype}")


def check_device(device: Any) -> None:
    """TypeError unless `device` is a needle Device (a name like "cpu" failed much later)."""
    if not isinstance(device, Device):
        raise TypeError(f"device must be a needle Device (ndl.cpu(), ndl.cuda(), ...), got "
                        f"{type(device).__name__} {device!r}")


def out_grad_of(tensor: Any, out_grad: Any, kind: type) -> Any:
    """backward()'s adjoint of `tensor`: ones for None, other data converted to the tensor's
    device and dtype, a `kind` (Tensor) checked (check_out_grad). A tensor that does not
    require grad is a RuntimeError, as in PyTorch (no gradient could reach a parameter)."""
    if not tensor.requires_grad:
        raise RuntimeError("backward: the tensor does not require grad, so no gradient can "
                           "flow to anything (it was made under no_grad(), detached, or from "
                           "tensors none of which requires grad)")
    if out_grad is None:
        ones = tensor.device.ones(tensor.shape, dtype=tensor._realize().dtype)
        return kind.make_const(ones, device=tensor.device)
    if not isinstance(out_grad, kind):
        out_grad = kind(out_grad, device=tensor.device, dtype=tensor.dtype, requires_grad=False)
    check_out_grad(tensor, out_grad)
    return out_grad


def array_operand(tensor: Any, other: Any) -> Any:
    """`other` as an array of `tensor`'s device and dtype where it is an array (numpy's, an
    NDArray, the device's) of more than one element; None for numbers and one-element
    arrays, which the scalar ops take. Host data is copied over; another device's array is
    a ValueError naming both."""
    if other.__class__ in NUMBERS:
        return None
    shape = getattr(other, "shape", None)
    if shape is None or prod(shape) == 1:
        return None
    raw = unwrap(other)
    device = tensor.device
    where = device_of(raw) if is_device_array(raw) else device
    if where != device and where.kind != "cpu":  # (numpy's: host data)
        raise ValueError(f"an operand on {where} for a tensor on {device}: move it with .to() "
                         "or the device's asarray")
    check_operand_dtype(tensor, raw, where)
    return device.asarray(raw, dtype=tensor._array.dtype)


def check_operand_dtype(tensor: Any, raw: Any, where: Any) -> None:
    """TypeError where the operand's values do not fit the tensor's dtype, as for numbers
    (fractions or complex numbers into integers, anything but bools into bool); ValueError
    for integers out of an integer dtype's range. (They were cast silently.)"""
    src = where.public_dtype(raw.dtype)
    dst = tensor.device.public_dtype(tensor._array.dtype)
    if src == dst:
        return
    if (dst.kind == "b" and src.kind != "b") or (src.kind == "c" and dst.kind != "c") or (
            src.kind == "f" and dst.kind in "iu"):
        raise TypeError(f"an operand of dtype {src} for a tensor of dtype {dst}: its values "
                        "do not fit the tensor's dtype; convert the tensor first, e.g. with "
                        "ndl.ops.astype(x, \"float32\")")
    if src.kind in "iu" and dst.kind in "iu" and prod(raw.shape):
        _check_int_range(tensor, raw, where, src, dst)


def _check_int_range(tensor: Any, raw: Any, where: Any, src: Any, dst: Any) -> None:
    """ValueError where integers `raw` (of `where`) fall outside dtype `dst`'s range: one
    read of host data or of a device that does not defer checks, else a deferred check."""
    info = tensor.device.xp.iinfo(tensor._array.dtype)
    xp = where.xp
    have = xp.iinfo(raw.dtype)
    low, high = max(info.min, have.min), min(info.max, have.max)  # (in raw's dtype too)
    if low == have.min and high == have.max:
        return  # every value of raw's dtype fits
    message = (f"an operand of dtype {src} holds values out of the range of {dst} "
               f"[{info.min}, {info.max}]")
    bad = xp.any((raw < low) | (raw > high))
    if where.defers_checks:
        where.defer_check(bad, lambda: message)
    elif bool(bad):
        raise ValueError(message)


def checked_compute(compute: Callable) -> Callable:
    """A user op's `compute` whose result must be arrays of its inputs' device: an NDArray is
    taken as its array (the course's ops return them), another device's or library's array
    is a TypeError now, not a failure later (a numpy array in a torch tensor)."""

    @functools.wraps(compute)
    def checked(self: Any, *arrays: Any) -> Any:
        out = unwrap(compute(self, *arrays))
        first = arrays[0] if arrays else None
        if first.__class__ is tuple:
            first = first[0] if first else None
        if first is None or not is_device_array(first):
            return out
        device = device_of(first)
        for part in out if out.__class__ is tuple else (out,):
            if not (is_device_array(part) and device.owns(part)):
                raise TypeError(
                    f"{type(self).__name__}.compute returned {type(part).__name__} for inputs "
                    f"on {device}: return arrays of the inputs' device, made with their "
                    "namespace (ndl.backends.namespace(a)) or the device (device.asarray)")
        return out

    return checked


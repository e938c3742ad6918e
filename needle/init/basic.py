"""Tensor creation: random and constant tensors drawn through the device."""

from __future__ import annotations

import numbers
from typing import Any

from ..arguments import check_range, finite
from ..autograd import Tensor
from ..autograd.tensor_checks import check_device
from ..backends import Device, default_device
from ..ops.indices import as_index_array


def _tensor(array: Any, device: Device, dtype: Any, requires_grad: bool) -> Tensor:
    """A leaf tensor from a fresh device array, cast to `dtype` (no extra copy when equal)."""
    native = device.dtype(dtype)
    if native is not None and array.dtype != native:
        array = device.xp.astype(array, native)
    return Tensor.make_const(array, requires_grad=requires_grad, device=device)


def _floating(owner: str, device: Device, dtype: Any) -> None:
    """TypeError naming `dtype` unless it is a floating one (None: float64): drawn real
    numbers cast to integers are truncated (Linear's weights to -1, 0 and 1) or to bool all
    True. Checked before the draw, so numpy's state is left as it was."""
    native = device.dtype(dtype)
    if native is not None and not device.xp.isdtype(native, "real floating"):
        name = dtype if isinstance(dtype, str) else getattr(dtype, "__name__", dtype)
        raise TypeError(f"{owner}: dtype must be a floating one, found {name} (real numbers "
                        f"drawn as integers or bools are truncated); use init.randb or "
                        f"init.constant for those")


# The random initialisers compute on the host in float64 and cast once (Device.uniform,
# normal, bernoulli), as the course does: a seed gives the same bits on every device.


def rand(*shape: int, low: float = 0.0, high: float = 1.0, device: Device | None = None,
         dtype: Any = "float32", requires_grad: bool = False) -> Tensor:
    """Uniform numbers in [low, high): `rand(*shape) * (high - low) + low` in float64, cast."""
    device = device_or_default(device)
    low, high = finite("rand", "low", low), finite("rand", "high", high)
    if not low <= high:
        raise ValueError(f"rand: low must be <= high, found low={low}, high={high}")
    _floating("rand", device, dtype)
    array = device.uniform(shape, low, high, dtype=dtype)
    return _tensor(array, device, dtype, requires_grad)


def randn(*shape: int, mean: float = 0.0, std: float = 1.0, device: Device | None = None,
          dtype: Any = "float32", requires_grad: bool = False) -> Tensor:
    """Normal numbers: `randn(*shape) * std + mean` in float64, cast."""
    device = device_or_default(device)
    mean, std = finite("randn", "mean", mean), check_range("randn", "std", std, 0.0)
    _floating("randn", device, dtype)
    array = device.normal(shape, mean, std, dtype=dtype)
    return _tensor(array, device, dtype, requires_grad)


def constant(*shape: int, c: float = 1.0, device: Device | None = None, dtype: Any = "float32",
             requires_grad: bool = False) -> Tensor:
    """A tensor filled with `c` (dtype None: float64, on every device that has it)."""
    device = device_or_default(device)
    dtype = _widest_float(device) if dtype is None else dtype
    array = device.full(shape, _fill_value(c, device, dtype), dtype=dtype)
    return _tensor(array, device, dtype, requires_grad)


def _widest_float(device: Device) -> str:
    """What dtype None means: numpy's float64 on every device, float32 where there is no
    float64 (jax without x64, MPS), where each library's own default differed."""
    try:
        device.dtype("float64")
    except TypeError:
        return "float32"
    return "float64"


def _fill_value(c: Any, device: Device, dtype: Any) -> Any:
    """`c` for an array of `dtype`: for an integer dtype a whole number within its range
    (a ValueError otherwise: each library wrapped, saturated or raised in its own way)."""
    native = device.dtype(dtype)
    xp = device.xp
    if isinstance(c, bool) or not xp.isdtype(native, "integral"):
        return c
    if isinstance(c, numbers.Integral):  # (numpy's too: exact, never through a float)
        whole = int(c)
    else:
        value = finite("constant", "c", c)
        whole = int(value) if value == int(value) else None
    info = xp.iinfo(native)
    if whole is None or not info.min <= whole <= info.max:
        raise ValueError(f"constant: c={c!r} is not a whole number in the range "
                         f"[{info.min}, {info.max}] of dtype {dtype}")
    return whole


def ones(*shape: int, device: Device | None = None, dtype: Any = "float32",
         requires_grad: bool = False) -> Tensor:
    """A tensor of ones."""
    return constant(*shape, c=1.0, device=device, dtype=dtype, requires_grad=requires_grad)


def zeros(*shape: int, device: Device | None = None, dtype: Any = "float32",
          requires_grad: bool = False) -> Tensor:
    """A tensor of zeros."""
    return constant(*shape, c=0.0, device=device, dtype=dtype, requires_grad=requires_grad)


def randb(*shape: int, p: float = 0.5, device: Device | None = None, dtype: Any = "bool",
          requires_grad: bool = False) -> Tensor:
    """Bernoulli(p) draws: `rand(*shape) <= p` in float64, as `dtype`."""
    device = device_or_default(device)
    p = check_range("randb", "p", p, 0.0, 1.0, high_inclusive=True)
    array = device.bernoulli(shape, p, dtype=dtype)
    return _tensor(array, device, dtype, requires_grad)


def one_hot(n: int, i: Any, device: Device | None = None, dtype: Any = "float32",
            requires_grad: bool = False) -> Tensor:
    """One-hot rows of length `n` for the labels `i` (integers, or floats holding whole
    numbers); dtype None: float64, on every device that has it."""
    device = device_or_default(device)
    dtype = _widest_float(device) if dtype is None else dtype
    if isinstance(i, Tensor):  # (as_index_array reads its array: ndl.compile, the Tensor's)
        i = i.to(device)
    elif not device.owns(i):
        i = device.asarray(i)
    labels = as_index_array(device.xp, i, n, "one_hot", "labels", device)
    return _tensor(device.one_hot(n, labels, dtype=dtype), device, dtype, requires_grad)


def zeros_like(array: Tensor, *, device: Device | None = None,
               requires_grad: bool = False) -> Tensor:
    """Zeros with the shape and dtype of `array`."""
    device = array.device if device is None else device
    return zeros(*array.shape, dtype=array.dtype, device=device, requires_grad=requires_grad)


def ones_like(array: Tensor, *, device: Device | None = None,
              requires_grad: bool = False) -> Tensor:
    """Ones with the shape and dtype of `array`."""
    device = array.device if device is None else device
    return ones(*array.shape, dtype=array.dtype, device=device, requires_grad=requires_grad)


def device_or_default(device: Device | None) -> Device:
    """`device`, the default device for None; a TypeError for anything but a Device."""
    if device is None:
        return default_device()
    check_device(device)
    return device


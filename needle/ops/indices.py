"""Index arrays (class labels, token ids): integers, or floats that hold whole numbers."""

from __future__ import annotations

from typing import Any

from ..autograd.graph import array_function
from ..backends import namespace
from ..kernels import Kernel


def checked_indices_portable(array: Any, n: int) -> tuple[Any, Any]:
    """(array with its entries outside [0, n) replaced by 0, whether there were any: a 0-d
    bool array), for integer indices; nothing read back."""
    xp = namespace(array)
    bad = (array < 0) | (array >= n)
    return xp.where(bad, xp.zeros_like(array), array), xp.any(bad)


#: cuda: one kernel (backends/index_check.py)
CHECKED_INDICES = Kernel("checked_indices", checked_indices_portable,
                         fast={"cuda": "needle.backends.index_check:checked_indices_cuda"})


@array_function  # ndl.compile replays it (and its check) on each step's labels
def as_index_array(xp: Any, array: Any, n: int, who: str, what: str = "indices",
                   device: Any = None) -> Any:
    """`array` (an array or a Tensor) as int64 indices in [0, n); float dtypes must hold
    whole numbers.

    Integer dtypes are the fast path. A bad value raises ValueError naming `who` and the
    value, a dtype that is neither raises TypeError. On host-memory devices one read checks
    every value at once. On an accelerator (`device.defers_checks`) a read would stall the
    step, so the check is left on the device and raised at the device's next read to the
    host (the loss read, say), and bad entries are replaced by 0 meanwhile, so no kernel
    ever indexes out of bounds.
    """
    floating, array_dtype = xp.isdtype(array.dtype, "real floating"), array.dtype
    deferred = device is not None and device.defers_checks
    if floating:
        bad = (array < 0) | (array >= n) | (xp.floor(array) != array)  # NaN is bad too
    elif xp.isdtype(array.dtype, "integral"):
        array = xp.astype(array, xp.int64, copy=False)  # n may not fit a small dtype
        if deferred:  # (the mask is made again only to name a bad value)
            out, any_bad = CHECKED_INDICES(array, n)
            device.defer_check(any_bad, lambda: _message(
                xp, array, array_dtype, (array < 0) | (array >= n), n, who, what))
            return out
        bad = (array < 0) | (array >= n)
    else:
        raise TypeError(f"{who}: expected integer {what} (or floats holding whole numbers), "
                        f"found dtype {array.dtype}")
    if deferred:
        device.defer_check(xp.any(bad),
                           lambda: _message(xp, array, array_dtype, bad, n, who, what))
        return xp.astype(xp.where(bad, xp.zeros_like(array), array), xp.int64, copy=False)
    if bool(xp.any(bad)):  # the one read back; on failure, one more to name the value
        raise ValueError(_message(xp, array, array_dtype, bad, n, who, what))
    return xp.astype(array, xp.int64, copy=False)


def _message(xp: Any, array: Any, given: Any, bad: Any, n: int, who: str, what: str) -> str:
    """What is wrong with the first bad entry of `array` (reads it back); `given` is the
    dtype the caller passed, before the cast to int64."""
    first = int(xp.argmax(xp.astype(xp.reshape(bad, (-1,)), xp.int8)))
    value = xp.reshape(array, (-1,))[first]
    if xp.isdtype(array.dtype, "real floating"):
        value = float(value)
        if not value.is_integer():
            return f"{who}: {what} must be whole numbers, found {value}"
    else:
        value = int(value)
        if value < 0 and xp.isdtype(given, "unsigned integer"):
            value += 2 ** xp.iinfo(array.dtype).bits  # wrapped by the cast: the value as given
    return f"{who}: {what} must be in [0, {n}), found {value}"

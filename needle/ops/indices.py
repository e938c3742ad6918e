"""Index arrays (class labels, token ids): integers, or floats that hold whole numbers."""

from __future__ import annotations

from typing import Any


def as_index_array(xp: Any, array: Any, n: int, who: str, what: str = "indices") -> Any:
    """`array` as int64 indices in [0, n); float dtypes must hold whole numbers.

    Integer dtypes are the fast path. One device-to-host read checks every value; a bad one
    raises ValueError naming `who` and the value, a dtype that is neither raises TypeError.
    """
    floating, array_dtype = xp.isdtype(array.dtype, "real floating"), array.dtype
    if floating:
        bad = (array < 0) | (array >= n) | (xp.floor(array) != array)  # NaN is bad too
    elif xp.isdtype(array.dtype, "integral"):
        array = xp.astype(array, xp.int64, copy=False)  # n may not fit a small dtype
        bad = (array < 0) | (array >= n)
    else:
        raise TypeError(f"{who}: expected integer {what} (or floats holding whole numbers), "
                        f"found dtype {array.dtype}")
    if bool(xp.any(bad)):  # the one read back; on failure, one more to name the value
        first = int(xp.argmax(xp.astype(xp.reshape(bad, (-1,)), xp.int8)))
        value = xp.reshape(array, (-1,))[first]
        value = float(value) if floating else int(value)
        if value < 0 and xp.isdtype(array_dtype, "unsigned integer"):
            value += 2 ** xp.iinfo(array.dtype).bits  # wrapped by the cast: the value as given
        if floating and not value.is_integer():
            raise ValueError(f"{who}: {what} must be whole numbers, found {value}")
        raise ValueError(f"{who}: {what} must be in [0, {n}), found {value}")
    return xp.astype(array, xp.int64, copy=False)

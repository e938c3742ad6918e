"""A dtype's name, cached: numpy's `dtype.name` is a Python property that costs about 3 us
a read (the cuda kernels check their arrays' dtypes on every call)."""

from __future__ import annotations

from typing import Any

_NAMES: dict[Any, str] = {}


def dtype_name(dtype: Any) -> str:
    """`dtype.name` ("float32", ...), read once per dtype."""
    try:
        return _NAMES[dtype]
    except KeyError:
        name = _NAMES[dtype] = dtype.name
        return name

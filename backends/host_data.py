"""Host data for `Device.asarray`: any array, list or scalar as a numpy array, and the check
that its values fit an integer dtype before numpy's cast (which wraps them)."""

from __future__ import annotations

from typing import Any

import numpy as np


def host_array(obj: Any) -> np.ndarray:
    """Any array (numpy, cupy, array-api-strict, ...), list or scalar as a host numpy array
    in the native byte order (a '>f4' array becomes float32: no device holds '>f4')."""
    if isinstance(obj, np.ndarray):
        return native_order(obj)
    if type(obj).__module__.startswith(("cupy", "torch", "jax", "array_api_strict")):
        # another device's array (on a GPU too): its device copies it to the host, never
        # numpy's implicit conversion (which fails for GPU arrays)
        from . import device_of

        try:
            source = device_of(obj)
        except TypeError:  # not an array of a needle device (a torch.Size, say)
            source = None
        if source is not None:
            return source.to_numpy(obj)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "shape"):
        try:
            return np.from_dlpack(obj)
        except (BufferError, TypeError, RuntimeError, ValueError):
            pass
    return native_order(np.asarray(obj))


def native_order(array: np.ndarray) -> np.ndarray:
    """`array` itself, or a copy in the native byte order where it has another."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def check_fits(host: np.ndarray, target: np.dtype) -> None:
    """ValueError unless every value of `host` is one of the integer dtype `target`'s: numpy's
    cast wraps (2**40 as int32 is 0, 300 as uint8 44) and turns NaN into garbage."""
    kind = host.dtype.kind
    if kind == "c":
        raise TypeError(f"complex data for an array of dtype {target}")
    if kind not in "iuf" or not host.size:
        return
    if kind == "f" and not np.isfinite(host).all():
        raise ValueError(f"NaN or infinity in data for an array of dtype {target}")
    info = np.iinfo(target)
    low, high = host.min(), host.max()
    # (a float compared with info.max rounds it up: 2.0**63 would pass for int64)
    top = float(info.max) + 1 if kind == "f" else info.max + 1
    if low < info.min or high >= top:
        bad = low if low < info.min else high
        raise ValueError(f"the value {bad} does not fit dtype {target} "
                         f"[{info.min}, {info.max}]")


def out_of_range(xp: Any, array: Any, source: np.dtype, target: np.dtype) -> tuple | None:
    """check_fits on a device: (a 0-d bool array, True where a value of `array`, of dtype
    `source`, would wrap as integer dtype `target`; the message), or None where every value
    of `source` fits. Nothing is read: a device defers the check."""
    kind, info = source.kind, np.iinfo(target)
    if kind == "f":  # (info.max + 1 as a float: 2.0**63 must not pass for int64)
        bad = ~xp.isfinite(array) | (array < float(info.min)) | (array >= float(info.max) + 1)
    elif kind in "iu":
        have = np.iinfo(source)
        if have.min >= info.min and have.max <= info.max:
            return None
        bad = (array < max(info.min, have.min)) | (array > min(info.max, have.max))
    else:  # bools fit every integer dtype
        return None
    return xp.any(bad), (f"data of dtype {source} holds values out of the range of dtype "
                         f"{target} [{info.min}, {info.max}]"
                         + (" (or NaN or infinity)" if kind == "f" else ""))

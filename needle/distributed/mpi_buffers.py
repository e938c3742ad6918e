"""What MPI needs of device arrays (needle.distributed's transport): contiguous host or CUDA
buffers, numpy dtypes, overlap checks, and one pinned host buffer through which cuda arrays
reach an MPI that is not CUDA-aware. mpi4py itself is imported by needle.distributed.init()."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..backends import device_of


def dtype_of(arr: Any) -> np.dtype:
    """The numpy dtype of any device's array (array-api-strict's print as 'module.name')."""
    try:
        return np.dtype(arr.dtype)
    except TypeError:
        return np.dtype(str(arr.dtype).rsplit(".", 1)[-1])


def int64_pair(a: int, b: int) -> np.ndarray:
    """A host int64 buffer [a, b] (the ranks' agreement check reduces it)."""
    return np.array([a, b], dtype=np.int64)


def may_overlap(a: Any, b: Any) -> bool:
    """False where `a` and `b` surely use separate memory (numpy's bounds check); True for
    other arrays, which are then reduced from a copy (cheap on a GPU, made anyway on strict)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.may_share_memory(a, b))
    return True


def on_buffer(arr: Any, call: Callable[[Any], Any], cuda: Callable[[Any, Callable], Any]) -> Any:
    """Run `call(buffer)` on a contiguous host or CUDA buffer holding `arr`; the result array.

    cpu: `arr` itself when C-contiguous and writeable, else a contiguous copy (written back
    into `arr` when writeable). cuda (`__cuda_array_interface__`): `cuda(arr, call)` decides
    (the array itself or the pinned staging). Other devices: a host copy, returned as a new
    array of the same device.
    """
    if isinstance(arr, np.ndarray):
        if arr.flags.c_contiguous and arr.flags.writeable:
            call(arr)
            return arr
        buf = np.ascontiguousarray(arr).copy()
        call(buf)
        if arr.flags.writeable:
            arr[...] = buf
            return arr
        return buf
    if hasattr(arr, "__cuda_array_interface__"):
        return cuda(arr, call)
    device = device_of(arr)
    buf = np.ascontiguousarray(device.to_numpy(arr))
    call(buf)
    return device.from_numpy(buf)


def _pinned(nbytes: int, like: Any) -> np.ndarray:
    """`nbytes` of page-locked host memory from the device that holds `like`."""
    return device_of(like).empty_pinned(nbytes)


class HostStaging:
    """A grow-only pinned byte buffer: device -> host copy, the MPI call on the host view,
    host -> device copy back into the same array (so the collective stays in place).

    `alloc(nbytes, like)` makes the buffer (tests pass a plain numpy allocator); it is
    called again only when a larger array arrives.
    """

    def __init__(self, alloc: Callable[[int, Any], np.ndarray] = _pinned):
        self.alloc = alloc
        self.buffer: np.ndarray | None = None  # uint8, the largest size seen so far

    def view(self, shape: tuple[int, ...], dtype: Any, like: Any) -> np.ndarray:
        """A C-contiguous host view of the buffer with `shape` and `dtype`."""
        dtype = np.dtype(str(dtype))
        nbytes = math.prod(shape) * dtype.itemsize
        if self.buffer is None or self.buffer.nbytes < nbytes:
            self.buffer = self.alloc(max(nbytes, 1), like)
        return self.buffer[:nbytes].view(dtype).reshape(shape)

    def run(self, arr: Any, call: Callable[[np.ndarray], Any]) -> Any:
        """`call` on a host copy of the device array `arr`, copied back into `arr`."""
        host = self.view(tuple(arr.shape), arr.dtype, arr)
        if host.size:
            arr.get(out=host)  # cupy: device -> host into the pinned view (synchronous)
        call(host)
        if not arr.flags.c_contiguous:  # cupy's set() needs a contiguous destination
            contiguous = arr.copy()
            contiguous.set(host)
            arr[...] = contiguous
        elif host.size:
            arr.set(host)
        return arr

"""One pinned host buffer through which cuda arrays reach an MPI that is not CUDA-aware."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..backends import device_of


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

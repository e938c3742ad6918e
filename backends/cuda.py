"""The cuda device: cupy through array-api-compat, imported only when first used."""

from __future__ import annotations

from typing import Any

import numpy as np

from .device import Device
from .kernels import scatter_add_rows, strided_im2col

INSTALL_HINT = "install the GPU extra with `pip install needle[cuda]` (cupy-cuda12x)"


class CUDADevice(Device):
    """Arrays in GPU memory, computed with cupy. Constructing one never touches the GPU."""

    kind = "cuda"

    def __init__(self, index: int = 0):
        super().__init__(index)
        self._cupy: Any = None  # the cupy and cupyx modules, set by _load
        self._cupyx: Any = None

    def _probe(self) -> str:
        """Why cupy or GPU `index` is missing, or "" when both are there."""
        return _probe(self.index)

    def _load(self) -> tuple[Any, Any]:
        import array_api_compat.cupy as xp  # only after _probe found cupy and the GPU
        import cupy
        import cupyx

        self._cupy, self._cupyx = cupy, cupyx
        return xp, cupy.cuda.Device(self.index)

    def im2col(self, a: Any, kernel: tuple[int, int], stride: int, padding: int) -> Any:
        """The windows as one strided view of the padded input (cupy's), copied once."""
        with self._native:
            return strided_im2col(self._cupy.zeros, self._cupy.lib.stride_tricks.as_strided,
                                  a, kernel, stride, padding)

    def index_add(self, indices: Any, values: Any, n: int) -> Any:
        """cupyx.scatter_add (atomic adds) into zeros (n, ...)."""
        with self._native:
            return scatter_add_rows(self._cupy.zeros, self._cupyx.scatter_add, indices, values,
                                    n)

    def _from_dlpack(self, obj: Any) -> Any:
        """cupy's from_dlpack, with this GPU current."""
        with self._native:
            return self._cupy.from_dlpack(obj)

    def owns(self, array: Any) -> bool:
        """cupy arrays on this GPU live here."""
        if not type(array).__module__.startswith("cupy"):
            return False
        return array.device.id == self.index

    def from_numpy(self, array: np.ndarray) -> Any:
        """Copy a host array to this GPU."""
        self._require()  # RuntimeError with the install hint when cupy or the GPU is missing
        with self._native:
            return self._cupy.array(array, copy=True)

    def to_numpy(self, array: Any) -> np.ndarray:
        """Copy to the host (cupy refuses implicit conversion)."""
        self._require()
        return array.get()

    def empty_pinned(self, nbytes: int) -> np.ndarray:
        """`nbytes` of page-locked host memory as a uint8 numpy array (fast GPU copies);
        needle.distributed stages arrays through it for an MPI that is not CUDA-aware."""
        self._require()
        return self._cupyx.empty_pinned((nbytes,), dtype=np.uint8)


def _probe(index: int) -> str:
    """An explanation of what is missing for GPU `index`, or "" when it is usable."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a broken CUDA install
        return f"cuda() is unavailable: cupy cannot be imported ({e}); {INSTALL_HINT}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"cuda() is unavailable: no usable CUDA driver or GPU ({e}); {INSTALL_HINT}"
    if index >= count:
        return f"cuda({index}) is unavailable: this machine has {count} CUDA GPU(s)"
    return ""

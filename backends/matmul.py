"""Matrix products on cuda (the fast version of needle.ops.linalg.MATMUL): cupy.dot for 2-d
products, one direct cuBLAS call for a batch with a broadcast side, cupy.matmul else.

Host time per call on an H100 machine (cupy 14.2, float32, best of 3x50 calls):

    product                                   cupy.matmul  cupy.dot  direct (ctypes)
    (32768, 288) @ (288, 32)  conv forward        17.9 us   16.2 us   41.7 us
    (100, 1024) @ (1024, 512) linear              20.6 us   19.3 us   40.6 us
    (1, 8192, 32) @ (9, 32, 32)^T  conv input adj 73.3 us      -      41.1 us
    (64, 64, 16) @ (64, 16, 64)  attention heads  22.1 us      -      38.7 us

The direct call (backends/cublas_direct.py: cublasGemmStridedBatchedEx through ctypes on
needle's own handle, bound to cupy's current stream; what a captured CUDA graph calls)
gave the same bits as cupy.matmul in every case, but costs about 40 us in ctypes and
Python: it wins only where cupy.matmul broadcasts a batch of one (a convolution's input
adjoint), which the direct call reads with batch stride 0 instead. With every product
direct, a transformer b16 step took 8.3 ms where cupy's took 7.3. Without cuBLAS's library
(cupy older than 14 finds none), cupy.matmul.
"""

from __future__ import annotations

from typing import Any

from . import cublas_direct, device_of
from .dtype_names import dtype_name

#: which eager float products call cuBLAS directly: "all", "broadcast" (a batch broadcast
#: from one side), or none (False: cupy's)
EAGER_DIRECT: str | bool = "all"
#: why the direct calls are unavailable here (set on the first failure)
_UNAVAILABLE: list[str] = []


def _direct(gpu: Any) -> Any:
    """needle's cuBLAS handle on the current stream, or None (off, or no library)."""
    if not EAGER_DIRECT or _UNAVAILABLE:
        return None
    try:
        return cublas_direct.for_device(gpu).on_current_stream()
    except (ImportError, OSError, AttributeError) as e:  # no cuda.pathfinder or libcublas
        _UNAVAILABLE.append(f"{type(e).__name__}: {e}")
        return None


def matmul_cuda(a: Any, b: Any) -> Any:
    """a @ b for two float arrays of one dtype: 2-d by cupy.dot, a broadcast batch by one
    direct cuBLAS call; NotImplemented (the reference, cupy.matmul) else. While a CUDA graph
    is captured, every product goes to the capture's handle (cupy refuses to call cuBLAS
    then)."""
    gpu = device_of(a)
    capture = gpu.capture_matmul
    if capture is not None:
        return capture(a, b)
    if a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype or dtype_name(a.dtype) not in ("float32",
                                                                               "float64"):
        return NotImplemented
    if EAGER_DIRECT == "all" or (tuple(a.shape[:-2]) != tuple(b.shape[:-2])
                                 and EAGER_DIRECT == "broadcast"):
        blas = _direct(gpu)
        if blas is not None:
            return blas.matmul(a, b)
    if a.ndim == 2 and b.ndim == 2:
        with gpu.native:
            return gpu.cupy.dot(a, b)
    return NotImplemented

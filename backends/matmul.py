"""Matrix products on cuda (the fast version of needle.ops.linalg.MATMUL): every float32 and
float64 product by one direct cuBLAS call (backends/cublas_direct.py: cublasGemmEx or
cublasGemmStridedBatchedEx on needle's own handle, on cupy's current stream, eagerly through
cupy's Cython wrappers of them), the same calls a captured CUDA graph makes through ctypes;
cupy.dot / cupy.matmul where the library cannot be found (cupy older than 14) or with
EAGER_DIRECT off.

Host time per call on an H100 machine (cupy 14.2, float32, best of 3x50 calls; the direct
call keeps the cuBLAS call of a layout it met before and changes only the pointers):

    product                                   cupy.matmul  cupy.dot  direct  (run of 2026-11-27)
    (32768, 288) @ (288, 32)  conv forward        25.8 us   24.5 us  27.3 us
    (100, 1024) @ (1024, 512) linear              28.6 us   27.2 us  29.2 us
    (1, 8192, 32) @ (9, 32, 32)^T  conv input adj 127.5 us     -     36.1 us
    (64, 64, 16) @ (64, 16, 64)  attention heads  42.3 us      -     37.4 us
    (64, 16, 64) @ (64, 128)  a 3-d linear       120.3 us      -     39.8 us

The direct call gave the same bits as cupy.matmul in every case. Whole eager steps with
every product direct against direct only for a broadcast batch (cupy's else), alternating,
medians: ResNet9 b128 8.30 against 9.39 ms, the transformer at b16 7.40 against 7.08,
ResNet9 b1024 13.35 against 11.80, MLPResNet h1024 b100 6.89 against 6.84: within the
host's noise either way. Every product direct is kept for what it gives besides: an eager
step makes the same cuBLAS calls as its captured graph (one handle; on Hopper, workspaces of
one size).
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
    """a @ b for two float arrays of one dtype by one direct cuBLAS call (see EAGER_DIRECT;
    without the library: 2-d by cupy.dot, else NotImplemented, the reference's
    cupy.matmul). While a CUDA graph is captured, every product goes to the capture's
    handle (cupy refuses to call cuBLAS then)."""
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
        with gpu.current:
            return gpu.cupy.dot(a, b)
    return NotImplemented

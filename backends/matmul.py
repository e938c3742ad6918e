"""2-d products on cuda through cupy.dot (the fast version of needle.ops.linalg.MATMUL).

cupy.matmul goes through cupy's generalised-ufunc machinery in Python (signature, broadcast
and output checks: about 40-70 us a call on an H100 host, seen in a profile) before the same
cuBLAS product that cupy.dot calls directly; a transformer step makes about 50 of them.
"""

from __future__ import annotations

from typing import Any

from . import device_of


def matmul_cuda(a: Any, b: Any) -> Any:
    """a @ b for two 2-d float arrays of one dtype; NotImplemented (the reference) else.
    While a CUDA graph is captured, every product goes to cuBLAS directly (cupy refuses to
    call it then: backends/cublas_direct.py)."""
    gpu = device_of(a)
    capture = gpu.capture_matmul
    if capture is not None:
        return capture(a, b)
    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype.kind != "f":
        return NotImplemented
    with gpu.native:
        return gpu.cupy.dot(a, b)

"""Many small arrays one after another in one flat array by one cupy kernel (the fast version
of needle.optim.flat.FLAT_CONCAT: the gradients of an optimizer's small parameters).

cupy's concatenate of many arrays copies tables of their pointers and sizes from the host for
its kernel; in an H100 profile of a ResNet9 step (about 30 small parameters) that one call
took 0.21 ms of host time, as much as fifteen kernel launches. Here the pointers and where
each array starts are the kernel's own arguments (up to SLOTS arrays a launch), so a launch
copies nothing from the host, and a CUDA graph can capture it. A copy, so the same bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device_of
from .dtype_names import dtype_name

#: arrays a launch copies (its arguments: out, SLOTS pointers and SLOTS + 1 starts, 528 bytes of
#: the 4 KB a kernel's arguments may take)
SLOTS = 32
#: blocks of 256 threads per array at most (each thread copies every 256 * _BLOCKS-th element)
_BLOCKS = 64


def concat_source(slots: int) -> str:
    """CUDA C of `flat_concat`: block row y copies array y (pointer p<y>) into out[s<y>:s<y+1>]."""
    pointers = ", ".join(f"const T* p{k}" for k in range(slots))
    starts = ", ".join(f"long long s{k}" for k in range(slots + 1))
    cases = "\n".join(f"    case {k}: src = p{k}; start = s{k}; stop = s{k + 1}; break;"
                      for k in range(slots))
    return f"""
extern "C" __global__ void flat_concat(T* out, {pointers}, {starts}) {{
    const T* src;
    long long start, stop;
    switch (blockIdx.y) {{
{cases}
    default: return;
    }}
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = start + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < stop;
         i += step)
        out[i] = src[i - start];
}}
"""


SOURCE = concat_source(SLOTS)


def flat_concat_cuda(arrays: list) -> Any:
    """The arrays' elements (each in C order) one after another, by one launch per SLOTS
    arrays (float32 or float64, all of one dtype; else NotImplemented: the reference)."""
    first = arrays[0]
    t = first.dtype
    dtype = dtype_name(t)
    if dtype not in ("float32", "float64"):
        return NotImplemented
    for a in arrays:
        if a.dtype != t:
            return NotImplemented
    gpu = device_of(first)
    cp = gpu.cupy
    with gpu.current:
        arrays = [cp.ascontiguousarray(a) for a in arrays]
        sizes = [a.size for a in arrays]
        bounds = np.cumsum([0, *sizes], dtype=np.int64)  # array k: out[bounds[k]:bounds[k + 1]]
        out = cp.empty((int(bounds[-1]),), dtype=t)
        kernel = gpu.raw_kernel("flat_concat", SOURCE, "flat_concat", dtype)
        for k in range(0, len(arrays), SLOTS):
            chunk = arrays[k:k + SLOTS]
            longest = max(sizes[k:k + SLOTS])
            if not longest:
                continue
            m = len(chunk)
            starts = list(bounds[k:k + m + 1])  # (numpy's int64 scalars)
            unused = SLOTS - m  # (never read: their block rows are not launched)
            kernel((min(_BLOCKS, -(-longest // 256)), m), (256,),
                   (out, *chunk, *[out] * unused, *starts, *starts[-1:] * unused))
    return out

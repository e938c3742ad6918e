"""Sliding windows by basic slicing, shared by convolution and pooling.

Window offset (i, j) seen from every output position at once is one strided slice of the
input, `x[..., i:i + s*(Ho-1) + 1:s, ..., j:j + s*(Wo-1) + 1:s, ...]` on the two spatial
axes: gathering the kh*kw slices gives every window with no loop over pixels, and adding
them back into zeros is the gather's adjoint (overlapping windows add up).
"""

from __future__ import annotations

from typing import Any

from ..backends import namespace
from .movement import write_at


def window_slices(ndim: int, axes: tuple[int, int], kernel: tuple[int, int], stride: int,
                  out_hw: tuple[int, int]) -> list[tuple]:
    """For each kernel offset (i, j), row-major: the index of its strided slice."""
    (kh, kw), (ho, wo), s = kernel, out_hw, stride
    out = []
    for i in range(kh):
        for j in range(kw):
            index = [slice(None)] * ndim
            index[axes[0]] = slice(i, i + s * (ho - 1) + 1, s)
            index[axes[1]] = slice(j, j + s * (wo - 1) + 1, s)
            out.append(tuple(index))
    return out


def add_windows(taps: Any, shape: tuple, axes: tuple[int, int], kernel: tuple[int, int],
                stride: int) -> Any:
    """Zeros of `shape` with each tap-major window `taps[t]` added where it was gathered.

    Slice assignment (`write_at`): in place where arrays are writeable, an updated copy on
    jax. Disjoint windows (stride >= kernel) are written, not added.
    """
    xp = namespace(taps)
    out = xp.zeros(shape, dtype=taps.dtype, device=taps.device)
    out_hw = (taps.shape[1 + axes[0]], taps.shape[1 + axes[1]])
    disjoint = stride >= kernel[0] and stride >= kernel[1]
    for t, index in enumerate(window_slices(len(shape), axes, kernel, stride, out_hw)):
        if disjoint:
            out = write_at(xp, out, index, taps[t, ...])
        else:
            out = write_at(xp, out, index, taps[t, ...], add=True)
    return out

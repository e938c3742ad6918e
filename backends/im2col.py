"""The window gather of a convolution (im2col) on numpy and cupy: one strided view of the
zero-padded input, copied once (fast versions of needle.ops.conv.IM2COL)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def strided_im2col(zeros: Callable[..., Any], as_strided: Callable[..., Any], a: Any,
                   kernel: tuple[int, int], stride: int, padding: int) -> Any:
    """NHWC `a` zero-padded, its windows as one strided view copied once into columns.

    `zeros` and `as_strided` are the array library's (numpy's or cupy's: both count strides
    in bytes). Returns (N, Ho, Wo, kh*kw*C) ordered (i, j, c), as the portable gather does.
    """
    n, h, w, c = a.shape
    p = padding
    if p:  # zeros and one slice copy: numpy's pad costs several times more on small inputs
        padded = zeros((n, h + 2 * p, w + 2 * p, c), dtype=a.dtype)
        padded[:, p:p + h, p:p + w, :] = a
        a = padded
    (kh, kw), s = kernel, stride
    ho, wo = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    sn, sh, sw, sc = a.strides
    view = as_strided(a, (n, ho, wo, kh, kw, c), (sn, sh * s, sw * s, sh, sw, sc))
    return view.reshape(n, ho, wo, kh * kw * c)


def _read_only_strided(a: np.ndarray, shape: tuple, strides: tuple) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(a, shape, strides, writeable=False)


def im2col_cpu(a: np.ndarray, kernel: tuple[int, int], stride: int, padding: int) -> np.ndarray:
    """The windows as one zero-copy strided view of the padded input, copied once."""
    return strided_im2col(np.zeros, _read_only_strided, a, kernel, stride, padding)


def im2col_cuda(a: Any, kernel: tuple[int, int], stride: int, padding: int) -> Any:
    """The windows as one strided view of the padded input (cupy's), copied once."""
    from . import device_of

    gpu = device_of(a)
    cp = gpu.cupy
    with gpu.native:
        return strided_im2col(cp.zeros, cp.lib.stride_tricks.as_strided, a, kernel, stride,
                              padding)

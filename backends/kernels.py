"""Device kernels shared by numpy and cupy: the window gather of a convolution (im2col)."""

from __future__ import annotations

from typing import Any, Callable


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


def scatter_add_rows(zeros: Callable[..., Any], scatter_add: Callable[..., Any], indices: Any,
                     values: Any, n: int) -> Any:
    """Rows of (m, ...) `values` added into zeros of shape (n, ...) at the (m,) `indices`;
    repeated indices accumulate.

    `zeros` is the array library's, `scatter_add(out, indices, values)` an unbuffered
    in-place add (cupyx.scatter_add; numpy's np.add.at has the same signature).
    """
    out = zeros((n,) + tuple(values.shape[1:]), dtype=values.dtype)
    scatter_add(out, indices, values)
    return out

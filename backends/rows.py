"""BatchNorm's NC... layout seen as rows: (N, C, ...) normalised over every axis but 1 is the
(N * ..., C) array normalised over axis 0, the layout BatchNorm1d's kernels take. Array-API
calls only (the portable normalisation and the cuda kernels share these)."""

from __future__ import annotations

from typing import Any


def channels(shape: tuple[int, ...], axes: tuple[int, ...]) -> int | None:
    """The number of channels C when `axes` are every axis of `shape` but 1 (3 or more
    axes: BatchNorm2d's NCHW), else None."""
    if len(shape) >= 3 and tuple(axes) == (0, *range(2, len(shape))):
        return shape[1]
    return None


def as_rows(xp: Any, a: Any, c: int) -> Any:
    """(N, C, ...) -> (N * ..., C): the channels moved last, then flattened (no copy when `a`
    is channels-last in memory, as a convolution's NCHW output is)."""
    return xp.reshape(xp.permute_dims(a, (0, *range(2, a.ndim), 1)), (-1, c))


def from_rows(xp: Any, a: Any, shape: tuple[int, ...]) -> Any:
    """The inverse of `as_rows`, for an array of NC... `shape` (a permuted view)."""
    n = len(shape)
    return xp.permute_dims(xp.reshape(a, (shape[0], *shape[2:], shape[1])),
                           (0, n - 1, *range(1, n - 1)))

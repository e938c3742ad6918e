"""The one axis normaliser, for every op that takes axes (reductions, flip, permute, stack, ...)."""

from __future__ import annotations

import operator
from typing import Any


def freeze_axes(axes: Any) -> Any:
    """A list of axes as a tuple (immutable, hashable), anything else as given: ops store this."""
    return tuple(axes) if isinstance(axes, list) else axes


def _axis(op: str, axis: Any, ndim: int, shape: tuple) -> int:
    """One axis in -ndim..ndim-1 as a non-negative int."""
    if axis.__class__ is not int:
        if isinstance(axis, bool) or not hasattr(axis, "__index__"):
            raise TypeError(f"{op}: an axis must be an int, got {axis!r} (shape {shape})")
        axis = operator.index(axis)  # numpy integers
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range {-ndim}..{ndim - 1} "
                         f"for shape {shape}")
    return axis + ndim if axis < 0 else axis


def normalize_axis(op: str, axis: Any, shape: tuple, ndim: int | None = None) -> int:
    """`axis` as a non-negative int below `ndim` (default len(shape); stack passes one more)."""
    shape = tuple(shape)
    return _axis(op, axis, len(shape) if ndim is None else ndim, shape)


def normalize_axes(op: str, axes: Any, shape: tuple) -> tuple[int, ...]:
    """`axes` (None for all, an int, a tuple or a list) as non-negative ints, in the given order.

    Negative axes count from the end; out-of-range or repeated axes raise ValueError and
    anything but ints raises TypeError, each naming `op`, the axis and the shape.
    """
    ndim = len(shape)
    if axes is None:
        return tuple(range(ndim))
    # the common cases first, kept cheap (Summation calls this on every use)
    if axes.__class__ is int and -ndim <= axes < ndim:
        return (axes % ndim,)
    if axes.__class__ is tuple:
        out = tuple([ax % ndim for ax in axes if ax.__class__ is int and -ndim <= ax < ndim])
        if len(out) == len(axes) and (len(out) < 2 or len(set(out)) == len(out)):
            return out
    return _checked_axes(op, axes, tuple(shape))


def _checked_axes(op: str, axes: Any, shape: tuple) -> tuple[int, ...]:
    """normalize_axes for the rest (lists, numpy integers) and for every error."""
    if not isinstance(axes, (tuple, list)):
        return (_axis(op, axes, len(shape), shape),)
    out = tuple([_axis(op, ax, len(shape), shape) for ax in axes])
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: repeated axis in {tuple(axes)} for shape {shape}")
    return out


def int_at_least(op: str, name: str, value: Any, low: int) -> int:
    """An int argument (kernel size, stride, padding, dilation) >= `low`: TypeError for
    anything but integers (bools too), ValueError below `low`, each naming `op` and `name`."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{op}: {name} must be an int, got {value!r}")
    value = operator.index(value)
    if value < low:
        raise ValueError(f"{op}: {name} must be >= {low}, got {value}")
    return value

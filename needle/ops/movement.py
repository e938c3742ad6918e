"""Ops that move data around: reshape, broadcast, transpose, permute, flip, dilate, indexing."""

from __future__ import annotations

import math
from typing import Any

from array_api_compat import is_writeable_array
from array_api_extra import at

from ..autograd.tensor import Tensor, TensorOp
from ..backends import namespace
from ..kernels import SUM
from .axes import freeze_axes, int_at_least, normalize_axes, normalize_axis


def check_reshape(shape: tuple, new: tuple) -> None:
    """ValueError naming both shapes unless `shape` can be viewed as `new` (one -1 allowed);
    checked here because libraries raise different exception types."""
    known, unknown = 1, 0
    for n in new:
        if n == -1:
            unknown += 1
        elif n < 0:
            unknown = 2  # a size below -1 is never valid
        else:
            known *= n
    size = math.prod(shape)
    if unknown > 1 or (size != known if not unknown else (known == 0 or size % known)):
        raise ValueError(f"reshape: cannot reshape {shape} ({size} elements) into {new}")


def check_broadcast_to(shape: tuple, new: tuple) -> None:
    """ValueError naming both shapes unless `shape` broadcasts to `new` by numpy's rules."""
    lead = len(new) - len(shape)
    if lead < 0 or any(m != n and m != 1 for m, n in zip(shape, new[lead:])) or any(
            n < 0 for n in new):
        raise ValueError(f"broadcast_to: cannot broadcast {shape} to {new}")


class Reshape(TensorOp):
    """The same elements in a new shape (one entry may be -1)."""

    def __init__(self, shape):
        self.shape = tuple(shape)

    def compute(self, a):
        check_reshape(tuple(a.shape), self.shape)
        return namespace(a).reshape(a, self.shape)

    def gradient(self, out_grad, node):
        return reshape(out_grad, node.inputs[0].shape)


def reshape(a: Tensor, shape: tuple[int, ...]) -> Tensor:
    """The same elements in a new shape."""
    return Reshape(shape)(a)


class BroadcastTo(TensorOp):
    """Broadcast to `shape` by numpy's rules."""

    def __init__(self, shape):
        self.shape = tuple(shape)

    def compute(self, a):
        check_broadcast_to(tuple(a.shape), self.shape)
        return namespace(a).broadcast_to(a, self.shape)

    def gradient(self, out_grad, node):
        return sum_to_shape(out_grad, node.inputs[0].shape)


def broadcast_to(a: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Broadcast to `shape`."""
    return BroadcastTo(shape)(a)


class SumToShape(TensorOp):
    """Sum over `axes` (keeping them), then reshape to `shape`: the adjoint of BroadcastTo.

    `sum_to_shape` works out the axes from the broadcast shape and the target shape.
    """

    def __init__(self, shape, axes):
        self.shape = tuple(shape)
        self.axes = tuple(axes)

    def compute(self, a):
        axes = self.axes
        if axes:
            # without the summed axes when that is the shape already (a bias's (C,) from
            # (N, T, C)): no reshape
            dropped = len(a.shape) - len(axes) == len(self.shape) and all(
                s == t for s, t in zip((n for i, n in enumerate(a.shape) if i not in axes),
                                       self.shape))
            a = SUM(a, axes, not dropped)
        return a if tuple(a.shape) == self.shape else namespace(a).reshape(a, self.shape)

    def gradient(self, out_grad, node):
        return broadcast_to(out_grad, node.inputs[0].shape)


def broadcast_axes(shape: tuple, target: tuple) -> tuple[int, ...]:
    """The axes of `shape` that broadcasting `target` to it added or stretched."""
    lead = len(shape) - len(target)
    if lead < 0 or any(s != 1 and shape[lead + i] != s for i, s in enumerate(target)):
        raise ValueError(f"sum_to_shape: cannot sum shape {shape} to shape {target}")
    return tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(target) if s == 1 and shape[lead + i] != 1
    )


def sum_to_shape(t: Tensor, shape: tuple) -> Tensor:
    """`t` (a Tensor or an array) summed back to `shape`, from which it was broadcast (`t`
    itself if it has it)."""
    shape, t_shape = tuple(shape), t.shape
    if t_shape.__class__ is not tuple:  # an array's (a Tensor's is a tuple already)
        t_shape = tuple(t_shape)
    if t_shape == shape:
        return t
    return SumToShape(shape, broadcast_axes(t_shape, shape))(t)


def _swap_axes(axes, shape: tuple) -> tuple[int, ...]:
    ndim = len(shape)
    if axes is None:
        i, j = ndim - 2, ndim - 1
    else:
        if not isinstance(axes, tuple) or len(axes) != 2:
            raise ValueError(f"transpose: swaps two axes, got {axes!r} for shape {shape}; "
                             "use permute")
        i, j = (normalize_axis("transpose", ax, shape) for ax in axes)
    perm = list(range(ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return tuple(perm)


class Transpose(TensorOp):
    """Swap two axes (by default the last two)."""

    def __init__(self, axes=None):
        self.axes = freeze_axes(axes)

    def compute(self, a):
        if a.ndim < 2:
            raise ValueError(f"transpose needs at least 2 dimensions, got shape {tuple(a.shape)}")
        return namespace(a).permute_dims(a, _swap_axes(self.axes, tuple(a.shape)))

    def gradient(self, out_grad, node):
        return transpose(out_grad, self.axes)


def transpose(a: Tensor, axes: tuple[int, int] | None = None) -> Tensor:
    """Swap two axes (by default the last two)."""
    return Transpose(axes)(a)


class Permute(TensorOp):
    """Reorder all axes: output axis i is input axis `axes[i]`."""

    def __init__(self, axes):
        if axes is None:
            raise TypeError("permute: axes must be a tuple or list naming every axis, got None")
        self.axes = freeze_axes(axes)

    def compute(self, a):
        shape = tuple(a.shape)
        axes = normalize_axes("permute", self.axes, shape)
        if len(axes) != len(shape):
            raise ValueError(f"permute: {self.axes} is not a permutation of the axes of "
                             f"shape {shape}")
        return namespace(a).permute_dims(a, axes)

    def gradient(self, out_grad, node):
        axes = normalize_axes("permute", self.axes, out_grad.shape)
        inverse = [0] * len(axes)
        for i, ax in enumerate(axes):
            inverse[ax] = i
        return permute(out_grad, tuple(inverse))


def permute(a: Tensor, axes: tuple[int, ...]) -> Tensor:
    """Reorder all axes."""
    return Permute(axes)(a)


class Flip(TensorOp):
    """Reverse the order of elements along `axes` (None: all)."""

    def __init__(self, axes):
        self.axes = freeze_axes(axes)

    def compute(self, a):
        return namespace(a).flip(a, axis=normalize_axes("flip", self.axes, tuple(a.shape)))

    def gradient(self, out_grad, node):
        return flip(out_grad, self.axes)


def flip(a: Tensor, axes: int | tuple[int, ...] | None) -> Tensor:
    """Reverse along `axes`."""
    return Flip(axes)(a)


def _dilation(op: str, dilation) -> int:
    """A dilation: an int >= 0."""
    return int_at_least(op, "dilation", dilation, 0)


def _interleave_zeros(xp, a, axis: int, d: int):
    """`d` zeros after every element along `axis`: (.., n, ..) -> (.., n*(d+1), ..)."""
    if d == 0:
        return a
    z = xp.zeros_like(a)
    a = xp.stack([a] + [z] * d, axis=axis + 1)  # (.., n, d+1, ..)
    shape = tuple(a.shape)
    return xp.reshape(a, shape[:axis] + (shape[axis] * (d + 1),) + shape[axis + 2:])


class Dilate(TensorOp):
    """Insert `dilation` zeros after every element along each of `axes` (n -> n*(d+1))."""

    def __init__(self, axes, dilation: int):
        self.axes = freeze_axes(axes)
        self.dilation = _dilation("dilate", dilation)

    def compute(self, a):
        xp = namespace(a)
        for ax in normalize_axes("dilate", self.axes, tuple(a.shape)):
            a = _interleave_zeros(xp, a, ax, self.dilation)
        return a

    def gradient(self, out_grad, node):
        return undilate(out_grad, self.axes, self.dilation)


def dilate(a: Tensor, axes: int | tuple[int, ...] | None, dilation: int) -> Tensor:
    """Insert `dilation` zeros after each element along `axes`."""
    return Dilate(axes, dilation)(a)


class UnDilate(TensorOp):
    """Keep every (dilation+1)-th element along `axes`: the inverse of Dilate."""

    def __init__(self, axes, dilation: int):
        self.axes = freeze_axes(axes)
        self.dilation = _dilation("undilate", dilation)

    def compute(self, a):
        axes = normalize_axes("undilate", self.axes, tuple(a.shape))
        step = self.dilation + 1
        return a[tuple(slice(None, None, step) if i in axes else slice(None)
                       for i in range(a.ndim))]

    def gradient(self, out_grad, node):
        # dilate gives each axis n*(d+1) entries: trimmed to the input's length where that
        # was no multiple of d+1 (the entries past it were never read)
        shape = tuple(node.inputs[0].shape)
        grad = dilate(out_grad, self.axes, self.dilation)
        if tuple(grad.shape) == shape:
            return grad
        return GetItem(tuple(slice(0, n, 1) for n in shape))(grad)


def undilate(a: Tensor, axes: int | tuple[int, ...] | None, dilation: int) -> Tensor:
    """Keep every (dilation+1)-th element along `axes`."""
    return UnDilate(axes, dilation)(a)


def normalize_index(index: Any, shape: tuple) -> tuple:
    """An index of ints, slices and one Ellipsis as a tuple with one int or slice per axis."""
    if not isinstance(index, tuple):
        index = (index,)
    for item in index:
        if not (item is Ellipsis or isinstance(item, (int, slice))) or isinstance(item, bool):
            raise TypeError(
                f"tensor indices must be ints, slices or ..., got {type(item).__name__}"
            )
    n_ell = sum(item is Ellipsis for item in index)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n_axes = len(index) - n_ell
    if n_axes > len(shape):
        raise IndexError(f"too many indices ({n_axes}) for a tensor of shape {tuple(shape)}")
    if n_ell:
        pos = index.index(Ellipsis)
        index = index[:pos] + (slice(None),) * (len(shape) - n_axes) + index[pos + 1:]
    index = index + (slice(None),) * (len(shape) - len(index))
    out = []
    for item, size in zip(index, shape):
        if isinstance(item, int):
            if not -size <= item < size:
                raise IndexError(f"index {item} is out of bounds for an axis of size {size}")
            item %= size
        elif item.step is None or item.step >= 0:  # (a step of 0: ValueError)
            item = _clip_slice(item, size)
        out.append(item)
    return tuple(out)


def _clip_slice(item: slice, size: int) -> slice:
    """A forward slice with its bounds clipped to an axis of `size`, as numpy takes them
    (strict refuses bounds outside the axis), and its step to the axis length (the same
    entries: torch and jax broke on steps of 2**31 and more); negative-step slices are
    `forward_steps`'s."""
    start, stop, step = item.indices(size)
    return slice(start, max(start, stop), min(step, max(size, 1)))


def write_at(xp: Any, out: Any, index: tuple, value: Any, add: bool = False) -> Any:
    """`out[index] = value` (`+=` with `add`), returning `out`: in place where arrays are
    writeable, else (jax) array-api-extra's `at`, which returns the updated copy."""
    if is_writeable_array(out):
        if add:
            out[index] += value
        else:
            out[index] = value
        return out
    return at(out, index).add(value, xp=xp) if add else at(out, index).set(value, xp=xp)


def forward_steps(index: tuple, shape: tuple) -> tuple[tuple, tuple[int, ...]]:
    """A normalized index with every negative-step slice made positive, and the axes of the
    result to flip after indexing with it (torch has no negative steps); steps are clipped to
    the axis length, as `_clip_slice` clips them."""
    out, flips, axis = [], [], 0
    for item, size in zip(index, shape):
        if isinstance(item, slice):
            if item.step is not None and item.step < 0:
                picked = range(*item.indices(size))
                item = (slice(picked[-1], picked[0] + 1, min(-item.step, size)) if picked
                        else slice(0, 0))
                flips.append(axis)
            axis += 1
        out.append(item)
    return tuple(out), tuple(flips)


def _steps_forward(index: tuple) -> bool:
    return not any(isinstance(i, slice) and i.step is not None and i.step < 0 for i in index)


class GetItem(TensorOp):
    """a[index] for ints and slices."""

    def __init__(self, index: tuple):
        self.index = index

    def compute(self, a):
        if _steps_forward(self.index):
            return a[self.index]
        index, flips = forward_steps(self.index, tuple(a.shape))
        return namespace(a).flip(a[index], axis=flips)

    def gradient(self, out_grad, node):
        return ScatterItem(self.index, node.inputs[0].shape)(out_grad)


def get_item(a: Tensor, index: Any) -> Tensor:
    """a[index] with ints, slices and one Ellipsis."""
    return GetItem(normalize_index(index, a.shape))(a)


class ScatterItem(TensorOp):
    """Zeros of `shape` with `a` written at `index`: the adjoint of GetItem."""

    def __init__(self, index: tuple, shape: tuple):
        self.shape = tuple(shape)
        self.index = normalize_index(index, self.shape)

    def compute(self, a):
        # a write into fresh zeros touches only the written part (on numpy 10x faster than
        # concatenating zero blocks); an updated copy on immutable arrays (jax)
        xp = namespace(a)
        index = self.index
        if not _steps_forward(index):
            index, flips = forward_steps(index, self.shape)
            a = xp.flip(a, axis=flips)
        out = xp.zeros(self.shape, dtype=a.dtype, device=getattr(a, "device", None))
        return write_at(xp, out, index, a)

    def gradient(self, out_grad, node):
        return GetItem(self.index)(out_grad)

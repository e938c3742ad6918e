"""Ops that move data around: reshape, broadcast, transpose, permute, flip, dilate, indexing."""

from __future__ import annotations

from ..autograd import Tensor, TensorOp
from ..backends import namespace


class Reshape(TensorOp):
    """The same elements in a new shape (one entry may be -1)."""

    def __init__(self, shape):
        self.shape = tuple(shape)

    def compute(self, a):
        try:
            return namespace(a).reshape(a, self.shape)
        except ValueError as e:
            raise ValueError(f"reshape: cannot reshape {tuple(a.shape)} into {self.shape} "
                             f"({e})") from None

    def gradient(self, out_grad, node):
        return reshape(out_grad, node.inputs[0].shape)


def reshape(a: Tensor, shape) -> Tensor:
    """The same elements in a new shape."""
    return Reshape(shape)(a)


class BroadcastTo(TensorOp):
    """Broadcast to `shape` by numpy's rules."""

    def __init__(self, shape):
        self.shape = tuple(shape)

    def compute(self, a):
        try:
            return namespace(a).broadcast_to(a, self.shape)
        except ValueError as e:
            raise ValueError(f"broadcast_to: cannot broadcast {tuple(a.shape)} to "
                             f"{self.shape} ({e})") from None

    def gradient(self, out_grad, node):
        from .reduce import sum_to_shape  # reduce builds on this module

        return sum_to_shape(out_grad, node.inputs[0].shape)


def broadcast_to(a: Tensor, shape) -> Tensor:
    """Broadcast to `shape`."""
    return BroadcastTo(shape)(a)


def _swap_axes(axes, ndim: int) -> tuple[int, ...]:
    if axes is None:
        i, j = ndim - 2, ndim - 1
    else:
        if len(axes) != 2:
            raise ValueError(f"transpose swaps two axes, got {tuple(axes)}; use permute")
        i, j = (ax % ndim for ax in axes)
    perm = list(range(ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return tuple(perm)


class Transpose(TensorOp):
    """Swap two axes (by default the last two)."""

    def __init__(self, axes=None):
        self.axes = None if axes is None else tuple(axes)

    def compute(self, a):
        if a.ndim < 2:
            raise ValueError(f"transpose needs at least 2 dimensions, got shape {tuple(a.shape)}")
        return namespace(a).permute_dims(a, _swap_axes(self.axes, a.ndim))

    def gradient(self, out_grad, node):
        return transpose(out_grad, self.axes)


def transpose(a: Tensor, axes=None) -> Tensor:
    """Swap two axes (by default the last two)."""
    return Transpose(axes)(a)


class Permute(TensorOp):
    """Reorder all axes: output axis i is input axis `axes[i]`."""

    def __init__(self, axes):
        self.axes = tuple(axes)

    def compute(self, a):
        if sorted(ax % a.ndim for ax in self.axes) != list(range(a.ndim)):
            raise ValueError(f"permute: {self.axes} is not a permutation of {a.ndim} axes")
        return namespace(a).permute_dims(a, self.axes)

    def gradient(self, out_grad, node):
        n = len(self.axes)
        inverse = [0] * n
        for i, ax in enumerate(self.axes):
            inverse[ax % n] = i
        return permute(out_grad, tuple(inverse))


def permute(a: Tensor, axes) -> Tensor:
    """Reorder all axes."""
    return Permute(axes)(a)


class Flip(TensorOp):
    """Reverse the order of elements along `axes`."""

    def __init__(self, axes):
        self.axes = (axes,) if isinstance(axes, int) else tuple(axes)

    def compute(self, a):
        return namespace(a).flip(a, axis=self.axes)

    def gradient(self, out_grad, node):
        return flip(out_grad, self.axes)


def flip(a: Tensor, axes) -> Tensor:
    """Reverse along `axes`."""
    return Flip(axes)(a)


def _check_axes(op: str, axes: tuple, ndim: int) -> tuple[int, ...]:
    for ax in axes:
        if not -ndim <= ax < ndim:
            raise ValueError(f"{op}: axis {ax} is out of range for a {ndim}-d tensor")
    return tuple(ax % ndim for ax in axes)


class Dilate(TensorOp):
    """Insert `dilation` zeros after every element along each of `axes` (n -> n*(d+1))."""

    def __init__(self, axes, dilation: int):
        self.axes = (axes,) if isinstance(axes, int) else tuple(axes)
        self.dilation = int(dilation)

    def compute(self, a):
        xp = namespace(a)
        d = self.dilation
        for ax in _check_axes("dilate", self.axes, a.ndim):
            if d == 0:
                break
            # (.., n, ..) -> (.., n, d+1, ..), zeros after each element -> (.., n*(d+1), ..)
            z = xp.zeros_like(a)
            a = xp.stack([a] + [z] * d, axis=ax + 1)
            shape = list(a.shape)
            a = xp.reshape(a, tuple(shape[:ax]) + (shape[ax] * (d + 1),) + tuple(shape[ax + 2:]))
        return a

    def gradient(self, out_grad, node):
        return undilate(out_grad, self.axes, self.dilation)


def dilate(a: Tensor, axes, dilation: int) -> Tensor:
    """Insert `dilation` zeros after each element along `axes`."""
    return Dilate(axes, dilation)(a)


class UnDilate(TensorOp):
    """Keep every (dilation+1)-th element along `axes`: the inverse of Dilate."""

    def __init__(self, axes, dilation: int):
        self.axes = (axes,) if isinstance(axes, int) else tuple(axes)
        self.dilation = int(dilation)

    def compute(self, a):
        axes = _check_axes("undilate", self.axes, a.ndim)
        step = self.dilation + 1
        return a[tuple(slice(None, None, step) if i in axes else slice(None)
                       for i in range(a.ndim))]

    def gradient(self, out_grad, node):
        return dilate(out_grad, self.axes, self.dilation)


def undilate(a: Tensor, axes, dilation: int) -> Tensor:
    """Keep every (dilation+1)-th element along `axes`."""
    return UnDilate(axes, dilation)(a)


def normalize_index(index, shape: tuple) -> tuple:
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
        out.append(item)
    return tuple(out)


class GetItem(TensorOp):
    """a[index] for ints and slices."""

    def __init__(self, index: tuple):
        self.index = index

    def compute(self, a):
        return a[self.index]

    def gradient(self, out_grad, node):
        return ScatterItem(self.index, node.inputs[0].shape)(out_grad)


def get_item(a: Tensor, index) -> Tensor:
    """a[index] with ints, slices and one Ellipsis."""
    return GetItem(normalize_index(index, a.shape))(a)


class ScatterItem(TensorOp):
    """Zeros of `shape` with `a` written at `index`: the adjoint of GetItem."""

    def __init__(self, index: tuple, shape: tuple):
        self.index = index
        self.shape = tuple(shape)

    def compute(self, a):
        out = namespace(a).zeros(self.shape, dtype=a.dtype, device=getattr(a, "device", None))
        out[self.index] = a
        return out

    def gradient(self, out_grad, node):
        return GetItem(self.index)(out_grad)


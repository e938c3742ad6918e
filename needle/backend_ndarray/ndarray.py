"""The course's NDArray over a needle device's array: views of tensors' data that read
like the course's arrays and write through to the tensor (see the package docstring)."""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable

from ..backends import Device, default_device, device_of, is_device_array


class _AnyDeviceArray(type):
    """Metaclass of NDArray: `isinstance(x, NDArray)` holds for NDArray views and for every
    device's raw arrays (`is_device_array`)."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return type.__instancecheck__(cls, obj) or is_device_array(obj)


def _binary(op: Callable[[Any, Any], Any]) -> Callable[[NDArray, Any], NDArray]:
    def method(self: NDArray, other: Any) -> NDArray:
        if getattr(other, "__array_ufunc__", 0) is None:  # a Tensor: its own operator runs
            return NotImplemented
        return NDArray.view(op(self._array, unwrap(other)), self.device)

    return method


def _compare(op: Callable[[Any, Any], Any]) -> Callable[[NDArray, Any], NDArray]:
    def method(self: NDArray, other: Any) -> NDArray:  # 1.0 / 0.0, as the course's arrays
        if getattr(other, "__array_ufunc__", 0) is None:  # a Tensor: its own operator runs
            return NotImplemented
        a = self._array
        return NDArray.view(self.device.xp.astype(op(a, unwrap(other)), a.dtype), self.device)

    return method


class NDArray(metaclass=_AnyDeviceArray):
    """The course's NDArray surface over one needle device's array.

    `tensor.cached_data` and `tensor.realize_cached_data()` return these views: they share
    the tensor's array (no copy) and give course code `numpy()`, `shape`, `dtype`, `device`,
    `reshape`, `permute`, `broadcast_to`, `flip`, `pad`, `compact()`, indexing (an int keeps
    its axis, as in the course), arithmetic, comparisons (1.0 / 0.0 results), `sum`, `max`,
    `exp`, `log`, `tanh` and `maximum`, each giving a new NDArray. Writes (`a[i] = v`,
    `a.fill(v)`, the course's gradient checks' `a.flat[j] += eps`) go through to the tensor,
    as the course's: its data is replaced by the updated copy and marked modified (so views
    taken before keep the old data). Views made by `reshape`, `flat`, indexing and `permute`
    write through to the array they came from; `broadcast_to` views and a TensorTuple's
    parts are read-only. The framework itself works on the raw arrays. `isinstance(x,
    NDArray)` also holds for any device's raw array.

    `NDArray(a, device=None)` is the course's constructor: a float32 copy of `a` (a list, a
    numpy array, an NDArray or any device's array) on `device` (by default `a`'s device for
    NDArrays and device arrays, else the default device).
    """

    # A view made from another NDArray (`_parent`) writes through to it: `_link(parent's
    # array, new)` is the parent's new array, `_src` the parent's array the view was made
    # from (any other: a stale view). Views of a Value's data (`_owner`, a weak reference:
    # a kept view does not keep the graph alive) write to it in the end; `_ver` is the
    # Value's version they show (an optimizer step in place or a .data write since: stale).
    # `_loose`: not compact in the course's sense (a permuted, sliced or broadcast view):
    # compact() copies it, as the course's does, so writes to the copy stay there.
    __slots__ = ("_array", "device", "_parent", "_src", "_link", "_owner", "_ver", "_loose")

    def __init__(self, other: Any, device: Device | None = None):
        made = array(other, dtype="float32", device=device)
        self._array, self.device = made._array, made.device
        self._parent = self._link = self._owner = None
        self._loose = False

    @classmethod
    def view(cls, data: Any, device: Device, parent: Any = None,
             link: Callable[[Any, Any], Any] | None = None) -> NDArray:
        """An NDArray over `device`'s raw array `data` itself (no copy); a write to it goes
        to `parent`'s array through `link` (None: it is its own array; READ_ONLY)."""
        out = object.__new__(cls)
        out._array = data
        out.device = device
        out._parent = parent
        out._link = link
        out._loose = False
        if parent is None:
            out._owner = out._ver = None
        else:
            out._src, out._owner, out._ver = parent._array, parent._owner, parent._ver
        return out

    # ----- what the array is --------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The shape, a tuple of ints."""
        return tuple(self._array.shape)

    @property
    def dtype(self) -> Any:
        """The dtype, comparing equal to its name (`a.dtype == "float32"`)."""
        return self.device.public_dtype(self._array.dtype)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._array.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self._array.shape)

    def numpy(self) -> Any:
        """A host (numpy) copy of the data."""
        return self.device.to_numpy(self._array)

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        """The host copy, for numpy's functions (`np.asarray`, `np.testing`, ufuncs)."""
        host = self.device.to_numpy(self._array)
        return host if dtype is None else host.astype(dtype)

    def to(self, device: Device) -> NDArray:
        """This array on `device` (itself when already there)."""
        if device == self.device:
            return self
        return NDArray.view(device.asarray(self._array), device)

    def astype(self, dtype: Any) -> NDArray:
        """A copy as `dtype` (a name, a numpy dtype or the device's), as numpy's `astype`."""
        return NDArray.view(self.device.asarray(self._array, dtype=dtype),
                            self.device)

    def compact(self) -> NDArray:
        """Itself where compact, else a copy of its own (a permuted, sliced or broadcast
        view, as the course's: writes to the copy do not reach the viewed array)."""
        if not self._loose:
            return self
        return NDArray.view(self.device.asarray(self._array), self.device)

    def is_compact(self) -> bool:
        """Whether it is compact: not a permuted, sliced or broadcast view (nor a reshape
        of one)."""
        return not self._loose

    def _marked(self, loose: bool) -> NDArray:
        self._loose = loose
        return self

    def __len__(self) -> int:
        if not self._array.shape:
            raise TypeError("len() of a 0-d NDArray")
        return self._array.shape[0]

    def __bool__(self) -> bool:
        return bool(self._array)

    # a one-element array as a number, as the course's hw1/hw2 numpy cached_data was
    def item(self) -> Any:
        """The one element as a Python number (ValueError for more elements)."""
        return self.numpy().item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __format__(self, spec: str) -> str:
        return format(self.item(), spec) if spec else str(self)

    def __repr__(self) -> str:
        return f"NDArray({self.numpy()}, device={self.device})"

    def __str__(self) -> str:
        return str(self.numpy())

    def __reduce__(self) -> tuple:
        return _rebuild, (self.device, self.numpy())

    # ----- movement: the ops' own array code, so every device behaves alike ---------------
    def reshape(self, new_shape: tuple[int, ...]) -> NDArray:
        """The same elements in a new shape."""
        from ..ops.movement import Reshape

        shape = self.shape
        return NDArray.view(Reshape(new_shape).compute(self._array), self.device, self,
                            lambda _, new: Reshape(shape).compute(new))._marked(self._loose)

    @property
    def flat(self) -> NDArray:
        """A 1-d view of the elements (writes go through: `a.flat[j] += eps`)."""
        return self.reshape((self.size,))

    def permute(self, new_axes: tuple[int, ...]) -> NDArray:
        """All axes reordered: axis i of the result is axis `new_axes[i]`."""
        from ..ops.movement import Permute

        back = tuple(sorted(range(len(new_axes)), key=lambda i: new_axes[i]))
        return NDArray.view(Permute(new_axes).compute(self._array), self.device, self,
                            lambda _, new: Permute(back).compute(new))._marked(
            self._loose or tuple(new_axes) != tuple(range(len(new_axes))))

    def broadcast_to(self, new_shape: tuple[int, ...]) -> NDArray:
        """Broadcast to `new_shape` by numpy's rules."""
        from ..ops.movement import BroadcastTo

        out = NDArray.view(BroadcastTo(new_shape).compute(self._array), self.device, self,
                           READ_ONLY)
        return out._marked(self._loose or out.shape != self.shape)

    def flip(self, axes: Any) -> NDArray:
        """Reversed along `axes` (an int or a tuple)."""
        from ..ops.movement import Flip

        return NDArray.view(Flip(axes).compute(self._array), self.device)

    def pad(self, axes: tuple[tuple[int, int], ...]) -> NDArray:
        """Zero-padded by one (before, after) pair per axis."""
        from ..ops.im2col import Pad

        return NDArray.view(Pad(axes).compute(self._array), self.device)

    def __getitem__(self, idxs: Any) -> NDArray:
        """Ints, slices and one Ellipsis (missing axes are taken whole); an int keeps its
        axis with length 1, as the course's NDArray does."""
        from ..ops.movement import GetItem

        index = self._index(idxs)
        out = NDArray.view(GetItem(index).compute(self._array), self.device, self,
                           lambda a, new: self._written(a, index, new))
        return out._marked(self._loose or out.shape != self.shape or any(
            i.step not in (None, 1) for i in index if isinstance(i, slice)))  # (a[::-1])

    def __setitem__(self, idxs: Any, other: Any) -> None:
        """Write `other` (an NDArray, a Tensor, a device or host array, a number) at `idxs`."""
        from .writes import written_value

        self._assign(self._written(self._array, self._index(idxs), written_value(self, other)))

    def fill(self, value: Any) -> None:
        """Set every element to the number `value`."""
        from .writes import written_number

        self._assign(self.device.full(self._array.shape, written_number(self, value),
                                      dtype=self._array.dtype))

    def _index(self, idxs: Any) -> tuple:
        from ..ops.movement import normalize_index

        return tuple(slice(i, i + 1) if isinstance(i, int) else i
                     for i in normalize_index(idxs, self.shape))

    def _written(self, a: Any, index: tuple, value: Any) -> Any:
        """A copy of array `a` with `value` written at `index` (only slices)."""
        from ..ops.movement import forward_steps, write_at

        xp = self.device.xp
        index, flips = forward_steps(index, tuple(a.shape))
        picked = tuple(len(range(*i.indices(n))) for i, n in zip(index, a.shape))
        target = picked + tuple(a.shape[len(index):])
        value = xp.astype(value, a.dtype)
        try:
            value = xp.broadcast_to(value, target)
        except (ValueError, RuntimeError, TypeError) as e:
            if math.prod(value.shape) != math.prod(target):  # (the course: equal sizes)
                raise ValueError(f"NDArray write: a value of shape {tuple(value.shape)} does "
                                 f"not fit the written part's shape {target}") from e
            value = xp.reshape(value, target)
        if flips:
            value = xp.flip(value, axis=flips)
        return write_at(xp, xp.asarray(a, copy=True), index, value)

    def _assign(self, new: Any) -> None:
        """`new` becomes this view's array and, through `_link`, its parent's (in the end the
        data of the Value it shows, marked modified)."""
        parent, link = self._parent, self._link
        if link is READ_ONLY:
            raise TypeError("this NDArray is read-only (a broadcast_to view or a part of a "
                            "TensorTuple): write to the array it came from")
        owner = None if self._owner is None else self._owner()
        if (owner is not None and owner._version != self._ver) or (
                parent is not None and parent._array is not self._src):
            raise RuntimeError(
                "this NDArray view is stale: the data it was made from has changed since "
                "(another view's write, a .data assignment, an optimizer step); take a new "
                "view (tensor.realize_cached_data()) and write to that")
        if parent is not None:
            parent._assign(link(parent._array, new))
            self._src = parent._array
        elif owner is not None:
            owner._write_array(new)
        if owner is not None:
            self._ver = owner._version
        self._array = new

    # ----- arithmetic: the library's operators on the raw arrays ----------------------------
    __add__ = __radd__ = _binary(lambda a, b: a + b)
    __sub__ = _binary(lambda a, b: a - b)
    __rsub__ = _binary(lambda a, b: b - a)
    __mul__ = __rmul__ = _binary(lambda a, b: a * b)
    __truediv__ = _binary(lambda a, b: a / b)
    __rtruediv__ = _binary(lambda a, b: b / a)
    __pow__ = _binary(lambda a, b: a**b)
    __matmul__ = _binary(lambda a, b: a @ b)
    __eq__ = _compare(lambda a, b: a == b)  # type: ignore[assignment]
    __ne__ = _compare(lambda a, b: a != b)  # type: ignore[assignment]
    __gt__ = _compare(lambda a, b: a > b)
    __ge__ = _compare(lambda a, b: a >= b)
    __lt__ = _compare(lambda a, b: a < b)
    __le__ = _compare(lambda a, b: a <= b)
    __hash__ = None  # type: ignore[assignment]

    def __neg__(self) -> NDArray:
        return NDArray.view(-self._array, self.device)

    def maximum(self, other: Any) -> NDArray:
        """The elementwise maximum with an NDArray or a number."""
        xp, a, b = self.device.xp, self._array, unwrap(other)
        if not is_device_array(b):
            b = xp.asarray(b, dtype=a.dtype, device=self.device.native)
        return NDArray.view(xp.maximum(a, b), self.device)

    def exp(self) -> NDArray:
        """Elementwise e**x."""
        return NDArray.view(self.device.xp.exp(self._array), self.device)

    def log(self) -> NDArray:
        """Elementwise natural logarithm."""
        return NDArray.view(self.device.xp.log(self._array), self.device)

    def tanh(self) -> NDArray:
        """Elementwise tanh."""
        return NDArray.view(self.device.xp.tanh(self._array), self.device)

    def sum(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        """Sum over `axis` (None: all)."""
        return NDArray.view(self.device.xp.sum(self._array, axis=axis, keepdims=keepdims),
                            self.device)

    def max(self, axis: Any = None, keepdims: bool = False) -> NDArray:
        """Maximum over `axis` (None: all)."""
        return NDArray.view(self.device.xp.max(self._array, axis=axis, keepdims=keepdims),
                            self.device)


def _rebuild(device: Device, host: Any) -> NDArray:
    """What a pickled NDArray unpickles to: the host data on the same device, exactly."""
    return NDArray.view(device.adopt_numpy(host), device)


READ_ONLY = object()  # an NDArray's `_link` when writes to it cannot reach its parent


def view(value: Any) -> Any:
    """Course code's view of a Value's cached data: an NDArray writing through to the Value,
    a tuple of read-only ones for a TensorTuple, None for None."""
    data = value._array
    if data is None:
        return None
    if data.__class__ is tuple:
        return tuple(NDArray.view(d, value.device, None, READ_ONLY) for d in data)
    out = NDArray.view(data, value.device)
    out._owner, out._ver = weakref.ref(value), value._version
    return out


def unwrap(data: Any) -> Any:
    """The raw array(s) of `data`: an NDArray's own array, a tuple's NDArrays unwrapped;
    anything else as it is."""
    cls = data.__class__
    if cls is NDArray:
        return data._array
    if cls is tuple and any(d.__class__ is NDArray for d in data):
        return tuple(unwrap(d) for d in data)
    return data


def array(a: Any, dtype: Any = "float32", device: Device | None = None) -> NDArray:
    """A new NDArray holding a copy of `a` as `dtype` on `device`; when None, `a`'s device
    for an NDArray or a device's array, else the default device. `dtype=None` keeps the
    dtype of `a` (lists follow numpy's inference)."""
    if a.__class__ is NDArray:
        device = a.device if device is None else device
        a = a._array
    elif device is None:
        device = device_of(a) if is_device_array(a) else default_device()
    return NDArray.view(device.asarray(a, dtype=dtype), device)


def empty(shape: tuple[int, ...], dtype: Any = "float32", device: Device | None = None) -> NDArray:
    """A new NDArray of `shape` on `device` (the default when None); its values are not set."""
    device = default_device() if device is None else device
    return NDArray.view(device.empty(shape, dtype=dtype), device)


def full(shape: tuple[int, ...], fill_value: Any, dtype: Any = "float32",
         device: Device | None = None) -> NDArray:
    """A new NDArray of `shape` holding `fill_value` on `device` (the default when None)."""
    device = default_device() if device is None else device
    return NDArray.view(device.full(shape, fill_value, dtype=dtype), device)

"""Course-compatibility names: `import needle.backend_ndarray as nd` as in the course's hw3/hw4.

- `NDArray`: the course's NDArray surface over a device's array. `tensor.cached_data` and
  `tensor.realize_cached_data()` give NDArray views of a tensor's data (`numpy()`, `shape`,
  `device`, `reshape`, `pad`, ...), while the framework itself keeps working on the raw
  arrays (`Value._array`). `isinstance(x, NDArray)` holds for views and for the raw arrays of
  every needle device (numpy on cpu, cupy on cuda, array-api-strict on strict, torch and jax
  arrays). `NDArray(a, device=None)` is the course's constructor: a float32 copy on `device`.
- `array(a, dtype="float32", device=None)`: a new NDArray, `device.asarray(a, dtype=dtype)`
  on `device` (the default device when None).
- `cpu()`, `cpu_numpy()`, `cuda()`, `default_device()`: needle's device factories.
- `array_api`: the default device's array-API namespace (numpy's on cpu), whose reductions
  also take their axis positionally, as the course's (`CourseNamespace`).

Out of scope by design: the course's hand-written strided NDArray (`strides`, `offset`,
`as_strided`, `make`, in-place writes, the C++/CUDA kernels behind them). The array library is
the backend: NDArray's methods are the ops' own array code, and ops compute on raw arrays
with the namespace's functions, reached through `array_api` or a device's `xp`.

`array_api` resolves on first use (PEP 562), so importing needle probes no device; the same
lazy names are given to `needle`, `needle.autograd` and `needle.ops` by `course_getattr`.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from .backends import Device, cpu, cpu_numpy, cuda, default_device, device_of, is_device_array

# array_api is given by __getattr__ below
__all__ = ["array_api", "NDArray", "array", "cpu", "cpu_numpy", "cuda",  # noqa: F822
           "default_device"]

COURSE_NAMES = ("array_api", "NDArray")


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
    `exp`, `log`, `tanh` and `maximum`, each giving a new NDArray. They are read-only:
    change a tensor through `tensor.data = ...` or ops. The framework itself works on the
    raw arrays. `isinstance(x, NDArray)` also holds for any device's raw array.

    `NDArray(a, device=None)` is the course's constructor: a float32 copy of `a` (a list, a
    numpy array, an NDArray or any device's array) on `device` (by default `a`'s device for
    NDArrays and device arrays, else the default device).
    """

    __slots__ = ("_array", "device")

    def __init__(self, other: Any, device: Device | None = None):
        made = array(other, dtype="float32", device=device)
        self._array, self.device = made._array, made.device

    @classmethod
    def view(cls, data: Any, device: Device) -> NDArray:
        """An NDArray over `device`'s raw array `data` itself (no copy)."""
        out = object.__new__(cls)
        out._array = data
        out.device = device
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
        """Itself: the array library manages the memory layout."""
        return self

    def is_compact(self) -> bool:
        """True: see `compact`."""
        return True

    def __len__(self) -> int:
        if not self._array.shape:
            raise TypeError("len() of a 0-d NDArray")
        return self._array.shape[0]

    def __bool__(self) -> bool:
        return bool(self._array)

    def __repr__(self) -> str:
        return f"NDArray({self.numpy()}, device={self.device})"

    def __str__(self) -> str:
        return str(self.numpy())

    def __reduce__(self) -> tuple:
        return _rebuild, (self.device, self.numpy())

    # ----- movement: the ops' own array code, so every device behaves alike ---------------
    def reshape(self, new_shape: tuple[int, ...]) -> NDArray:
        """The same elements in a new shape."""
        from .ops.movement import Reshape

        return NDArray.view(Reshape(new_shape).compute(self._array), self.device)

    def permute(self, new_axes: tuple[int, ...]) -> NDArray:
        """All axes reordered: axis i of the result is axis `new_axes[i]`."""
        from .ops.movement import Permute

        return NDArray.view(Permute(new_axes).compute(self._array), self.device)

    def broadcast_to(self, new_shape: tuple[int, ...]) -> NDArray:
        """Broadcast to `new_shape` by numpy's rules."""
        from .ops.movement import BroadcastTo

        return NDArray.view(BroadcastTo(new_shape).compute(self._array), self.device)

    def flip(self, axes: Any) -> NDArray:
        """Reversed along `axes` (an int or a tuple)."""
        from .ops.movement import Flip

        return NDArray.view(Flip(axes).compute(self._array), self.device)

    def pad(self, axes: tuple[tuple[int, int], ...]) -> NDArray:
        """Zero-padded by one (before, after) pair per axis."""
        from .ops.im2col import Pad

        return NDArray.view(Pad(axes).compute(self._array), self.device)

    def __getitem__(self, idxs: Any) -> NDArray:
        """Ints, slices and one Ellipsis (missing axes are taken whole); an int keeps its
        axis with length 1, as the course's NDArray does."""
        from .ops.movement import GetItem, normalize_index

        index = tuple(slice(i, i + 1) if isinstance(i, int) else i
                      for i in normalize_index(idxs, self.shape))
        return NDArray.view(GetItem(index).compute(self._array), self.device)

    def __setitem__(self, idxs: Any, other: Any) -> None:
        raise TypeError("NDArray views of needle data are read-only: change a tensor with "
                        "`tensor.data = ...` or with ops")

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


def view(data: Any, device: Device) -> Any:
    """Course code's view of a Value's cached data: an NDArray, a tuple of them for a
    TensorTuple (None for None)."""
    if data is None:
        return None
    if data.__class__ is tuple:
        return tuple(NDArray.view(d, device) for d in data)
    return NDArray.view(data, device)


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


class CourseNamespace:
    """A device's array-API namespace as the course's `array_api`: every name is the
    namespace's own, and the reductions also take their axis positionally
    (`array_api.max(Z, self.axes, keepdims=True)`, as numpy and the course's NDArray module
    do; the standard makes it keyword-only)."""

    def __init__(self, xp: Any):
        self.xp = xp

    def __getattr__(self, name: str) -> Any:
        return getattr(self.xp, name)

    def __repr__(self) -> str:
        return f"CourseNamespace({getattr(self.xp, '__name__', type(self.xp).__name__)})"

    def sum(self, x: Any, axis: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        """Sum over `axis` (None: all)."""
        return self.xp.sum(x, axis=_axis(axis), keepdims=keepdims, **kw)

    def max(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        """Maximum over `axis` (None: all)."""
        return self.xp.max(x, axis=_axis(axis), keepdims=keepdims)

    def min(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        """Minimum over `axis` (None: all)."""
        return self.xp.min(x, axis=_axis(axis), keepdims=keepdims)

    def mean(self, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        """Mean over `axis` (None: all)."""
        return self.xp.mean(x, axis=_axis(axis), keepdims=keepdims)

    def prod(self, x: Any, axis: Any = None, keepdims: bool = False, **kw: Any) -> Any:
        """Product over `axis` (None: all)."""
        return self.xp.prod(x, axis=_axis(axis), keepdims=keepdims, **kw)


def _axis(axis: Any) -> Any:
    """An axis as the standard takes it: a list becomes a tuple."""
    return tuple(axis) if isinstance(axis, list) else axis


_COURSE_NAMESPACES: dict[int, CourseNamespace] = {}  # id(xp) -> its course namespace


def course_namespace(xp: Any) -> CourseNamespace:
    """The one CourseNamespace of namespace `xp`."""
    found = _COURSE_NAMESPACES.get(id(xp))
    if found is None or found.xp is not xp:
        found = _COURSE_NAMESPACES[id(xp)] = CourseNamespace(xp)
    return found


def _resolve(name: str) -> Any:
    if name == "array_api":
        return course_namespace(default_device().xp)
    return NDArray


def course_getattr(module: str) -> Callable[[str], Any]:
    """A module `__getattr__` for `module` that gives `array_api` and `NDArray` on first use."""

    def __getattr__(name: str) -> Any:
        if name in COURSE_NAMES:
            return _resolve(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = course_getattr(__name__)

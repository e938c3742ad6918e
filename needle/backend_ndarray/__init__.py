"""Course-compatibility names: `import needle.backend_ndarray as nd` as in the course's hw3/hw4.

- `NDArray`: the course's NDArray surface over a device's array. `tensor.cached_data` and
  `tensor.realize_cached_data()` give NDArray views of a tensor's data (`numpy()`, `shape`,
  `device`, `reshape`, `pad`, ...), while the framework itself keeps working on the raw
  arrays (`Value._array`). `isinstance(x, NDArray)` holds for views and for the raw arrays of
  every needle device (numpy on cpu, cupy on cuda, array-api-strict on strict, torch and jax
  arrays). `NDArray(a, device=None)` is the course's constructor: a float32 copy on `device`.
- Writes, as the course's in-place ones: `a[idx] = v`, `a.fill(v)` and `a.flat[j] += eps`
  (the course's gradient checks) on a view of a tensor's data replace the tensor's array by
  the updated copy and mark it modified, as a `.data` assignment does. Views made by
  `reshape`, `flat`, indexing and `permute` write through to the array they came from; a
  view whose source changed since it was made refuses writes (RuntimeError) rather than
  overwrite the change, and `broadcast_to` views and a TensorTuple's parts are read-only.
  Views taken before a write keep the old data (copy-on-write, not shared memory).
- `array(a, dtype="float32", device=None)`: a new NDArray, `device.asarray(a, dtype=dtype)`
  on `device` (the default device when None); `empty` and `full` as the course's, and its
  module-level forms of the methods (`reshape`, `broadcast_to`, `maximum`, `log`, `exp`,
  `tanh`, `sum`, `flip`).
- `cpu()`, `cpu_numpy()`, `cuda()`, `default_device()`: needle's device factories.
- `array_api`: the default device's array-API namespace (numpy's on cpu), whose reductions
  also take their axis positionally, as the course's (`CourseNamespace`).

Out of scope by design: the course's hand-written strided NDArray (`strides`, `offset`,
`as_strided`, `make`, memory shared between views, the C++/CUDA kernels behind them). The
array library is the backend: NDArray's methods are the ops' own array code, and ops compute
on raw arrays with the namespace's functions, reached through `array_api` or a device's `xp`.

`array_api` resolves on first use (PEP 562), so importing needle probes no device; the same
lazy names are given to `needle`, `needle.autograd` and `needle.ops` by `course_getattr`.
"""

from __future__ import annotations

from typing import Any, Callable

from ..backends import cpu, cpu_numpy, cuda, default_device, device_of, is_device_array
from .course_namespace import CourseNamespace, course_namespace
from .ndarray import NDArray, array, empty, full, unwrap, view

# array_api is given by __getattr__ below
__all__ = ["array_api", "NDArray", "array", "empty", "full", "broadcast_to", "reshape",  # noqa: F822
           "maximum", "log", "exp", "tanh", "sum", "flip", "cpu", "cpu_numpy", "cuda",
           "default_device", "CourseNamespace", "course_namespace", "is_device_array", "unwrap",
           "view"]

COURSE_NAMES = ("array_api", "NDArray")


# the course's module-level forms of NDArray's methods: on an NDArray an NDArray, on a
# device's raw array (what an op's compute gets) a raw array
def _call(a: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    if a.__class__ is NDArray:
        return getattr(a, name)(*args, **kwargs)
    if is_device_array(a):
        return getattr(NDArray.view(a, device_of(a)), name)(*args, **kwargs)._array
    raise TypeError(f"backend_ndarray.{name}: expected an NDArray or a device's array, "
                    f"got {type(a).__name__}")


def broadcast_to(array: Any, new_shape: tuple[int, ...]) -> Any:
    """`array.broadcast_to(new_shape)`."""
    return _call(array, "broadcast_to", new_shape)


def reshape(array: Any, new_shape: tuple[int, ...]) -> Any:
    """`array.reshape(new_shape)`."""
    return _call(array, "reshape", new_shape)


def maximum(a: Any, b: Any) -> Any:
    """`a.maximum(b)`."""
    return _call(a, "maximum", b)


def log(a: Any) -> Any:
    """`a.log()`."""
    return _call(a, "log")


def exp(a: Any) -> Any:
    """`a.exp()`."""
    return _call(a, "exp")


def tanh(a: Any) -> Any:
    """`a.tanh()`."""
    return _call(a, "tanh")


def sum(a: Any, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A001
    """`a.sum(axis, keepdims)`."""
    return _call(a, "sum", axis=axis, keepdims=keepdims)


def flip(a: Any, axes: Any) -> Any:
    """`a.flip(axes)`."""
    return _call(a, "flip", axes)


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

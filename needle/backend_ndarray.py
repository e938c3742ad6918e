"""Course-compatibility names: `import needle.backend_ndarray as nd` as in the course's hw3/hw4.

- `NDArray`: a class that `isinstance` accepts for the native arrays of every needle device
  (numpy on cpu, cupy on cuda, array-api-strict on strict, torch and jax arrays);
  `NDArray(a, device=None)` makes a float32 array on `device` as the course's constructor does.
- `array(a, dtype="float32", device=None)`: `device.asarray(a, dtype=dtype)` on `device`
  (the default device when None).
- `cpu()`, `cpu_numpy()`, `cuda()`, `default_device()`: needle's device factories.
- `array_api`: the default device's array-API namespace (numpy's on cpu).

Out of scope by design: the course's hand-written strided NDArray (`strides`, `offset`,
`compact`, `as_strided`, `make`, the C++/CUDA kernels behind them). The array library is the
backend: reshape, permute, broadcast and indexing are the namespace's own functions, reached
through `array_api` or a device's `xp`.

`array_api` resolves on first use (PEP 562), so importing needle probes no device; the same
lazy names are given to `needle`, `needle.autograd` and `needle.ops` by `course_getattr`.
"""

from __future__ import annotations

from typing import Any, Callable

from .backends import Device, cpu, cpu_numpy, cuda, default_device

# array_api is given by __getattr__ below
__all__ = ["array_api", "NDArray", "array", "cpu", "cpu_numpy", "cuda",  # noqa: F822
           "default_device"]

COURSE_NAMES = ("array_api", "NDArray")


def is_device_array(obj: Any) -> bool:
    """True for a native array that some needle device holds; never imports or probes one.

    Decided by the type's module, as `backends.device_of` does: numeric numpy arrays and
    scalars (what cpu tensors hold), cupy ndarrays, array-api-strict Arrays, torch Tensors
    and jax Arrays.
    """
    cls = type(obj)
    package = cls.__module__.partition(".")[0]
    if package == "numpy":
        return cpu().owns(obj)
    if package == "cupy":
        return cls.__name__ == "ndarray"
    if package == "array_api_strict":
        return cls.__name__ == "Array"
    if package == "torch":
        return cls.__name__ == "Tensor"
    if package in ("jax", "jaxlib"):
        return cls.__name__ == "ArrayImpl"
    return False


class _AnyDeviceArray(type):
    """Metaclass of NDArray: `isinstance(x, NDArray)` asks `is_device_array(x)`."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return is_device_array(obj)


class NDArray(metaclass=_AnyDeviceArray):
    """The array type of every needle device, for `isinstance` (no array is of this class).

    Calling it is the course's constructor: `NDArray(a, device=None)` is a float32 copy of
    `a` (a list, a numpy array or any device's array) on `device`.
    """

    def __new__(cls, other: Any, device: Device | None = None) -> Any:
        return array(other, dtype="float32", device=device)


def array(a: Any, dtype: Any = "float32", device: Device | None = None) -> Any:
    """A new native array of `device` (the default device when None) holding `a` as `dtype`.

    `dtype=None` keeps the dtype of `a` (lists follow numpy's inference).
    """
    return (default_device() if device is None else device).asarray(a, dtype=dtype)


def _resolve(name: str) -> Any:
    if name == "array_api":
        return default_device().xp
    return NDArray


def course_getattr(module: str) -> Callable[[str], Any]:
    """A module `__getattr__` for `module` that gives `array_api` and `NDArray` on first use."""

    def __getattr__(name: str) -> Any:
        if name in COURSE_NAMES:
            return _resolve(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = course_getattr(__name__)

"""Course-compatibility names: `array_api` and `NDArray`.

In the course's hw1/hw2 needle, `array_api` is the array module (numpy) and `NDArray` its
array type. Here they are the default device's array-API namespace and array class
(`numpy.ndarray` on cpu), so `isinstance(t.cached_data, ndl.NDArray)` holds for cpu
tensors. Framework code gets its namespace from a device or an array instead.

The names resolve on first use (PEP 562), so importing needle probes no device; the same
lazy names are given to `needle`, `needle.autograd` and `needle.ops` by `course_getattr`.
"""

from __future__ import annotations

from typing import Any, Callable

from .backends import default_device

__all__ = ["array_api", "NDArray"]  # noqa: F822  (given by __getattr__ below)

COURSE_NAMES = ("array_api", "NDArray")


def _resolve(name: str) -> Any:
    if name == "array_api":
        return default_device().xp
    return default_device().array_type


def course_getattr(module: str) -> Callable[[str], Any]:
    """A module `__getattr__` for `module` that gives `array_api` and `NDArray` on first use."""

    def __getattr__(name: str) -> Any:
        if name in COURSE_NAMES:
            return _resolve(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = course_getattr(__name__)

"""The course's `array_api`: a device's array-API namespace whose reductions also take their
axis positionally, as numpy's and the course's NDArray module's do."""

from __future__ import annotations

from typing import Any


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

"""The cpu device: numpy through array-api-compat, with faster versions of hot functions."""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from .device import NUMERIC_KINDS, Device
from .host_data import native_order

_ONES: dict[np.dtype, np.ndarray] = {}  # the longest vector of ones used yet, per dtype
_GEMV_ROWS = 2048  # below this many summed rows the ufunc is as fast


def _leading(axis: Any, ndim: int) -> int:
    """k when `axis` names exactly the first k axes (0 < k < ndim), else 0."""
    if axis.__class__ is int:
        axis = (axis,)
    elif axis.__class__ is not tuple:
        return 0
    k = len(axis)
    if 0 < k < ndim and sorted(a % ndim if -ndim <= a < ndim else -1 for a in axis) == list(
            range(k)):
        return k
    return 0


def _sum(x, /, *, axis=None, dtype=None, keepdims=False):
    """The standard's sum, straight to the ufunc (np.sum adds microseconds of Python).

    A float sum over the leading axes of a C-contiguous array (batch statistics and bias
    gradients: many rows, few columns) is a BLAS matrix-vector product with ones instead:
    numpy's reduction over the outer axis runs its inner loop over the short rows, over ten
    times slower at (78400, 16).
    """
    if (axis is not None and dtype is None and x.__class__ is np.ndarray
            and x.dtype.kind == "f" and x.flags.c_contiguous):
        k = _leading(axis, x.ndim)
        if k:
            shape = x.shape
            rows = 1
            for n in shape[:k]:
                rows *= n
            if rows >= _GEMV_ROWS:
                ones = _ONES.get(x.dtype)
                if ones is None or ones.shape[0] < rows:
                    ones = _ONES[x.dtype] = np.ones(rows, dtype=x.dtype)
                out = ones[:rows] @ x.reshape(rows, -1)
                return out.reshape(((1,) * k if keepdims else ()) + shape[k:])
    return np.add.reduce(x, axis=axis, dtype=dtype, keepdims=keepdims)


def _max(x, /, *, axis=None, keepdims=False):
    """The standard's max, straight to the ufunc."""
    return np.maximum.reduce(x, axis=axis, keepdims=keepdims)


def direct_views(compat: Any) -> dict[str, Any]:
    """`reshape` (no copy asked), `permute_dims` and `matrix_transpose` as the array methods
    of a library with numpy's API (numpy, cupy), for its array-api-compat namespace `compat`.

    compat routes each through Python wrappers of its own (`get_xp`'s and a generic alias:
    a few us a call, more than the view costs; a transformer step makes about 150 of
    them); the results are the same arrays, and other calls (a copy asked, a 1-d
    transpose) get compat's own, with its errors.
    """
    compat_reshape, compat_matrix_transpose = compat.reshape, compat.matrix_transpose

    def reshape(x, /, shape, *, copy=None):
        return x.reshape(shape) if copy is None else compat_reshape(x, shape, copy=copy)

    def permute_dims(x, /, axes):
        return x.transpose(axes)

    def matrix_transpose(x, /):
        return x.swapaxes(-1, -2) if x.ndim >= 2 else compat_matrix_transpose(x)  # its error

    return {"reshape": reshape, "permute_dims": permute_dims,
            "matrix_transpose": matrix_transpose}


def numpy_namespace() -> types.ModuleType:
    """array_api_compat.numpy with `sum`, `max`, `matmul` and the views (`direct_views`)
    calling numpy directly.

    Same semantics (the strict device checks that needle's calls are standard ones); on
    small arrays the Python wrappers of np.sum and compat's reshape cost more than the math.
    """
    import array_api_compat.numpy as compat

    ns = types.ModuleType("needle.backends.cpu.xp", compat.__doc__)
    ns.__dict__.update({k: v for k, v in vars(compat).items() if not k.startswith("__")})
    ns.__dict__.update(direct_views(compat))
    ns.sum, ns.max, ns.matmul = _sum, _max, np.matmul
    return ns


def prime_heap() -> None:
    """Lift glibc's adaptive mmap threshold to its ceiling (32 MiB), once per process.

    glibc serves allocations above the threshold (128 KiB at start) with fresh mmap()s, whose
    pages fault in on first touch, and raises the threshold only when such a block is freed.
    A training step allocates and frees many 0.1-20 MB arrays; when nothing bigger was freed
    first (the optimizers update in place), each of them faults in page by page: 2,500 faults
    per ResNet9 step measured here, and 6 after this call, with the backward ~30% faster.
    Freeing one block just under the ceiling raises the threshold, so such arrays come from
    the heap and are reused. Elsewhere it is one allocation, freed at once.
    """
    np.empty((32 << 20) - (1 << 16), dtype=np.uint8)


class CPUDevice(Device):
    """Arrays in host memory, computed with numpy."""

    kind = "cpu"

    def _load(self) -> tuple[Any, Any]:
        prime_heap()
        return numpy_namespace(), "cpu"

    def owns(self, array: Any) -> bool:
        """Numeric and bool numpy arrays (and scalars) live here; str or object ones do not."""
        return isinstance(array, (np.ndarray, np.generic)) and array.dtype.kind in NUMERIC_KINDS

    def asarray(self, obj: Any, dtype: Any = None) -> Any:
        """As Device.asarray, a big-endian numpy array ('>f4') made native (float32) first."""
        return super().asarray(native_order(obj) if isinstance(obj, np.ndarray) else obj, dtype)

    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        """A contiguous copy of the host array."""
        return np.array(array, copy=True, order="C")

    def adopt_numpy(self, array: np.ndarray) -> np.ndarray:
        """A fresh array is used as it is."""
        return array

    def to_numpy(self, array: Any) -> np.ndarray:
        """A host copy."""
        if self._pending:
            self.check_pending()
        return np.array(array, copy=True)

"""TorchNames: PyTorch's Tensor methods (mean, view, squeeze, permute, size, ...) for code
ported from PyTorch, each a composition of needle's ops (their gradients come with them).

needle's own names keep the course's meaning: `sum(axes)`, `transpose(axes)`, `reshape(shape)`.
Dims count from the end when negative; one out of range is a ValueError naming it and the shape
(needle's one axis normaliser, ops/axes.py), where PyTorch raises IndexError.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from ..arguments import flag


def _sizes(op: str, args: tuple) -> tuple[int, ...]:
    """`f(2, 3)` or `f((2, 3))` (or a list) as a tuple of ints; TypeError naming `op` else."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for n in args:
        if isinstance(n, bool) or not hasattr(n, "__index__"):
            raise TypeError(f"{op}: expected ints, or one tuple of ints, got {args!r}")
    return tuple(operator.index(n) for n in args)


def _dims_of_0d(op: str, dims: Any) -> None:
    """ValueError unless `dims` are a 0-d tensor's: PyTorch takes 0 and -1 there."""
    from ..ops.axes import normalize_axes

    try:
        normalize_axes(op, dims, (1,))
    except ValueError:
        raise ValueError(f"{op}: dim {dims!r} is out of range -1..0 for a 0-d tensor "
                         "(shape ())") from None


class TorchNames:
    """PyTorch's Tensor methods, built from needle's ops (mixed into Tensor)."""

    __slots__ = ()  # (a Tensor has no __dict__)
    __hash__ = object.__hash__  # (by identity, as before: defining __eq__ would remove it)

    # ----- comparisons: bool Tensors without a gradient (ops/compare.py) ---------------------
    def __eq__(self, other: Any) -> Any:
        from ..ops.compare import compare

        return compare("eq", self, other)

    def __ne__(self, other: Any) -> Any:
        from ..ops.compare import compare

        return compare("ne", self, other)

    def __lt__(self, other: Any) -> Any:
        from ..ops.compare import compare

        return compare("lt", self, other)

    def __le__(self, other: Any) -> Any:
        from ..ops.compare import compare

        return compare("le", self, other)

    def __gt__(self, other: Any) -> Any:
        from ..ops.compare import compare

        return compare("gt", self, other)

    def __ge__(self, other: Any) -> Any:
        from ..ops.compare import compare

        return compare("ge", self, other)

    def mean(self, axes: int | tuple[int, ...] | None = None, keepdims: bool = False, *,
             dim: int | tuple[int, ...] | None = None, keepdim: bool | None = None,
             axis: int | tuple[int, ...] | None = None, dtype: None = None,
             out: None = None) -> Any:
        """Mean over `axes` (all when None or empty, as PyTorch's), as sum / count (float16
        in float32); PyTorch's `dim=`/`keepdim=` too, and numpy's `axis=` (`np.mean(x)`)."""
        if dtype is not None or out is not None:
            raise TypeError("mean: dtype= and out= are not supported; convert with "
                            "ndl.ops.astype first")
        if axis is not None:
            if dim is not None:
                raise TypeError("mean: got both dim and axis; they are the same argument")
            if isinstance(axis, (tuple, list)) and not axis:
                return self  # (numpy's axis=(): no axis averaged)
            dim = axis
        from ..ops.axes import normalize_axes
        from ..ops.reduce import keepdims_shape, mean

        if dim is not None:
            if axes is not None:
                raise TypeError("mean: got both axes and dim; they are the same argument")
            axes = dim
        if keepdim is not None:
            if keepdims is not False:
                raise TypeError("mean: got both keepdims and keepdim; they are the same argument")
            keepdims = keepdim
        keepdims = flag("mean", "keepdims", keepdims)
        if self.dtype.kind not in "fc":  # (PyTorch refuses integers and bools too)
            raise TypeError(f"mean: needs a floating tensor, got {self.dtype}; convert it "
                            "first, e.g. with ndl.ops.astype(x, \"float32\")")
        shape = self.shape
        if isinstance(axes, (tuple, list)) and not axes:
            axes = None  # (PyTorch: dim=() is every dim; numpy's axis=() would be none)
        if not shape:  # a 0-d tensor takes dims 0 and -1, as PyTorch's
            if axes is not None:
                _dims_of_0d("mean", axes)
            return mean(self)
        axes = normalize_axes("mean", axes, shape)
        out = mean(self, axes)
        return out.reshape(keepdims_shape(shape, axes)) if keepdims else out

    def unsqueeze(self, dim: int) -> Any:
        """A new axis of size 1 at `dim` (-ndim-1..ndim), as a reshape."""
        from ..ops.axes import normalize_axis

        shape = self.shape
        dim = normalize_axis("unsqueeze", dim, shape, len(shape) + 1)
        return self.reshape(shape[:dim] + (1,) + shape[dim:])

    def squeeze(self, dim: int | tuple[int, ...] | None = None) -> Any:
        """Drop the axes of size 1 among `dim` (all when None); others stay, as PyTorch."""
        from ..ops.axes import normalize_axes

        shape = self.shape
        if not shape:
            _dims_of_0d("squeeze", dim)
            return self.reshape(())
        dims = normalize_axes("squeeze", dim, shape)
        return self.reshape(tuple(n for i, n in enumerate(shape) if n != 1 or i not in dims))

    def view(self, *shape: int) -> Any:
        """The same data in `shape` (`view(2, 3)` or `view((2, 3))`; one size may be -1):
        a reshape, so never an error for a non-contiguous layout."""
        if not shape:
            raise TypeError("view: expected a shape, e.g. view(2, 3) or view((2, 3))")
        return self.reshape(_sizes("view", shape))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Any:
        """Axes `start_dim`..`end_dim` (inclusive) merged into one, as a reshape."""
        from ..ops.axes import normalize_axis

        shape = self.shape
        if not shape:  # a 0-d tensor flattens to one element, as PyTorch's
            _dims_of_0d("flatten", start_dim)
            _dims_of_0d("flatten", end_dim)
            return self.reshape((1,))
        start = normalize_axis("flatten", start_dim, shape)
        end = normalize_axis("flatten", end_dim, shape)
        if start > end:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} "
                             f"for shape {shape}")
        return self.reshape(shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])

    def permute(self, *dims: int) -> Any:
        """Axes reordered: output axis i is axis `dims[i]` (`permute(1, 0)` or `((1, 0))`)."""
        from ..ops.movement import permute

        return permute(self, _sizes("permute", dims))

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self.shape)

    def dim(self) -> int:
        """The number of dimensions (`ndim`)."""
        return len(self.shape)

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        """The shape as a tuple, or the size of axis `dim`."""
        shape = self.shape
        if dim is None:
            return shape
        from ..ops.axes import normalize_axis

        return shape[normalize_axis("size", dim, shape)]

    def tolist(self) -> Any:
        """The data as nested Python lists (a Python number for a 0-d tensor)."""
        return self.numpy().tolist()

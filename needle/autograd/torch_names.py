"""TorchNames: PyTorch's Tensor methods (view, squeeze, permute, size, float, abs, T, ...; the
reductions in torch_reductions.py) for code ported from PyTorch, each a composition of
needle's ops (their gradients come with them), and the helpers that let Tensor's course
methods take PyTorch's spellings too: `reshape(2, 12)`, `transpose(1, 2)`, and (summed)
`sum(dim=1, keepdim=True)`.

needle's own names keep the course's meaning: `sum(axes)`, `transpose(axes)`, `reshape(shape)`.
Dims count from the end when negative; one out of range is a ValueError naming it and the shape
(needle's one axis normaliser, ops/axes.py), where PyTorch raises IndexError.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from .torch_reductions import TorchReductions, dims_of_0d


def _sizes(op: str, args: tuple) -> tuple[int, ...]:
    """`f(2, 3)` or `f((2, 3))` (or a list) as a tuple of ints; TypeError naming `op` else."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for n in args:
        if isinstance(n, bool) or not hasattr(n, "__index__"):
            raise TypeError(f"{op}: expected ints, or one tuple of ints, got {args!r}")
    return tuple(operator.index(n) for n in args)


def shape_of(op: str, shape: Any, more: tuple) -> Any:
    """A shape argument: `f((2, 3))` as given (the course's), PyTorch's `f(2, 3)` and `f(6)`
    as a tuple of ints."""
    if more or not hasattr(shape, "__iter__"):  # (an int, or a numpy integer)
        return _sizes(op, (shape, *more))
    return shape


def two_axes(axes: Any, dim1: Any) -> Any:
    """Transpose's axes: the course's tuple (or None) as given, PyTorch's `transpose(0, 2)`
    as (0, 2); a TypeError for one int alone, or a tuple and an int."""
    if dim1 is None:
        if hasattr(axes, "__index__") and not hasattr(axes, "__iter__"):
            raise TypeError(f"transpose: got one dim, {axes!r}; give two, transpose({axes}, j), "
                            "or a tuple of two, transpose((i, j)) (the last two by default)")
        return axes
    if not hasattr(axes, "__index__") or hasattr(axes, "__iter__"):
        raise TypeError(f"transpose: got {axes!r} and {dim1!r}; give two ints, "
                        "transpose(i, j), or one tuple, transpose((i, j))")
    return (axes, dim1)


def flattened_shape(op: str, shape: tuple[int, ...], start_dim: int,
                    end_dim: int) -> tuple[int, ...]:
    """`shape` with axes `start_dim`..`end_dim` (inclusive) merged into one (a 0-d shape
    flattens to (1,), as PyTorch's); errors name `op`, the dims and the shape."""
    from ..ops.axes import normalize_axis

    if not shape:
        dims_of_0d(op, start_dim)
        dims_of_0d(op, end_dim)
        return (1,)
    start = normalize_axis(op, start_dim, shape)
    end = normalize_axis(op, end_dim, shape)
    if start > end:
        raise ValueError(f"{op}: start_dim {start_dim} comes after end_dim {end_dim} "
                         f"for shape {shape}")
    return shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:]


def _comparison(name: str, symbol: str) -> Any:
    """The method `self <symbol> other`: an elementwise bool Tensor (ops/compare.py)."""
    def method(self: Any, other: Any) -> Any:
        from ..ops.compare import compare

        return compare(name, self, other)
    method.__name__, method.__qualname__ = f"__{name}__", f"TorchNames.__{name}__"
    method.__doc__ = f"`self {symbol} other` elementwise: a bool Tensor without a gradient."
    return method


class TorchNames(TorchReductions):
    """PyTorch's Tensor methods, built from needle's ops (mixed into Tensor)."""

    __slots__ = ()  # (a Tensor has no __dict__)
    __hash__ = object.__hash__  # (by identity, as before: defining __eq__ would remove it)

    # ----- comparisons: bool Tensors without a gradient (ops/compare.py) ---------------------
    __eq__, __ne__ = _comparison("eq", "=="), _comparison("ne", "!=")
    __lt__, __le__ = _comparison("lt", "<"), _comparison("le", "<=")
    __gt__, __ge__ = _comparison("gt", ">"), _comparison("ge", ">=")

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
            dims_of_0d("squeeze", dim)
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
        return self.reshape(flattened_shape("flatten", self.shape, start_dim, end_dim))

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

    # ----- dtype conversions: ops.astype (differentiable between floating dtypes) -------------
    def _as(self, dtype: str) -> Any:
        """This tensor in `dtype`: itself when already there, as PyTorch's."""
        from ..ops.dtypes import astype

        return self if self.dtype == dtype else astype(self, dtype)

    def float(self) -> Any:
        """As float32."""
        return self._as("float32")

    def double(self) -> Any:
        """As float64."""
        return self._as("float64")

    def half(self) -> Any:
        """As float16."""
        return self._as("float16")

    def int(self) -> Any:
        """As int32 (PyTorch's `int()`; `long()` is int64)."""
        return self._as("int32")

    def long(self) -> Any:
        """As int64."""
        return self._as("int64")

    def bool(self) -> Any:
        """As bool (nonzero is True)."""
        return self._as("bool")

    # ----- copies and devices ---------------------------------------------------------------
    @property
    def T(self) -> Any:
        """The axes reversed: a matrix's transpose (PyTorch deprecates `.T` beyond 2-D)."""
        from ..ops.movement import permute

        ndim = len(self.shape)
        if ndim < 2:
            return self
        return self.transpose() if ndim == 2 else permute(self, tuple(range(ndim - 1, -1, -1)))

    def clone(self) -> Any:
        """A copy of the data that stays in the graph (its gradient flows back to this tensor)."""
        from ..ops.dtypes import AsType

        return AsType(self.dtype)(self)  # (astype copies)

    def contiguous(self) -> Any:
        """This tensor: needle has no strided views to make contiguous."""
        return self

    def cpu(self) -> Any:
        """This tensor on `ndl.cpu()` (`to`'s rules: a leaf's copy is a new leaf)."""
        from ..backends import cpu

        return self.to(cpu())

    # ----- elementwise --------------------------------------------------------------------------
    def abs(self) -> Any:
        """|x| as x * sign(x): the gradient is sign(x), 0 at 0 (PyTorch's)."""
        from ..grad_mode import no_grad
        from ..ops.dtypes import astype

        if self.dtype == "bool":
            raise TypeError("abs: got a tensor of dtype bool; convert it first, e.g. x.int()")
        with no_grad():  # (a constant: the comparisons have no gradient)
            sign = astype(self > 0, self.dtype) - astype(self < 0, self.dtype)
        out = self * sign
        return out + 0 if self.dtype.kind == "f" else out  # (-0.0 * 0 is -0.0; |-0.0| is 0.0)

    __abs__ = abs

    def sqrt(self) -> Any:
        """Elementwise square root (its gradient inf at 0, as PyTorch's)."""
        if self.dtype.kind != "f":
            raise TypeError(f"sqrt: needs a floating tensor, got {self.dtype}; convert it "
                            "first, e.g. x.float()")
        from ..ops.unary import sqrt

        return sqrt(self)

    def pow(self, exponent: Any) -> Any:
        """`self ** exponent`, for a number or a Tensor exponent."""
        return self ** exponent

"""TorchReductions: PyTorch's reductions on Tensor (mean, max, min, argmax, argmin), each a
composition of needle's ops, and `summed`, Tensor.sum's PyTorch and numpy spellings.

Each takes PyTorch's `dim=`/`keepdim=` and, where numpy calls it (`np.mean(x)`, `np.max(x)`),
numpy's `axis=`/`keepdims=`/`out=None`; two spellings of one argument are a TypeError.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..arguments import flag


def dims_of_0d(op: str, dims: Any) -> None:
    """ValueError unless `dims` are a 0-d tensor's: PyTorch takes 0 and -1 there."""
    from ..ops.axes import normalize_axes

    try:
        normalize_axes(op, dims, (1,))
    except ValueError:
        raise ValueError(f"{op}: dim {dims!r} is out of range -1..0 for a 0-d tensor "
                         "(shape ())") from None


def _one(op: str, **spellings: Any) -> tuple[str | None, Any]:
    """(name, value) of the one spelling of an argument given (not None), (None, None) for
    none; a TypeError naming `op` and two of them where both are given."""
    given = [(name, value) for name, value in spellings.items() if value is not None]
    if len(given) > 1:
        raise TypeError(f"{op}: got both {given[0][0]} and {given[1][0]}; they are the same "
                        "argument")
    return given[0] if given else (None, None)


def _keep(op: str, names: tuple[str, str], value: Any, alias: Any) -> bool:
    """A keepdims flag given as `names[0]` (`value`, default False) or as `names[1]` (`alias`,
    default None); a TypeError naming both where both are given."""
    if alias is not None:
        if value is not False:
            raise TypeError(f"{op}: got both {names[0]} and {names[1]}; they are the same "
                            "argument")
        return flag(op, names[1], alias)
    return flag(op, names[0], value)


def summed(x: Any, axes: Any, keepdims: Any, dim: Any, keepdim: Any, axis: Any,
           out: Any) -> Any:
    """Tensor.sum given PyTorch's `dim`/`keepdim` or numpy's `axis`/`out=None`: Summation's
    numbers, reshaped where `keepdims`; dim=() is every axis (PyTorch's), while axes=() and
    axis=() are none (the course's and numpy's)."""
    from ..ops.axes import normalize_axes
    from ..ops.reduce import Summation, keepdims_shape

    if out is not None:
        raise TypeError("sum: out= is not supported")
    name, axes = _one("sum", axes=axes, dim=dim, axis=axis)
    keepdims = _keep("sum", ("keepdims", "keepdim"), keepdims, keepdim)
    if name == "dim" and isinstance(axes, (tuple, list)) and not axes:
        axes = None
    if name == "dim" and axes is not None and not x.shape:  # (a 0-d tensor takes 0 and -1,
        dims_of_0d("sum", axes)  # as PyTorch's)
        axes = None
    total = Summation(axes)(x)
    if not keepdims:
        return total
    return total.reshape(keepdims_shape(x.shape, normalize_axes("sum", axes, x.shape)))


class ValuesIndices(NamedTuple):
    """`max(dim)` and `min(dim)`'s result, as PyTorch's `torch.return_types.max`."""

    values: Any
    indices: Any


def _int_dim(op: str, dim: Any) -> None:
    """TypeError naming `op` for a Tensor `dim` (PyTorch's elementwise `x.max(other)`)."""
    from .graph import Value

    if isinstance(dim, Value):
        raise TypeError(f"{op}: dim must be an int or None, got a Tensor (PyTorch's "
                        f"elementwise x.{op}(other) is not supported)")


def _arg(op: str, x: Any, dim: Any, keepdim: Any) -> Any:
    """argmax or argmin (`op`) of Tensor `x` along `dim`: int64, without a gradient."""
    from ..ops.arg_reduce import no_grad_reduce

    keepdim = flag(op, "keepdim", keepdim)
    _int_dim(op, dim)
    if not x.shape and dim is not None:  # a 0-d tensor takes dims 0 and -1, as PyTorch's
        dims_of_0d(op, dim)
        dim = None
    return no_grad_reduce(op, x, dim, keepdim)


def _extreme(op: str, x: Any, dim: Any, keepdim: Any, axis: Any, keepdims: Any,
             out: Any) -> Any:
    """max or min (`op`) of Tensor `x`: the values over `axis` (or all), or PyTorch's
    (values, indices) along the int `dim`."""
    from ..ops.arg_reduce import no_grad_reduce
    from ..ops.reduce import max as max_of

    if out is not None:
        raise TypeError(f"{op}: out= is not supported")
    _int_dim(op, dim)
    _int_dim(op, axis)
    name, axes = _one(op, dim=dim, axis=axis)
    keep = _keep(op, ("keepdim", "keepdims"), keepdim, keepdims)
    if name == "dim" and not hasattr(dim, "__index__"):
        raise TypeError(f"{op}: dim must be an int or None, got {dim!r}; for the values over "
                        f"several axes, {op}(axis=(...))")
    if not x.shape and axes is not None:
        dims_of_0d(op, axes)
        axes = None
    if op == "max":
        values = max_of(x, axes, keep)
    elif x.dtype.kind == "f":  # differentiable, and exact: negation rounds nothing
        values = -max_of(-x, axes, keep)
    else:  # (-x wraps for unsigned and the lowest signed integer)
        values = no_grad_reduce("min", x, axes, keep)
    if name != "dim":
        return values
    return ValuesIndices(values, no_grad_reduce("arg" + op, x, axes, keep))


class TorchReductions:
    """PyTorch's reductions, built from needle's ops (mixed into Tensor by TorchNames)."""

    __slots__ = ()

    def mean(self, axes: int | tuple[int, ...] | None = None, keepdims: bool = False, *,
             dim: int | tuple[int, ...] | None = None, keepdim: bool | None = None,
             axis: int | tuple[int, ...] | None = None, dtype: None = None,
             out: None = None) -> Any:
        """Mean over `axes` (all when None or empty, as PyTorch's), as sum / count (float16
        in float32); PyTorch's `dim=`/`keepdim=` too, and numpy's `axis=` (`np.mean(x)`)."""
        if dtype is not None or out is not None:
            raise TypeError("mean: dtype= and out= are not supported; convert with "
                            "ndl.ops.astype first")
        from ..ops.axes import normalize_axes
        from ..ops.reduce import keepdims_shape, mean

        name, axes = _one("mean", axes=axes, dim=dim, axis=axis)
        if name == "axis" and isinstance(axes, (tuple, list)) and not axes:
            return self  # (numpy's axis=(): no axis averaged)
        keepdims = _keep("mean", ("keepdims", "keepdim"), keepdims, keepdim)
        if self.dtype.kind not in "fc":  # (PyTorch refuses integers and bools too)
            raise TypeError(f"mean: needs a floating tensor, got {self.dtype}; convert it "
                            "first, e.g. with ndl.ops.astype(x, \"float32\")")
        shape = self.shape
        if isinstance(axes, (tuple, list)) and not axes:
            axes = None  # (PyTorch: dim=() is every dim; numpy's axis=() would be none)
        if not shape:  # a 0-d tensor takes dims 0 and -1, as PyTorch's
            if axes is not None:
                dims_of_0d("mean", axes)
            return mean(self)
        axes = normalize_axes("mean", axes, shape)
        out = mean(self, axes)
        return out.reshape(keepdims_shape(shape, axes)) if keepdims else out

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """The index of the largest entry along `dim` (into the flattened tensor when None;
        the first of ties), int64 without a gradient."""
        return _arg("argmax", self, dim, keepdim)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> Any:
        """The index of the smallest entry along `dim`, as argmax."""
        return _arg("argmin", self, dim, keepdim)

    def max(self, dim: int | None = None, keepdim: bool = False, *,
            axis: int | tuple[int, ...] | None = None, keepdims: bool | None = None,
            out: None = None) -> Any:
        """The largest entry when `dim` is None; along an int `dim`, PyTorch's (values,
        indices) named tuple; numpy's `axis=` (`np.max(x)`) gives the values only. Tied
        entries share the gradient (PyTorch's `max(dim)` gives it to the indexed one)."""
        return _extreme("max", self, dim, keepdim, axis, keepdims, out)

    def min(self, dim: int | None = None, keepdim: bool = False, *,
            axis: int | tuple[int, ...] | None = None, keepdims: bool | None = None,
            out: None = None) -> Any:
        """The smallest entry, as `max` (-max(-x) for floating tensors)."""
        return _extreme("min", self, dim, keepdim, axis, keepdims, out)

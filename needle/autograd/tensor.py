"""Tensor (the graph's value with its operators) and TensorOp, the ops that make Tensors;
TensorTuple lives in tensor_tuple.py (re-exported here), PyTorch's names in torch_names.py."""

from __future__ import annotations

from typing import Any

from ..arguments import flag
from ..backend_ndarray import NDArray
from ..backends import Device, default_device
from ..grad_mode import enable_grad, no_grad
from . import graph as _graph
from .engine import backward
from .graph import Op, Value, mark_modified
from .in_place import in_place
from .tensor_checks import array_operand, check_device, check_grad, out_grad_of
from .torch_names import TorchNames, shape_of, two_axes
from .torch_reductions import summed


class TensorOp(Op):
    """An op whose output is a single Tensor."""

    def __call__(self, *args: Value) -> Tensor:
        return Tensor.make_from_op(self, args)


class Tensor(TorchNames, Value):
    """An n-dimensional array on a device, recording the ops applied to it."""

    __slots__ = ()
    # numpy scalars on the left of an operator defer to Tensor's reflected methods
    __array_ufunc__ = None

    def __init__(
        self,
        array: Any,
        *,
        device: Device | None = None,
        dtype: Any = None,
        requires_grad: bool = True,
        **kwargs: Any,
    ):
        if kwargs:  # the course's signature takes **kwargs; PyTorch rejects unknown ones
            raise TypeError(
                f"Tensor() got unexpected keyword argument(s) {', '.join(map(repr, kwargs))}"
                "; it takes device, dtype and requires_grad"
            )
        if device is not None:
            check_device(device)
        if array.__class__ is NDArray:  # the course's NDArray: its device's array
            device = array.device if device is None else device
            array = array._array
        if isinstance(array, Tensor):  # (ndl.compile's recorder takes the Tensor itself)
            device = array.device if device is None else device
            dtype = array.dtype if dtype is None else dtype
            data = device.asarray(array._realize() if _graph._TRACER is None else array, dtype)
        else:
            device = default_device() if device is None else device
            data = device.asarray(array, dtype=dtype)
        self._init(None, (), cached_data=data, requires_grad=requires_grad, device=device)

    # ----- array-like members ------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The shape, a tuple of ints."""
        return tuple(self._array.shape)

    @property
    def dtype(self) -> Any:
        """The dtype, comparing equal to its name (`t.dtype == "float32"`) on every device."""
        return self.device.public_dtype(self._realize().dtype)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._realize().shape)

    def numpy(self):
        """A host (numpy) copy of the data."""
        if _graph._TRACER is not None:
            return _graph._TRACER.host_read(self, "numpy")
        return self.device.to_numpy(self._realize())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        """numpy's view of the data (`np.asarray(t)`): a host copy, as `numpy()` (without
        it numpy made an object array of 0-d Tensors)."""
        if copy is False:  # (numpy 2's contract: no copy, or an error)
            raise ValueError("a needle Tensor's data cannot be taken without a copy")
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def item(self) -> float | int | bool:
        """The value of a one-element tensor as a Python number."""
        if _graph._TRACER is not None:
            return _graph._TRACER.host_read(self, "item")
        return self.device.to_numpy(self._realize()).item()

    def __float__(self) -> float:
        """`float(t)` of a one-element tensor (a read to the host, as in PyTorch)."""
        if _graph._TRACER is not None:
            return _graph._TRACER.host_read(self, "float")
        return float(self.device.to_numpy(self._realize()).item())

    def __bool__(self) -> bool:
        """The truth of a one-element tensor's value (a read to the host, as in PyTorch);
        RuntimeError for other sizes, whose truth is ambiguous."""
        if _graph._TRACER is not None:
            _graph._TRACER.control_flow(self)  # raises while a step is captured
        size = 1
        for n in self._array.shape:
            size *= n
        if size != 1:
            raise RuntimeError(f"the truth value of a Tensor of shape {self.shape} is "
                               "ambiguous; use a one-element Tensor, or compare shapes")
        return bool(self.device.to_numpy(self._realize()).item())

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __iter__(self) -> Any:
        """The rows (a TypeError for a 0-d tensor: `list(t)` gave [] by way of __getitem__)."""
        return (self[i] for i in range(len(self)))

    def to(self, device: Device) -> Tensor:
        """This tensor on `device` (itself when already there). A leaf's copy is a new leaf
        (the course's tensors require grad by default: a batch or a weight moved once stays
        one); an op's output is copied in the graph, so gradients flow back to its device,
        as PyTorch's `.to`."""
        check_device(device)
        if device == self.device:
            return self
        if self.op is None:  # (in the device's dtype: jax without x64 holds float64 as
            data = device.asarray(self._realize() if _graph._TRACER is None else self)  # 32)
            return Tensor.make_const(data, requires_grad=self.requires_grad, device=device)
        from ..ops.device_copy import to_device

        return to_device(self, device)

    # ----- DLPack: other libraries share this tensor's memory (the device does the work) ---
    def __dlpack__(self, **kwargs: Any) -> Any:
        """A DLPack capsule of the data, sharing memory (no graph: the reader sees the data as
        `detach()` would); torch/jax/numpy/cupy `from_dlpack` call it."""
        if _graph._TRACER is not None:
            _graph._TRACER.dlpack(self)  # raises while a step is captured (a read)
        return self.device.to_dlpack(self._realize(), **kwargs)

    def __dlpack_device__(self) -> tuple[Any, int]:
        """(DLPack device type, index) of the data, e.g. (1, 0) for host memory."""
        return self._realize().__dlpack_device__()

    # ----- graph members -----------------------------------------------------------------
    def detach(self) -> Tensor:
        """A new constant tensor sharing this tensor's storage."""
        out = Tensor.make_const(self._realize(), device=self.device)
        if _graph._TRACER is not None:
            _graph._TRACER.alias(out, self)
        return out

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set requires_grad in place and return the tensor, as PyTorch's (an op's output
        cannot stop requiring grad: detach() it instead)."""
        requires_grad = flag("requires_grad_", "requires_grad", requires_grad)
        if self.op is not None and not requires_grad:
            raise RuntimeError("requires_grad_(False) on a tensor an op made: only leaves "
                               "change requires_grad; use detach()")
        self.requires_grad = requires_grad
        return self

    @property
    def data(self) -> Tensor:
        """The tensor's data as a detached tensor sharing storage."""
        return self.detach()

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f".data must be set to a Tensor, got {type(value).__name__}")
        if value.dtype != self.dtype:
            raise ValueError(
                f".data dtype mismatch: this tensor is {self.dtype}, the new data is "
                f"{value.dtype}"
            )
        self._array = value._realize()
        self.device = value.device
        mark_modified(self)  # a graph holding this tensor would now see the new data

    def backward(self, out_grad: Tensor | None = None, *, create_graph: bool = True,
                 retain_graph: bool | None = None) -> None:
        """Set `.grad` on every node that this tensor depends on.

        `out_grad` defaults to ones of this tensor's shape; a Tensor `out_grad` must have this
        tensor's device, shape and dtype (ValueError otherwise, as PyTorch does), while an array
        or list is converted to them. The gradients are built from needle ops and can be
        differentiated again; `create_graph=False` records no graph for them: the adjoints are
        computed on raw arrays by the same rules (autograd/engine.py) and each `.grad` becomes a
        constant Tensor when first read (faster, and no cycles between nodes and gradients).
        `retain_graph` (default: `create_graph`, as in PyTorch) keeps what ops saved for their
        gradients (im2col's windows, a softmax's exponentials); without it they are freed as
        the walk passes, and a later backward over the same graph recomputes them (the same
        numbers; PyTorch refuses a second backward instead).
        """
        out_grad = out_grad_of(self, out_grad, Tensor)
        retain = create_graph if retain_graph is None else bool(retain_graph)
        if create_graph:  # recorded even under no_grad(), as PyTorch's create_graph=True is
            with enable_grad():
                backward(self, out_grad, retain)
        else:
            with no_grad():
                backward(self, out_grad._array, retain)

    def _check_grad(self, value: Any) -> None:
        """Raise unless `value` can be this tensor's `.grad` (tensor_checks.check_grad)."""
        check_grad(self, value, Tensor)

    def _wrap_adjoint(self, grad: Any) -> Tensor:
        return Tensor.make_const(grad, device=self.device)

    def _sum_adjoints(self, partials: list) -> Any:
        """The sum of this tensor's partial adjoints, left to right, as one AddN."""
        return _ops.AddN()(*partials)

    def _fit_adjoint(self, partial: Any) -> Any:
        """A partial adjoint summed back to this tensor's shape where an op broadcast it (a
        safety net for user ops: needle's own return adjoints shaped like their inputs)."""
        shape = self._array.shape
        if (partial._array if isinstance(partial, Value) else partial).shape == shape:
            return partial
        return _ops.sum_to_shape(partial, tuple(shape))

    # ----- printing ------------------------------------------------------------------------
    def __repr__(self) -> str:
        suffix = "" if self.device.kind == "cpu" else f", device={self.device}"
        return f"needle.Tensor({self.numpy()}{suffix})"

    def __str__(self) -> str:
        return str(self.numpy())

    # ----- operators: Tensor operands use the EWise ops, Python numbers the scalar ops, and
    # arrays of more than one element (course code's `out_grad * (a > 0)`, `Z - max_Z`) are
    # constant Tensors of this tensor's device and dtype ----------------------------------
    def _array_operand(self, other: Any) -> Tensor | None:
        """`other` as a constant Tensor where it is an array of more than one element, else
        None (tensor_checks.array_operand)."""
        array = array_operand(self, other)
        return None if array is None else Tensor.make_const(array, device=self.device)

    def __add__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            if self._array.dtype is other._array.dtype:  # the hot case
                return _make(_ops.EWiseAdd(), (self, other))
            return _ops.EWiseAdd()(self, other)  # promotes mixed dtypes (ops/dtypes.py)
        array = self._array_operand(other)
        if array is not None:
            return self + array
        return _make(_ops.AddScalar(other), (self,))

    __radd__ = __add__

    def __mul__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            if self._array.dtype is other._array.dtype:  # the hot case
                return _make(_ops.EWiseMul(), (self, other))
            return _ops.EWiseMul()(self, other)  # promotes mixed dtypes (ops/dtypes.py)
        array = self._array_operand(other)
        if array is not None:
            return self * array
        return _make(_ops.MulScalar(other), (self,))

    __rmul__ = __mul__

    def __sub__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            if self._array.dtype is not other._array.dtype:  # before the negation
                self, other = _ops.dtypes.promote("subtract", (self, other))
            return _ops.EWiseAdd()(self, _ops.Negate()(other))
        array = self._array_operand(other)
        if array is not None:
            return self - array
        return _ops.AddScalar(-_ops.as_scalar(other))(self)

    def __rsub__(self, other: Any) -> Tensor:
        array = self._array_operand(other)
        if array is not None:
            return array - self
        return _ops.AddScalar(other)(_ops.Negate()(self))

    def __truediv__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            return _ops.EWiseDiv()(self, other)
        array = self._array_operand(other)
        if array is not None:
            return self / array
        return _make(_ops.DivScalar(other), (self,))

    def __rtruediv__(self, other: Any) -> Tensor:
        array = self._array_operand(other)
        if array is not None:
            return array / self
        if self.dtype.kind in "iu":  # (not the negative power it is computed as)
            raise TypeError(f"divide: the scalar {other!r} over a tensor of dtype {self.dtype}: "
                            "true division needs a floating tensor; convert it first, e.g. "
                            "with ndl.ops.astype(x, \"float32\")")
        return _ops.MulScalar(other)(_ops.PowerScalar(-1)(self))

    def __pow__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            return _ops.EWisePow()(self, other)
        return _make(_ops.PowerScalar(other), (self,))

    def __rpow__(self, other: Any) -> Tensor:
        return _make(_ops.RPowerScalar(other), (self,))

    def __neg__(self) -> Tensor:
        return _make(_ops.Negate(), (self,))

    # ----- in place (`p -= lr * p.grad`): PyTorch's manual update under no_grad() ---------
    def __iadd__(self, other: Any) -> Tensor:
        return self._in_place("+=", self.__add__, other)

    def __isub__(self, other: Any) -> Tensor:
        return self._in_place("-=", self.__sub__, other)

    def __imul__(self, other: Any) -> Tensor:
        return self._in_place("*=", self.__mul__, other)

    def __itruediv__(self, other: Any) -> Tensor:
        return self._in_place("/=", self.__truediv__, other)

    #: whether `p -= x` while recording is PyTorch's RuntimeError (Parameter: a manual update
    #: outside no_grad() would silently rebind the name instead of changing the parameter)
    _in_place_needs_no_grad = False

    def _in_place(self, op: str, fn: Any, other: Any) -> Tensor:
        return in_place(self, op, fn, other)

    def __matmul__(self, other: Tensor) -> Tensor:
        return _ops.matmul(self, other)

    def __getitem__(self, index: Any) -> Tensor:
        return _ops.get_item(self, index)

    # ----- methods -------------------------------------------------------------------------
    def matmul(self, other: Tensor) -> Tensor:
        """Matrix product, `self @ other`."""
        return _ops.matmul(self, other)

    def sum(self, axes: int | tuple[int, ...] | None = None, keepdims: bool = False, *,
            dim: int | tuple[int, ...] | None = None, keepdim: bool | None = None,
            axis: int | tuple[int, ...] | None = None, out: None = None) -> Tensor:
        """Sum over `axes` (all when None); PyTorch's `dim=`/`keepdim=` too, and numpy's
        `axis=` (`np.sum(x)`): torch_reductions.summed."""
        if keepdims is False and dim is None and keepdim is None and axis is None and out is None:
            return _ops.Summation(axes)(self)
        return summed(self, axes, keepdims, dim, keepdim, axis, out)

    def reshape(self, shape: tuple[int, ...] | int, *more: int) -> Tensor:
        """The same data in a new shape: `reshape((2, 12))`, or PyTorch's `reshape(2, 12)`."""
        return _ops.Reshape(shape_of("reshape", shape, more))(self)

    def broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        """Broadcast to `shape` by numpy's rules."""
        return _ops.BroadcastTo(shape)(self)

    def transpose(self, axes: tuple[int, int] | int | None = None,
                  dim1: int | None = None) -> Tensor:
        """Swap two axes (the last two by default): `transpose((0, 2))` or `transpose(0, 2)`."""
        return _ops.Transpose(two_axes(axes, dim1))(self)

    def exp(self) -> Tensor:
        """Elementwise e**x."""
        return _ops.Exp()(self)

    def log(self) -> Tensor:
        """Elementwise natural logarithm."""
        return _ops.Log()(self)

    def relu(self) -> Tensor:
        """Elementwise max(x, 0)."""
        return _ops.ReLU()(self)


_make = Tensor.make_from_op


def constant_like(like: Any, array: Any) -> Any:
    """`array` as a constant of the kind of `like`: a Tensor beside Tensors (a graph being
    recorded), the array itself beside arrays (a gradient rule run without a graph)."""
    return Tensor.make_const(array, device=like.device) if isinstance(like, Value) else array


from .. import ops as _ops  # noqa: E402  (the Tensor's operators need the ops: the one cycle)
from .tensor_tuple import OneHotAdjoint, TensorTuple, TensorTupleOp  # noqa: E402,F401

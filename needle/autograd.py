"""The autograd engine: Value, Tensor, TensorTuple, Op, topological sort and reverse-mode AD."""

from __future__ import annotations

import threading
import weakref
from typing import Any, Iterable

from .backend_ndarray import NDArray, course_getattr
from .backend_ndarray import unwrap as _raw
from .backend_ndarray import view as _course_view
from .backends import Device, default_device, device_of
from .grad_mode import (  # noqa: F401  (re-exported: needle.autograd.no_grad is course API)
    _grad_enabled,
    enable_grad,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)

# Defer computation until realize_cached_data() is called (the course's lazy mode).
LAZY_MODE = False
# Number of live Values, for spotting leaked graphs.
TENSOR_COUNTER = 0
# The version clock: counts in-place changes (optimizer steps, `.data` writes...) of any Value.
# An op's output is stamped with the clock when made; a changed Value is stamped with the
# next reading. An input stamped later than the node that used it was changed after the
# graph was built: backward() refuses it (PyTorch's "modified by an inplace operation").
_VERSION_CLOCK = 0
_version_lock = threading.Lock()


class Op:
    """An operator: `compute` maps arrays to arrays, `gradient` maps Tensors to Tensors."""

    def __call__(self, *args: Value) -> Value:
        raise NotImplementedError()

    def compute(self, *args: Any) -> Any:
        """The forward computation on the devices' raw arrays."""
        raise NotImplementedError()

    def gradient(self, out_grad: Value, node: Value) -> Value | tuple[Value | None, ...]:
        """Partial adjoints of the inputs, built from needle ops (None: no gradient needed)."""
        raise NotImplementedError()

    def gradient_as_tuple(self, out_grad: Value, node: Value) -> tuple:
        """`gradient` with the result always a tuple, one entry per input."""
        output = self.gradient(out_grad, node)
        if isinstance(output, tuple):
            return output
        if isinstance(output, list):
            return tuple(output)
        return (output,)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class TensorOp(Op):
    """An op whose output is a single Tensor."""

    def __call__(self, *args: Value) -> Tensor:
        return Tensor.make_from_op(self, args)


class TensorTupleOp(Op):
    """An op whose output is a TensorTuple."""

    def __call__(self, *args: Value) -> TensorTuple:
        return TensorTuple.make_from_op(self, args)


class Value:
    """A node of the computational graph: an op, its inputs and the cached result."""

    # `_array` holds the device's raw array (a tuple of them for a TensorTuple; None until a
    # lazy value is computed): the framework reads and writes it directly. Course code sees
    # it through `cached_data` and `realize_cached_data()`, as backend_ndarray.NDArray views.
    __slots__ = ("op", "inputs", "_array", "requires_grad", "device", "_grad",
                 "_version", "__weakref__")

    op: Op | None
    inputs: tuple[Value, ...]
    _array: Any
    requires_grad: bool
    device: Device

    def _realize(self) -> Any:
        """Run the computation (if it has not run yet) and return the raw cached array."""
        if self._array is None:
            # iterative, so a long lazy chain cannot hit the recursion limit
            for node in find_topo_sort([self]):
                if node._array is None:
                    node._array = node.op.compute(*[x._array for x in node.inputs])
                    node._version = _VERSION_CLOCK  # computed now: from the inputs' data now
        return self._array

    def realize_cached_data(self) -> Any:
        """The course's accessor: the cached array, computed first if it is lazy, as an
        NDArray view (`.numpy()`, `.shape`, `.device`, ...) sharing the tensor's data."""
        return _course_view(self._realize(), self.device)

    @property
    def cached_data(self) -> Any:
        """The course's cached array as an NDArray view sharing the tensor's data (None
        before a lazy value is computed); assigning an NDArray or a device array replaces it."""
        return _course_view(self._array, self.device)

    @cached_data.setter
    def cached_data(self, data: Any) -> None:
        self._array = _raw(data)
        mark_modified(self)  # a graph built on this value would now read the new data

    @property
    def grad(self) -> Value | None:
        """The adjoint set by the last backward() through this value (None before)."""
        grad = self._grad
        if grad is None or isinstance(grad, Value):
            return grad
        if grad.__class__ is weakref.ref:
            return grad()
        # backward() without a graph leaves the adjoint's array: a constant when first read
        if isinstance(grad, tuple):  # a TensorTuple's, None for its zero elements
            data = self._realize()
            grad = TensorTuple.make_const(
                tuple(self.device.xp.zeros_like(d) if g is None else g
                      for d, g in zip(data, grad)), device=self.device)
        else:
            grad = Tensor.make_const(grad, device=self.device)
        self._grad = grad
        return grad

    @grad.setter
    def grad(self, value: Value | None) -> None:
        self._grad = value

    def is_leaf(self) -> bool:
        """True for values not produced by an op."""
        return self.op is None

    def __del__(self) -> None:
        global TENSOR_COUNTER
        TENSOR_COUNTER -= 1

    def __reduce__(self) -> tuple:
        """Pickle (and copy) as a leaf: the data through the host, exactly, on the same device.

        `requires_grad` is kept and so is a leaf's `.grad`; the graph is not copied, so a
        non-leaf comes back as a leaf holding its value (like `detach()`, but still
        requiring grad when it did).
        """
        data, device = self._realize(), self.device
        if isinstance(data, tuple):  # a TensorTuple
            host = tuple(device.to_numpy(a) for a in data)
        else:
            host = device.to_numpy(data)
        grad = self.grad if self.op is None else None
        return _rebuild_value, (type(self), device, host, self.requires_grad, grad)

    def _init(
        self,
        op: Op | None,
        inputs: Iterable[Value],
        *,
        cached_data: Any = None,
        requires_grad: bool = False,
        device: Device | None = None,
    ) -> None:
        """Fill in every field (the course's constructor body): for leaves; ops use make_from_op."""
        global TENSOR_COUNTER
        TENSOR_COUNTER += 1
        self.op = op
        self.inputs = tuple(inputs)
        self._array = _raw(cached_data)
        self.requires_grad = requires_grad
        self.device = device
        self._grad = None
        self._version = 0

    @classmethod
    def make_const(cls, data: Any, requires_grad: bool = False, *, device: Device | None = None):
        """A leaf holding `data` (a device array) as is: no copy, no graph."""
        value = cls.__new__(cls)
        value._init(None, (), cached_data=data, requires_grad=requires_grad, device=device)
        if device is None:
            value.device = device_of(value._array)
        return value

    @classmethod
    def make_from_op(cls, op: Op, inputs: Iterable[Value]):
        """The output of `op` on `inputs`; detached when no input requires grad."""
        global TENSOR_COUNTER
        TENSOR_COUNTER += 1
        value = cls.__new__(cls)
        # the body of _init, inlined: this is the hottest path in needle
        inputs = tuple(inputs)
        device = inputs[0].device
        requires_grad = False
        for x in inputs:
            if x.device is not device and x.device != device:
                raise ValueError(
                    f"{type(op).__name__}: inputs are on different devices "
                    f"({', '.join(str(x.device) for x in inputs)}); move them with .to()"
                )
            if x.requires_grad:
                requires_grad = True
        if requires_grad:
            requires_grad = _grad_enabled()  # read once: this thread's no_grad()
        value.device = device
        value._grad = None
        value.requires_grad = requires_grad
        value._version = _VERSION_CLOCK
        if LAZY_MODE:
            value.op, value.inputs, value._array = op, inputs, None
            return value
        arrays = [x._array for x in inputs]
        for array in arrays:
            if array is None:  # an input built in lazy mode
                arrays = [x._realize() for x in inputs]
                break
        value._array = op.compute(*arrays)
        if requires_grad:
            value.op, value.inputs = op, inputs
        else:  # nothing to differentiate: keep no references to the inputs
            value.op, value.inputs = None, ()
        return value


def mark_modified(*values: Value) -> None:
    """Record that the data of `values` changed in place or was replaced (optimizer steps,
    `.data` writes, loading a state dict): a graph built before on them can no longer be
    differentiated, and backward() through it raises a RuntimeError."""
    global _VERSION_CLOCK
    with _version_lock:
        _VERSION_CLOCK += 1
        for value in values:
            value._version = _VERSION_CLOCK


def check_versions(node: Value) -> None:
    """Raise PyTorch's RuntimeError when an input of `node` changed after `node` was made
    (the engines inline the comparison and call this to raise)."""
    version = node._version
    for i, inp in enumerate(node.inputs):
        if inp._version > version:
            data = inp._array
            if isinstance(data, tuple):
                what = "TensorTuple of shapes " + ", ".join(str(tuple(a.shape)) for a in data)
            else:
                what = (f"{type(inp).__name__} {inp.device.public_dtype(data.dtype)} "
                        f"{tuple(data.shape)}")
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [needle.{what}], input {i} of {type(node.op).__name__}, "
                "was changed (by an optimizer step, a .data assignment, load_state_dict or "
                "another in-place update) after the graph was built; call backward() before "
                "changing it, or run the forward again"
            )


def _rebuild_value(cls: type, device: Device, host: Any, requires_grad: bool,
                   grad: Value | None) -> Value:
    """What a pickled Value unpickles to: a leaf of class `cls` holding the host data."""
    if isinstance(host, tuple):
        data = tuple(device.adopt_numpy(a) for a in host)
    else:
        data = device.adopt_numpy(host)  # unpickled (or deep-copied) arrays are fresh
    value = cls.make_const(data, requires_grad, device=device)
    value._grad = grad
    return value


class TensorTuple(Value):
    """A tuple of tensors produced by one op (for fused ops, split and stack)."""

    __slots__ = ()

    def __len__(self) -> int:
        return len(self._realize())

    def __getitem__(self, index: int) -> Tensor:
        from .ops import tuple_get_item

        return tuple_get_item(self, index)

    def tuple(self) -> tuple[Tensor, ...]:
        """The elements as a Python tuple of Tensors."""
        return tuple(self[i] for i in range(len(self)))

    def __iter__(self):
        return iter(self.tuple())

    def __repr__(self) -> str:
        return "needle.TensorTuple" + str(self.tuple())

    def __str__(self) -> str:
        return self.__repr__()

    def __add__(self, other: TensorTuple) -> TensorTuple:
        from .ops import make_tuple

        if not isinstance(other, TensorTuple) or len(self) != len(other):
            raise ValueError("TensorTuple + needs another TensorTuple of the same length")
        return make_tuple(*[self[i] + other[i] for i in range(len(self))])

    def detach(self) -> TensorTuple:
        """A constant TensorTuple sharing the data."""
        return TensorTuple.make_const(self._realize(), device=self.device)


class Tensor(Value):
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
        try:
            if kwargs:  # the course's signature takes **kwargs; PyTorch rejects unknown ones
                raise TypeError(
                    f"Tensor() got unexpected keyword argument(s) {', '.join(map(repr, kwargs))}"
                    "; it takes device, dtype and requires_grad"
                )
            if array.__class__ is NDArray:  # the course's NDArray: its device's array
                device = array.device if device is None else device
                array = array._array
            if isinstance(array, Tensor):
                device = array.device if device is None else device
                dtype = array.dtype if dtype is None else dtype
                data = device.asarray(array._realize(), dtype=dtype)
            else:
                device = default_device() if device is None else device
                data = device.asarray(array, dtype=dtype)
        except BaseException:
            global TENSOR_COUNTER
            TENSOR_COUNTER += 1  # __del__ still runs on this half-made object: keep counts even
            raise
        self._init(None, (), cached_data=data, requires_grad=requires_grad, device=device)

    # ----- array-like members ------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The shape, a tuple of ints."""
        data = self._array
        return tuple((self._realize() if data is None else data).shape)

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
        return self.device.to_numpy(self._realize())

    def item(self) -> float | int | bool:
        """The value of a one-element tensor as a Python number."""
        return self.numpy().item()

    def __float__(self) -> float:
        """`float(t)` of a one-element tensor (a read to the host, as in PyTorch)."""
        return float(self.item())

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def to(self, device: Device) -> Tensor:
        """This tensor on `device` (itself when already there); the copy is a new leaf."""
        if device == self.device:
            return self
        return Tensor(self, device=device, requires_grad=self.requires_grad)

    # ----- DLPack: other libraries share this tensor's memory (the device does the work) ---
    def __dlpack__(self, **kwargs: Any) -> Any:
        """A DLPack capsule of the data, sharing memory (no graph: the reader sees the data as
        `detach()` would); torch/jax/numpy/cupy `from_dlpack` call it."""
        return self.device.to_dlpack(self._realize(), **kwargs)

    def __dlpack_device__(self) -> tuple[Any, int]:
        """(DLPack device type, index) of the data, e.g. (1, 0) for host memory."""
        return self._realize().__dlpack_device__()

    # ----- graph members -----------------------------------------------------------------
    def detach(self) -> Tensor:
        """A new constant tensor sharing this tensor's storage."""
        return Tensor.make_const(self._realize(), device=self.device)

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

    def backward(self, out_grad: Tensor | None = None, *, create_graph: bool = True) -> None:
        """Set `.grad` on every node that this tensor depends on.

        `out_grad` defaults to ones of this tensor's shape; a Tensor `out_grad` must have this
        tensor's device, shape and dtype (ValueError otherwise, as PyTorch does), while an array
        or list is converted to them. The gradients are built from needle ops and can be
        differentiated again; `create_graph=False` records no graph for them: the adjoints are
        computed on raw arrays (needle/array_backward.py) and each `.grad` becomes a constant
        Tensor when first read (faster, and no reference cycles between nodes and gradients).
        """
        if out_grad is None:
            out_grad = Tensor.make_const(
                self.device.ones(self.shape, dtype=self._realize().dtype),
                device=self.device,
            )
        else:
            if not isinstance(out_grad, Tensor):
                out_grad = Tensor(out_grad, device=self.device, dtype=self.dtype,
                                  requires_grad=False)
            self._check_out_grad(out_grad)
        if create_graph:
            compute_gradient_of_variables(self, out_grad)
        else:
            with no_grad():
                compute_gradient_of_variables(self, out_grad)

    def _check_out_grad(self, out_grad: Tensor) -> None:
        """Raise a ValueError naming both sides unless `out_grad` fits this tensor."""
        if out_grad.device != self.device:
            raise ValueError(f"backward: out_grad is on {out_grad.device}, the tensor is on "
                             f"{self.device}; move it with .to()")
        if out_grad.shape != self.shape:
            raise ValueError(f"backward: out_grad has shape {out_grad.shape}, the tensor has "
                             f"{self.shape}")
        if out_grad.dtype != self.dtype:  # gradients keep their tensor's dtype
            raise ValueError(f"backward: out_grad has dtype {out_grad.dtype}, the tensor has "
                             f"{self.dtype}")

    # ----- printing ------------------------------------------------------------------------
    def __repr__(self) -> str:
        suffix = "" if self.device.kind == "cpu" else f", device={self.device}"
        return f"needle.Tensor({self.numpy()}{suffix})"

    def __str__(self) -> str:
        return str(self.numpy())

    # ----- operators: Tensor operands use the EWise ops, Python numbers the scalar ops ------
    def __add__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            a, b = self._array, other._array
            if a is not None and b is not None and a.dtype is b.dtype:  # the hot case
                return _make(_ops.EWiseAdd(), (self, other))
            return _ops.EWiseAdd()(self, other)  # promotes mixed dtypes (ops/dtypes.py)
        return _make(_ops.AddScalar(other), (self,))

    __radd__ = __add__

    def __mul__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            a, b = self._array, other._array
            if a is not None and b is not None and a.dtype is b.dtype:  # the hot case
                return _make(_ops.EWiseMul(), (self, other))
            return _ops.EWiseMul()(self, other)  # promotes mixed dtypes (ops/dtypes.py)
        return _make(_ops.MulScalar(other), (self,))

    __rmul__ = __mul__

    def __sub__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            a, b = self._array, other._array
            if a is None or b is None or a.dtype is not b.dtype:  # before the negation
                self, other = _ops.dtypes.promote("subtract", (self, other))
            return _ops.EWiseAdd()(self, _ops.Negate()(other))
        return _ops.AddScalar(-_ops.as_scalar(other))(self)

    def __rsub__(self, other: Any) -> Tensor:
        return _ops.AddScalar(other)(_ops.Negate()(self))

    def __truediv__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            return _ops.EWiseDiv()(self, other)
        return _make(_ops.DivScalar(other), (self,))

    def __rtruediv__(self, other: Any) -> Tensor:
        return _ops.MulScalar(other)(_ops.PowerScalar(-1)(self))

    def __pow__(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            return _ops.EWisePow()(self, other)
        return _make(_ops.PowerScalar(other), (self,))

    def __rpow__(self, other: Any) -> Tensor:
        return _make(_ops.RPowerScalar(other), (self,))

    def __neg__(self) -> Tensor:
        return _make(_ops.Negate(), (self,))

    def __matmul__(self, other: Tensor) -> Tensor:
        return _ops.matmul(self, other)

    def __getitem__(self, index: Any) -> Tensor:
        return _ops.get_item(self, index)

    # ----- methods -------------------------------------------------------------------------
    def matmul(self, other: Tensor) -> Tensor:
        """Matrix product, `self @ other`."""
        return _ops.matmul(self, other)

    def sum(self, axes: int | tuple[int, ...] | None = None) -> Tensor:
        """Sum over `axes` (all when None)."""
        return _ops.Summation(axes)(self)

    def reshape(self, shape: tuple[int, ...]) -> Tensor:
        """The same data in a new shape."""
        return _ops.Reshape(shape)(self)

    def broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        """Broadcast to `shape` by numpy's rules."""
        return _ops.BroadcastTo(shape)(self)

    def transpose(self, axes: tuple[int, int] | None = None) -> Tensor:
        """Swap two axes (the last two by default)."""
        return _ops.Transpose(axes)(self)

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


def find_topo_sort(node_list: Iterable[Value], *, requiring_grad: bool = False) -> list[Value]:
    """Post-order depth-first walk over `inputs`, left to right; iterative, so deep graphs work.

    With `requiring_grad`, inputs that do not require grad (data, masks) are not visited.
    """
    order: list[Value] = []
    visited: set[Value] = set()  # Values hash by identity
    for root in node_list:
        if root in visited:
            continue
        visited.add(root)
        stack = [(root, iter(root.inputs))]
        while stack:
            node, children = stack[-1]
            for child in children:  # resumes where this node's walk left off
                if child not in visited and (child.requires_grad or not requiring_grad):
                    visited.add(child)
                    stack.append((child, iter(child.inputs)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def compute_gradient_of_variables(output_tensor: Tensor, out_grad: Tensor) -> None:
    """Reverse-mode AD: walk the graph backwards, summing partial adjoints into `.grad`.

    Every needle op's `gradient` returns adjoints shaped like its inputs (elementwise ops sum
    broadcast adjoints back themselves); the shape check here is a safety net for user ops
    that do not. The partials of a node are summed by one AddN node.
    """
    if not _grad_enabled():  # no graph to record: the adjoints as raw arrays
        from .array_backward import backward_arrays

        backward_arrays(output_tensor, out_grad._realize())
        return
    partials_of: dict[Value, list[Value]] = {output_tensor: [out_grad]}
    clock = _VERSION_CLOCK
    for node in reversed(find_topo_sort([output_tensor], requiring_grad=True)):
        partials = partials_of.pop(node, None)
        if partials is None:
            continue
        version = node._version
        if version != clock:  # something changed since this node was made (BatchNorm's
            for inp in node.inputs:  # running statistics, every training forward): check
                if inp._version > version:
                    check_versions(node)  # raises
        if len(partials) == 1:
            grad = partials[0]
        elif isinstance(node, Tensor):
            grad = _ops.AddN()(*partials)
        else:  # TensorTuple adjoints add elementwise
            grad = _sum_tuple_adjoints(partials)
        op = node.op
        if op is None:
            node._grad = grad
            continue
        # An intermediate node holds a recorded adjoint weakly: that adjoint's graph refers
        # back to the node, and a strong reference would make a cycle only gc could free.
        # The adjoint stays alive while the leaves' gradients (which are built on it) are.
        node._grad = grad if grad.op is None else weakref.ref(grad)
        parts = op.gradient(grad, node)
        if parts.__class__ is not tuple:  # what gradient_as_tuple does, inlined
            parts = tuple(parts) if isinstance(parts, list) else (parts,)
        for inp, partial in zip(node.inputs, parts):
            if partial is None or not inp.requires_grad:
                continue
            if not isinstance(inp, TensorTuple):
                shape = (inp._array if inp._array is not None else _data(inp)).shape
                pdata = partial._array
                if (pdata if pdata is not None else _data(partial)).shape != shape:
                    partial = _ops.sum_to_shape(partial, tuple(shape))
            pending = partials_of.get(inp)
            if pending is None:
                partials_of[inp] = [partial]
            else:
                pending.append(partial)


class OneHotAdjoint(TensorTuple):
    """The TensorTuple adjoint TupleGetItem gives (ops.OneHotTuple's output): `element` at
    `index`, zeros elsewhere. The engine adds these by picking `element`, recorded or not."""

    __slots__ = ("index", "element")


def _sum_tuple_adjoints(partials: list[Value]) -> Value:
    """The elementwise sum of TensorTuple adjoints, one AddN per element, zeros left out.

    Each of T `split(x)[t]` contributes a OneHotTuple, zero but for element t: added tuple
    by tuple that would be T^2 additions, here it is T elements picked.
    """
    columns: list[list[Value | None]] | None = None
    for partial in partials:
        if partial.__class__ is OneHotAdjoint:
            elems: list[Value | None] = [None] * len(partial._realize())
            elems[partial.index] = partial.element
        elif isinstance(partial.op, _ops.MakeTensorTuple):
            elems = list(partial.inputs)
        else:
            elems = list(partial.tuple())
        if columns is None:
            columns = [[] for _ in elems]
        for column, elem in zip(columns, elems):
            if elem is not None:
                column.append(elem)
    summed = []
    for i, column in enumerate(columns):
        if not column:  # no partial reached this element: its zeros
            column = [partials[0][i]]
        summed.append(column[0] if len(column) == 1 else _ops.AddN()(*column))
    return _ops.make_tuple(*summed)


def _data(value: Value) -> Any:
    """The value's array, computing it first in lazy mode."""
    data = value._array
    return value._realize() if data is None else data


from . import ops as _ops  # noqa: E402  (ops imports this module; bound after Tensor exists)

# the course's `array_api` and `NDArray`, resolved on first use
__getattr__ = course_getattr(__name__)

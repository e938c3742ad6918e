"""The graph: Op, Value (a node: op, inputs, cached array), the version clock, topological order."""

from __future__ import annotations

import functools
import threading
import weakref
from operator import attrgetter
from typing import Any, Callable, Iterable

from ..backend_ndarray import unwrap as _raw
from ..backend_ndarray import view as _course_view
from ..backends import Device, device_of, is_device_array
from ..grad_mode import _grad_enabled
from .modified import REPLACED, raise_replaced
from .tensor_checks import checked_compute

# The version clock: counts in-place changes (optimizer steps, `.data` writes...) of any Value.
# An op's output is stamped with the clock when made; a changed Value is stamped with the
# next reading. An input stamped later than the node that used it was changed after the
# graph was built: backward() refuses it (PyTorch's "modified by an inplace operation").
_VERSION_CLOCK = 0
_version_lock = threading.Lock()
_requires_grad = attrgetter("requires_grad")

# ndl.compile's recorder while it captures a step (needle/compiled/), else None: every hook
# below costs eager code one test of this global
_TRACER: Any = None


class Op:
    """An operator: `compute` maps arrays to arrays, `gradient` gives its inputs' adjoints.

    `gradient(out_grad, node)` is written once with needle's op functions. While a graph is
    recorded it runs on Tensors (`node` is the output Value); with no graph recorded the
    engine runs it on raw arrays (`node` an `ArrayNode`, `out_grad` an array), and every op
    called with no Value among its inputs evaluates `compute` at once and returns an array.
    Rules read `node.inputs`, `node.result` (the output), `node.saved` (what `forward`
    kept), `node.needs_input_grad` and `node.retains` (False: nothing reads `saved` after this
    rule, which may write over it), which both kinds of node have.
    """

    #: True for ops whose `forward` returns (output, values kept for the gradient)
    saves = False
    #: True for needle's own ops, whose rules return adjoints shaped like their inputs (the
    #: op table checks each one): the engine then skips its per-edge shape check, a safety
    #: net that sums a user op's broadcast adjoint back to its input's shape
    adjoints_fit = False
    #: whether `gradient` runs on raw arrays when no graph is recorded (needle's rules);
    #: a rule of your own always gets Tensors, as the course's do (run with no graph kept)
    array_rules = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.adjoints_fit = cls.__module__.startswith("needle.")
        if "gradient" in cls.__dict__:
            cls.array_rules = cls.adjoints_fit
        if "compute" in cls.__dict__ and not cls.adjoints_fit:
            cls.compute = checked_compute(cls.__dict__["compute"])

    def __call__(self, *args: Value) -> Value:
        raise NotImplementedError()

    def compute(self, *args: Any) -> Any:
        """The forward computation on the devices' raw arrays."""
        raise NotImplementedError()

    def forward(self, *args: Any) -> tuple[Any, Any]:
        """(compute's output, the values the gradient reads as `node.saved`); ops that set
        `saves` define it, and `compute` is its output alone."""
        return self.compute(*args), None

    def gradient(self, out_grad: Any, node: Any) -> Any:
        """Partial adjoints of the inputs, built from needle ops (None: no gradient needed):
        one, or a tuple with one per input (so a TensorTuple input's adjoint, a tuple of
        arrays on raw arrays, comes in a 1-tuple)."""
        raise NotImplementedError()

    def gradient_as_tuple(self, out_grad: Any, node: Any) -> tuple:
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


class Value:
    """A node of the computational graph: an op, its inputs and the cached result."""

    # `_array` holds the device's raw array (a tuple of them for a TensorTuple): the
    # framework reads and writes it directly. Course code sees it through `cached_data` and
    # `realize_cached_data()`, as backend_ndarray.NDArray views. `saved` holds what the op's
    # `forward` kept for the gradient (while the graph lives); `_grad` the adjoint: a Value,
    # a weak reference to one (intermediate nodes), or an array left by a backward that
    # recorded no graph (wrapped when read).
    __slots__ = ("op", "inputs", "_array", "requires_grad", "device", "_grad",
                 "_version", "saved", "_arrays", "__weakref__")
    #: whether the walk running a rule keeps `saved` after it; a rule on a recorded graph
    #: never consumes saved values (an `ArrayNode` says False when the graph is not retained)
    retains = True

    op: Op | None
    inputs: tuple[Value, ...]
    _array: Any
    requires_grad: bool
    device: Device

    def _realize(self) -> Any:
        """The raw cached array (values are computed when made)."""
        return self._array

    def realize_cached_data(self) -> Any:
        """The course's accessor: the cached array as an NDArray view (`.numpy()`, `.shape`,
        `.device`, ...) sharing the tensor's data; writes to it replace the data."""
        if _TRACER is not None:
            _TRACER.course_view(self)
        return _course_view(self)

    @property
    def cached_data(self) -> Any:
        """The course's cached array as an NDArray view sharing the tensor's data; assigning
        an NDArray or a device array replaces it."""
        if _TRACER is not None:
            _TRACER.course_view(self)  # raises while a step is captured
        return _course_view(self)

    @cached_data.setter
    def cached_data(self, data: Any) -> None:
        self._write_array(_raw(data))

    def _write_array(self, array: Any) -> None:
        """`array` (this device's) replaces the data, as an in-place change."""
        if _TRACER is not None:
            _TRACER.course_view(self)
        self._array = array
        mark_modified(self)  # a graph built on this value would now read the new data

    @property
    def result(self) -> Value:
        """The node's output, for gradient rules (`out_grad * node.result`): the Value.
        A RuntimeError once its data was replaced (`mark_modified` on a non-leaf)."""
        if REPLACED and self in REPLACED:
            raise_replaced(self)
        return self

    @property
    def needs_input_grad(self) -> tuple[bool, ...]:
        """Which inputs need an adjoint (PyTorch's `ctx.needs_input_grad`)."""
        inputs = self.inputs
        if len(inputs) == 2:  # (the common case spelled out: three times faster than map)
            return (inputs[0].requires_grad, inputs[1].requires_grad)
        return tuple(map(_requires_grad, inputs))

    @property
    def grad(self) -> Value | None:
        """The adjoint set by the last backward() through this value (None before)."""
        grad = self._grad
        if grad is None or isinstance(grad, Value):
            pass
        elif grad.__class__ is weakref.ref:
            grad = grad()
        else:
            grad = self._grad = self._wrap_adjoint(grad)  # an array: a constant when first read
        if _TRACER is not None:
            _TRACER.grad_read(self, grad)
        return grad

    @grad.setter
    def grad(self, value: Value | None) -> None:
        if value is not None:
            self._check_grad(value)
        self._grad = value
        if _TRACER is not None:
            _TRACER.grad_set(self, False, value)

    def _wrap_adjoint(self, grad: Any) -> Value:
        """A constant Value of this kind holding an adjoint array (Tensor, TensorTuple)."""
        raise NotImplementedError()

    def _check_grad(self, value: Any) -> None:
        """Raise unless `value` can be this value's `.grad` (a Tensor checks its kind, shape,
        dtype and device)."""

    def is_leaf(self) -> bool:
        """True for values not produced by an op."""
        return self.op is None

    def __reduce__(self) -> tuple:
        """Pickle (and copy) as a leaf: the data through the host, exactly, on the same device.

        `requires_grad` is kept and so is a leaf's `.grad`; the graph is not copied, so a
        non-leaf comes back as a leaf holding its value (like `detach()`, but still
        requiring grad when it did).
        """
        data, device = self._array, self.device
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
        self.op = op
        self.inputs = tuple(inputs)
        self._array = _raw(cached_data)
        self.requires_grad = requires_grad
        self.device = device_of(self._array) if device is None else device
        self._grad = None
        self._version = 0
        self.saved = None
        self._arrays = None
        if _TRACER is not None:
            _TRACER.created(self)

    @classmethod
    def make_const(cls, data: Any, requires_grad: bool = False, *, device: Device | None = None):
        """A leaf holding `data` (a device array) as is: no copy, no graph."""
        value = cls.__new__(cls)
        value._init(None, (), cached_data=data, requires_grad=requires_grad, device=device)
        return value

    @classmethod
    def make_from_op(cls, op: Op, inputs: Iterable[Any]):
        """The output of `op` on `inputs`; detached when no input requires grad. With no
        Value among the inputs (raw arrays: a gradient rule run without a graph), `compute`'s
        array itself."""
        inputs = tuple(inputs)
        if not inputs or not isinstance(inputs[0], Value):
            return _evaluate(op, inputs)
        device = inputs[0].device
        requires_grad = False
        try:
            for x in inputs:
                if x.device is not device and x.device != device:
                    _mismatch(op, inputs)
                if x.requires_grad:
                    requires_grad = True
        except AttributeError:  # (not a Value: `ndl.add(x, 1.0)`)
            _mismatch(op, inputs)
        if requires_grad:
            requires_grad = _grad_enabled()  # read once: this thread's no_grad()
        value = cls.__new__(cls)
        value.device = device
        value._grad = None
        value.requires_grad = requires_grad
        value._version = _VERSION_CLOCK
        arrays = tuple(map(_array_of_value, inputs))
        if _TRACER is not None:
            value._array, saved = _TRACER.op(op, inputs, value)
        elif op.saves:
            value._array, saved = op.forward(*arrays)
        else:
            value._array, saved = op.compute(*arrays), None
        if requires_grad:  # the input arrays too: what a backward without a graph reads
            value.op, value.inputs, value.saved, value._arrays = op, inputs, saved, arrays
        else:  # nothing to differentiate: keep no references to the inputs
            value.op, value.inputs, value.saved, value._arrays = None, (), None, None
        return value


_array_of_value = attrgetter("_array")


def _evaluate(op: Op, inputs: tuple) -> Any:
    """`op` on raw arrays: its `compute` (a mix with Values is a TypeError)."""
    for x in inputs:
        if isinstance(x, Value):
            for i, y in enumerate(inputs):
                if not isinstance(y, Value) and not is_device_array(y):  # (`add(1.0, x)`)
                    raise TypeError(f"{type(op).__name__}: input {i} is a {type(y).__name__}, "
                                    "not a Tensor (the operators, `x + 1.0`, take numbers)")
            raise TypeError(f"{type(op).__name__}: got both Tensors and raw arrays as inputs; "
                            "wrap the arrays in Tensors (or pass arrays only)")
    if _TRACER is not None:
        return _TRACER.evaluate(op, inputs)
    return op.compute(*inputs)


def _mismatch(op: Op, inputs: tuple) -> None:
    """The ValueError for inputs on different devices."""
    for i, x in enumerate(inputs):
        if not isinstance(x, Value):
            if is_device_array(x):
                _evaluate(op, inputs)  # raises the TypeError for the mix
            raise TypeError(f"{type(op).__name__}: input {i} is a {type(x).__name__}, not a "
                            "Tensor (the operators, `x + 1.0`, take numbers)")
    raise ValueError(
        f"{type(op).__name__}: inputs are on different devices "
        f"({', '.join(str(x.device) for x in inputs)}); move them with .to()"
    )


def mark_modified(*values: Value) -> None:
    """Record that the data of `values` changed in place or was replaced (optimizer steps,
    `.data` writes, loading a state dict): a graph built before on them can no longer be
    differentiated, and backward() through it raises a RuntimeError."""
    global _VERSION_CLOCK
    with _version_lock:
        _VERSION_CLOCK += 1
        for value in values:
            value._version = _VERSION_CLOCK
            if value.op is not None:  # an op's output: a rule reading it (`result`) raises
                REPLACED.add(value)
    if _TRACER is not None:
        _TRACER.modified(values)


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


def live_values() -> int:
    """The number of Values alive now (for spotting leaked graphs; walks the gc's objects)."""
    import gc

    return sum(1 for o in gc.get_objects() if issubclass(type(o), Value))


def array_function(fn: Callable) -> Callable:
    """Mark `fn`, a function of raw arrays run outside any op's `compute` (a Dropout mask, a
    gradient rule's constant), so that `ndl.compile` records each call as one step and runs
    it again at replay. Tensor arguments are passed to `fn` as their arrays; other
    arguments (namespaces, numbers, dtypes) are constants of the recorded step."""

    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        if _TRACER is not None:
            return _TRACER.call(fn, args, kwargs)
        return fn(*[a._array if isinstance(a, Value) else a for a in args], **kwargs)

    return recorded


def replayed(fn: Callable) -> Callable:
    """Mark `fn` (an optimizer's step, gradient clipping) as one step for `ndl.compile`: it
    runs again as it is at each replay, reading the parameters and their `.grad` then, so its
    own settings (a learning rate changed between calls) are read at replay time."""

    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        if _TRACER is not None:
            return _TRACER.opaque(fn, args, kwargs)
        return fn(*args, **kwargs)

    return recorded


def array_of(x: Any) -> Any:
    """The raw array of a Value, or `x` itself (a gradient rule's input on either kind of node)."""
    return x._array if isinstance(x, Value) else x

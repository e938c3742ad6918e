"""The recorder: runs a step eagerly once and writes down its program of array operations.

While it is installed (graph._TRACER, the device call hook), the core's hooks report every
op's `compute`/`forward` (graph and raw arrays alike), every `array_function` call, every
creation or random draw on a device, every `replayed` call (optimizer steps, clipping), and
every change of a Value made outside fn (a `.grad` set by backward, new data through
`mark_modified`). Each becomes a line of Python source over numbered array slots (`a12`),
constants (`k3`) and the step's Tensor arguments (`v0`); program.py turns the lines into
one function. Arrays are known by identity: an array that enters a recorded step without
having come out of one (or from an argument, or from a Tensor made before the step) was
computed where the recorder cannot see, and is refused with the line that used it.
"""

from __future__ import annotations

import copy
import os
import threading
import traceback
import types
from typing import Any

from ..autograd.graph import Value

_NEEDLE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CompileError(RuntimeError):
    """What `ndl.compile` cannot record (raised while the first call runs)."""


def where() -> str:
    """'file:line' of the innermost frame outside needle (the caller's line), with the
    needle frame below it when there is one."""
    frames = traceback.extract_stack()[:-1]
    inner = None
    for frame in reversed(frames):
        if os.path.abspath(frame.filename).startswith(_NEEDLE + os.sep):
            inner = inner or frame
            continue
        text = f"{frame.filename}:{frame.lineno} ({frame.line})"
        if inner is not None:
            text += f", in needle at {os.path.basename(inner.filename)}:{inner.lineno}"
        return text
    return "an unknown line"


def is_array(obj: Any) -> bool:
    """Whether `obj` is a device array (or a numpy scalar): data, not a constant."""
    return (isinstance(getattr(obj, "shape", None), tuple) and hasattr(obj, "dtype")
            and not isinstance(obj, (Value, type, types.ModuleType)))


def has_array(obj: Any) -> bool:
    """Whether `obj` is an array or a tuple/list holding one (at any depth)."""
    if isinstance(obj, (tuple, list)):
        return any(has_array(o) for o in obj)
    return is_array(obj)


def _describe(obj: Any) -> str:
    if isinstance(obj, Value):
        obj = obj._array
    if isinstance(obj, tuple):
        return "a tuple of arrays"
    return f"an array of shape {tuple(obj.shape)} and dtype {obj.dtype}"


class Recorder:
    """The program of one step, written while the step runs eagerly (see the module doc)."""

    def __init__(self, name: str):
        self.name = name
        self.thread = threading.get_ident()
        self.lines: list[tuple[str, str, bool]] = []  # (targets, expression, pure)
        self.consts: dict[str, Any] = {}
        self._const_names: dict[int, str] = {}
        self.objs: list[Any] = []  # slot -> its object now (keeps every id unique)
        self.slot_of: dict[int, int] = {}  # id(object) -> slot
        self.values: dict[int, Value] = {}  # Values made during the step
        self.made_at: dict[int, str] = {}  # id(Value) -> where it was made (unknown data)
        self.aliases: dict[int, Value] = {}  # id(detached Value) -> the Value it shares
        self.args: dict[int, str] = {}  # id(argument Value) -> its name in the program
        # id(outside Value) -> slot of its data (until a replayed call), and what replays check
        self.reads: dict[int, int] = {}
        self.guards: dict[int, tuple] = {}  # -> (Value, requires_grad, shape, dtype)
        self.last: dict[int, Any] = {}  # id(outside Value) -> the data the program knows it has
        self.modules: dict[int, tuple] = {}  # id(Module) -> (Module, training)
        self.moded: set[int] = set()  # ids of Modules whose mode the step sets itself
        self.pending: dict[int, tuple] = {}  # id(host value) -> (value, slot name, kind, where)
        self.depth = 0  # > 0 inside a call recorded as one step: nothing below is recorded
        self.draw_devices: dict[int, Any] = {}  # devices whose generator the step draws from

    # ----- bookkeeping -------------------------------------------------------------------
    def active(self) -> bool:
        """Whether the hooks record now: this thread, outside a call recorded as one step."""
        return self.depth == 0 and threading.get_ident() == self.thread

    recording = active

    def const(self, obj: Any) -> str:
        """The program's name for a constant object (kept alive by the program)."""
        name = self._const_names.get(id(obj))
        if name is None:
            name = self._const_names[id(obj)] = f"k{len(self._const_names)}"
            self.consts[name] = obj
        return name

    def emit(self, targets: str, expr: str, pure: bool = False) -> None:
        """One line `targets = expr` (an expression statement with no targets); pure lines
        whose targets are never read are dropped."""
        self.lines.append((targets, expr, pure))

    def new_slot(self, obj: Any) -> str:
        self.slot_of[id(obj)] = len(self.objs)
        self.objs.append(obj)
        return f"a{len(self.objs) - 1}"

    def register(self, obj: Any, expr: str, pure: bool = False) -> str:
        """Give `obj` (an array, or a tuple/list of them) a slot computed by `expr`, and each
        element one too."""
        name = self.new_slot(obj)
        self.emit(name, expr, pure)
        if isinstance(obj, (tuple, list)):
            for i, item in enumerate(obj):
                if has_array(item):
                    self.register(item, f"{name}[{i}]", pure=True)
        return name

    def known(self, obj: Any) -> str | None:
        """The slot name holding `obj`, or None."""
        slot = self.slot_of.get(id(obj))
        if slot is not None and self.objs[slot] is obj:
            return f"a{slot}"
        return None

    # ----- naming what steps read ----------------------------------------------------------
    def array(self, obj: Any, strict: bool, who: str) -> str:
        """An expression giving `obj` at replay: a slot, a tuple of them, or a constant. An
        array no recorded step made is refused (`strict`) or taken as a constant."""
        name = self.known(obj)
        if name is not None:
            return name
        if isinstance(obj, Value):
            return self.value(obj, who)
        if isinstance(obj, (tuple, list)) and has_array(obj):
            items = ", ".join(self.array(o, strict, who) for o in obj)
            return f"({items},)" if isinstance(obj, tuple) else f"[{items}]"
        if obj is None:
            return "None"
        if strict and is_array(obj):
            raise CompileError(
                f"ndl.compile({self.name}): {who} is {_describe(obj)} computed outside "
                f"needle's ops, at {where()}: it cannot be replayed. Compute it with Tensor "
                "operations, or in a function marked needle.autograd.array_function")
        return self.const(obj)

    def value(self, v: Value, who: str) -> str:
        """An expression giving the data of the Value `v` at replay."""
        data = v._array
        if id(v) in self.aliases and data is self.aliases[id(v)]._array:
            return self.value(self.aliases[id(v)], who)
        if id(v) in self.values or id(v) in self.args:
            name = self.known(data)
            if name is None:
                if isinstance(data, tuple) and all(self.known(d) for d in data):
                    return self.array(data, True, who)
                made = self.made_at.get(id(v), "a line inside the step")
                raise CompileError(
                    f"ndl.compile({self.name}): {who} is a Tensor made at {made} from "
                    f"{_describe(v)} computed outside needle's ops, used at {where()}: it "
                    "cannot be replayed. Make it with Tensor operations, or in a function "
                    "marked needle.autograd.array_function")
            return name
        return self.read(v)

    def read(self, v: Value) -> str:
        """The data of a Value made before the step (a parameter, a buffer), read from it
        at replay: the optimizer may have replaced it since."""
        slot = self.reads.get(id(v))
        if slot is not None and self.objs[slot] is v._array:
            return f"a{slot}"
        if id(v) not in self.guards:
            data = v._array
            shape = None if isinstance(data, tuple) else tuple(data.shape)
            dtype = None if isinstance(data, tuple) else data.dtype
            self.guards[id(v)] = (v, v.requires_grad, shape, dtype)
        name = self.register(v._array, f"{self.const(v)}._array")
        self.reads[id(v)] = int(name[1:])
        self.last[id(v)] = v._array
        return name

    def ref(self, v: Value) -> str:
        """The program's name for a Value itself (an argument's is the current call's)."""
        return self.args.get(id(v)) or self.const(v)

    def outside(self, v: Value) -> bool:
        """Whether `v` outlives the step: made before it, or an argument."""
        return id(v) not in self.values or id(v) in self.args

    # ----- hooks: steps --------------------------------------------------------------------
    def op(self, op: Any, inputs: tuple, value: Value) -> tuple[Any, Any]:
        """make_from_op's computation of `op` on the Values `inputs`: (output, saved)."""
        if threading.get_ident() == self.thread:
            self.values[id(value)] = value
        arrays = [x._array for x in inputs]
        if not self.active():
            if op.saves:
                return op.forward(*arrays)
            return op.compute(*arrays), None
        who = f"an input of {type(op).__name__}"
        exprs = [self.value(x, who) for x in inputs]
        return self._run_op(op, arrays, exprs, op.saves)

    def evaluate(self, op: Any, inputs: tuple) -> Any:
        """An op called on raw arrays (a gradient rule's): compute's output."""
        if not self.active():
            return op.compute(*inputs)
        who = f"an input of {type(op).__name__}"
        exprs = [self.array(x, True, who) for x in inputs]
        return self._run_op(op, list(inputs), exprs, False)[0]

    def _run_op(self, op: Any, arrays: list, exprs: list[str], forward: bool) -> tuple:
        attrs = hasattr(op, "__dict__")
        state = dict(vars(op)) if attrs else {}
        mine = copy.copy(op)  # the program's own: array attributes are set at each replay
        name = self.const(mine)
        for attr, v in state.items():  # arrays the op holds (labels, saved values) are inputs
            if has_array(v):
                expr = self.array(v, True, f"attribute {attr!r} of {type(op).__name__}")
                self.emit(f"{name}.{attr}", expr)
                setattr(mine, attr, None)  # (not kept alive by the program)
        self.depth += 1
        try:
            if forward:
                out = op.forward(*arrays)
            else:
                out = op.compute(*arrays), None
        finally:
            self.depth -= 1
        method = self.const(getattr(mine, "forward" if forward else "compute"))
        call = f"{method}({', '.join(exprs)})"
        side = [(attr, v) for attr, v in (vars(op).items() if attrs else ())
                if state.get(attr, self) is not v and has_array(v)]  # set by compute
        # a computation is pure: dropped when nothing reads what it gives (unless it also
        # leaves values on the op, read by the lines below)
        self.register(out if forward else out[0], call, pure=not side)
        for attr, v in side:
            self.register(v, f"{name}.{attr}", pure=True)
        return out

    def call(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        """An `array_function` call: recorded, and every array it reads must be known."""
        unwrapped = [a._array if isinstance(a, Value) else a for a in args]
        if not self.active():
            return fn(*unwrapped, **kwargs)
        who = f"an argument of {getattr(fn, '__qualname__', fn)}"
        exprs = [self.array(a, True, who) for a in args]
        exprs += [f"{k}={self.array(v, True, who)}" for k, v in kwargs.items()]
        return self._run_call(fn, unwrapped, kwargs, exprs)

    def device_call(self, method: Any, device: Any, args: tuple, kwargs: dict) -> Any:
        """A device's creation or draw: run again at replay (host data is a constant)."""
        if not self.active():
            return method(device, *args, **kwargs)
        if method.__name__ == "random":
            self.draw_devices[id(device)] = device
        who = f"an argument of {type(device).__name__}.{method.__name__}"
        exprs = [self.const(device)] + [self.array(a, False, who) for a in args]
        exprs += [f"{k}={self.array(v, False, who)}" for k, v in kwargs.items()]
        return self._run_call(method, (device,) + tuple(args), kwargs, exprs)

    def _run_call(self, fn: Any, args: Any, kwargs: dict, exprs: list[str]) -> Any:
        self.depth += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            self.depth -= 1
        call = f"{self.const(fn)}({', '.join(exprs)})"
        if out is None:
            self.emit("", call)
        elif has_array(out):
            self.register(out, call)
        else:
            raise CompileError(f"ndl.compile({self.name}): {getattr(fn, '__qualname__', fn)} "
                               f"returned a {type(out).__name__}, not arrays, at {where()}: "
                               "a value read to the host cannot be replayed")
        return out

    def opaque(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        """A `replayed` call (Optimizer.step, clip_grad_norm_): run again whole at replay."""
        if not self.active():
            return fn(*args, **kwargs)
        # an iterator argument (model.parameters() as a generator) is kept as a list, so
        # each replay gets every element again
        args = tuple(map(_listed, args))
        exprs = [self.static(a) for a in args]
        exprs += [f"{k}={self.static(v)}" for k, v in kwargs.items()]
        self.depth += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            self.depth -= 1
        call = f"{self.const(fn)}({', '.join(exprs)})"
        if isinstance(out, Value):
            self.register(out._array, f"{call}._array")
        else:
            self.emit("", call)
        self.reads.clear()  # the parameters' data may have been replaced
        if args and _is_module(args[0]):  # train()/eval(): replayed, so no guard needed
            self.moded.update(id(m) for m in [args[0], *args[0].descendants()])
        for key, (v, *_) in self.guards.items():
            self.last[key] = v._array
        return out

    def static(self, obj: Any) -> str:
        """A replayed call's argument: Values by reference (an argument: this call's)."""
        if isinstance(obj, Value):
            if not self.outside(obj):
                raise CompileError(f"ndl.compile({self.name}): a Tensor made inside the step "
                                   f"is passed to a replayed call at {where()}; pass "
                                   "parameters or arguments of the step")
            return self.ref(obj)
        if isinstance(obj, (tuple, list)) and any(isinstance(o, Value) for o in obj):
            items = ", ".join(self.static(o) for o in obj)
            return f"({items},)" if isinstance(obj, tuple) else f"[{items}]"
        return self.const(obj)

    # ----- hooks: changes to Values, reads, Modules ----------------------------------------
    def created(self, v: Value) -> None:
        """A Value made during the step (a constant wrapping an array, a leaf)."""
        if threading.get_ident() != self.thread:
            return
        self.values[id(v)] = v
        if self.depth == 0 and not isinstance(v._array, tuple) and self.known(v._array) is None:
            self.made_at[id(v)] = where()

    def alias(self, new: Value, source: Value) -> None:
        """`new` = `source.detach()`: the same data."""
        if self.active() and self.outside(source):
            self.aliases[id(new)] = source

    def modified(self, values: tuple) -> None:
        """mark_modified(*values): each now holds data the program must give it at replay."""
        if not self.active():
            return
        changed = [v for v in values if self.outside(v)]
        for v in changed:
            if v._array is self.last.get(id(v)):
                raise CompileError(f"ndl.compile({self.name}): a Tensor's data was changed in "
                                   f"place at {where()}; only new data (`t.data = ...`) can "
                                   "be replayed")
            self.emit(f"{self.ref(v)}._array", self.array(v._array, True, "new data of a Tensor"))
            self.reads.pop(id(v), None)
            self.last[id(v)] = v._array
        if changed:
            self.emit("", f"_mark_modified({', '.join(self.ref(v) for v in changed)})")

    def grad_set(self, v: Value, raw: bool = False) -> None:
        """`v.grad` was set (by backward, or assigned): the program sets it at replay."""
        if not self.active():
            return
        grad = v._grad
        if raw and isinstance(grad, Value):  # a backward that records no graph: the array
            grad = v._grad = grad._array
        if not self.outside(v):
            return
        if grad is None:
            expr = "None"
        elif isinstance(grad, Value):
            expr = self.value(grad, "a gradient")
        else:
            expr = self.array(grad, True, "a gradient")
        self.emit(f"{self.ref(v)}._grad", expr)

    def constant(self, output: Value, out_grad: Any) -> Value:
        """backward's raw adjoint of `output` as a constant Value of its kind."""
        return type(output).make_const(out_grad, device=output.device)

    def module(self, m: Any) -> None:
        """A Module was called: replays check its train/eval mode."""
        if self.active() and id(m) not in self.moded:
            self.modules.setdefault(id(m), (m, m.training))

    def setting(self, obj: Any, name: str, value: Any) -> None:
        """An optimizer's hyperparameter set inside the step: set again at replay."""
        if not self.active():
            return
        if isinstance(value, Value) or has_array(value):
            raise CompileError(f"ndl.compile({self.name}): {type(obj).__name__}.{name} is set "
                               f"to a tensor value at {where()}; pass a Python number")
        self.emit(f"{self.const(obj)}.{name}", self.const(value))

    def host_read(self, v: Value, kind: str) -> Any:
        """t.numpy() / t.item() / float(t): allowed only for what the step returns."""
        data = v._realize()
        if not self.active():
            return HOST_READS[kind](v.device, data)
        expr = self.value(v, "a value read to the host")
        out = HOST_READS[kind](v.device, data)
        self.pending[id(out)] = (out, expr, kind, where())
        return out

    def control_flow(self, v: Value) -> None:
        """bool(t): Python control flow on a value cannot be replayed."""
        if self.active():
            raise CompileError(f"ndl.compile({self.name}): the truth of a Tensor is read at "
                               f"{where()}; Python control flow on tensor values cannot be "
                               "replayed (the branch taken now would be taken every time)")

    def course_view(self, v: Value) -> None:
        """cached_data / realize_cached_data: NDArray views escape the recorder."""
        if self.active():
            raise CompileError(f"ndl.compile({self.name}): cached_data or "
                               f"realize_cached_data() used at {where()}; NDArray views are "
                               "not recorded: use Tensor operations inside a compiled step")


def _is_module(obj: Any) -> bool:
    from ..nn import Module

    return isinstance(obj, Module)


def _listed(obj: Any) -> Any:
    """An iterator as a list of its items (anything else as it is)."""
    try:
        it = iter(obj)
    except TypeError:
        return obj
    return list(obj) if it is obj else obj


HOST_READS = {
    "numpy": lambda device, a: device.to_numpy(a),
    "item": lambda device, a: device.to_numpy(a).item(),
    "float": lambda device, a: float(device.to_numpy(a).item()),
}

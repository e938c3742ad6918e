"""The recorder: runs a step eagerly once and writes down its program of array operations.

While it is installed (graph._TRACER, the device call hook), the core's hooks report every
op's `compute`/`forward` (graph and raw arrays alike), every `array_function` call, every
creation or random draw on a device, every `replayed` call (optimizer steps, clipping), and
every change of a Value made outside fn (a `.grad` set by backward, new data through
`mark_modified`: state.py). Each becomes a line of Python source over numbered array slots
(`a12`), constants (`k3`) and the step's Tensor arguments (`v0`); program.py turns the lines
into one function. Arrays are known by identity: an array that enters a recorded step without
having come out of one (or from an argument, or from a Tensor made before the step) was
computed where the recorder cannot see, and is refused with the line that used it.
"""

from __future__ import annotations

import copy
import threading
import weakref
from typing import Any

from ..autograd.graph import Value
from ..autograd.weak import WeakIdDict, WeakIdSet
from .state import StateHooks
from .support import CompileError, describe, has_array, is_array, is_module, listed, where

#: the device methods that draw random numbers (their results differ at every replay)
DRAWS = frozenset({"rand", "randn", "random", "uniform", "normal", "bernoulli"})


class Recorder(StateHooks):
    """The program of one step, written while the step runs eagerly (see the module doc)."""

    def __init__(self, name: str):
        self.name = name
        self.thread = threading.get_ident()
        self.lines: list[tuple[str, str, bool]] = []  # (targets, expression, pure)
        self.consts: dict[str, Any] = {}
        self._const_names: dict[int, str] = {}
        # slot -> its object now (a weak reference where it can be: memory is freed as eager
        # frees it, and `known` sees a dead one's id reused)
        self.objs: list[Any] = []
        self.slot_of: dict[int, int] = {}  # id(object) -> slot
        self.values = WeakIdSet()  # Values made during the step (weak: freed as eagerly; by id)
        self.made_at = WeakIdDict()  # Value -> where it was made (unknown data)
        self.aliases = WeakIdDict()  # detached Value -> the Value it shares
        self.grad_reads = WeakIdDict()  # a .grad read -> its slot
        self.args: dict[int, str] = {}  # id(argument Value) -> its name in the program
        self.arg_slots: dict[int, int] = {}  # id(argument Value) -> the slot of its data
        # arrays read from outside the step: slot -> whose data it was (an argument, a Tensor
        # made before the step, a gradient); and the slots of arrays two of them share
        self.origin: dict[int, Any] = {}
        self.shared: set[int] = set()
        # id(outside Value) -> slot of its data (until a replayed call), and what replays check
        self.reads: dict[int, int] = {}
        self.guards: dict[int, tuple] = {}  # -> (Value, requires_grad, shape, dtype, device)
        self.last: dict[int, Any] = {}  # id(outside Value) -> the data the program knows it has
        self.modules: dict[int, tuple] = {}  # id(Module) -> (Module, training, _assigned)
        self.moded: set[int] = set()  # ids of Modules whose mode the step sets itself
        #: slots whose arrays differ between replays (ops', array functions' and draws'
        #: results), unlike constants (host data, zeros): a Module may not keep them
        self.varying: set[int] = set()
        self.pending: dict = {}  # id(host value) -> (value, slot, kind, where, device, lines)
        self.depth = 0  # > 0 inside a call recorded as one step: nothing below is recorded
        self.draw_devices: dict[int, Any] = {}  # devices whose generator the step draws from
        self.replayed_calls = 0  # optimizer steps, clipping, train(): run whole at replay
        self.grad_targets: dict[int, Value] = {}  # Values whose .grad the step sets
        self.grads_set: set[int] = set()  # ids of outside Values whose .grad the step set
        self.opaques = 0  # replayed calls made so far (they may set any .grad)
        self.checks: list[str] = []  # guards reading the arguments (`check` at replay)

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
        """A fresh slot for `obj` (held weakly where it can be), and its name `a<slot>`."""
        self.slot_of[id(obj)] = len(self.objs)
        try:
            self.objs.append(weakref.ref(obj))
        except TypeError:  # tuples, numpy scalars: kept alive (so their ids stay theirs)
            self.objs.append(obj)
        return f"a{len(self.objs) - 1}"

    def obj(self, slot: int) -> Any:
        """The object in `slot` (None when it was freed)."""
        held = self.objs[slot]
        return held() if held.__class__ is weakref.ref else held

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
        if slot is not None and self.obj(slot) is obj:
            return f"a{slot}"
        return None

    def external(self, obj: Any, expr: str, source: Any, pure: bool = False) -> str:
        """Register `obj`, the data of `source` (an argument, a Tensor made before the step,
        a gradient from before it) read from it by `expr`. An array two sources share at
        recording (state_dict()'s values and the parameters, `x` and `x.detach()`) is found
        through its Value only: by identity it could be either at replay."""
        prev = self.slot_of.get(id(obj))
        shared = prev is not None and self.obj(prev) is obj and (
            prev in self.shared or self.origin.get(prev, source) != source)
        name = self.register(obj, expr, pure)
        self.origin[int(name[1:])] = source
        if shared:
            self.shared.add(int(name[1:]))
        return name

    def argument(self, v: Value, i: int) -> None:
        """The step's Tensor argument `v`, `v<i>` in the program."""
        self.args[id(v)] = f"v{i}"
        name = self.external(v._array, f"v{i}._array", id(v), pure=True)
        self.arg_slots[id(v)] = int(name[1:])

    def unique(self, obj: Any, who: str) -> str | None:
        """`known(obj)`, refusing an array several Tensors share (see `external`)."""
        name = self.known(obj)
        if name is not None and int(name[1:]) in self.shared:
            raise CompileError(
                f"ndl.compile({self.name}): {who} is the array of several Tensors the step "
                "reads (arguments or Tensors made before the step sharing it, as "
                f"state_dict()'s values share the parameters'), used at {where()} without its "
                "Tensor: which one it is at a replay cannot be told. Pass a copy, or use "
                "Tensor operations on it")
        return name

    # ----- naming what steps read ----------------------------------------------------------
    def array(self, obj: Any, strict: bool, who: str) -> str:
        """An expression giving `obj` at replay: a slot, a tuple of them, or a constant. An
        array no recorded step made is refused (`strict`) or taken as a constant."""
        name = self.unique(obj, who)
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
                f"ndl.compile({self.name}): {who} is {describe(obj)} computed outside "
                f"needle's ops, at {where()}: it cannot be replayed. Compute it with Tensor "
                "operations, or in a function marked needle.autograd.array_function")
        return self.const(obj)

    def value(self, v: Value, who: str) -> str:
        """An expression giving the data of the Value `v` at replay."""
        data = v._array
        source = self.aliases.get(v)
        if source is not None and data is source._array:
            return self.value(source, who)
        name = self.grad_reads.get(v)
        if name is not None and self.known(data) == name:  # a gradient from before the step
            return name
        slot = self.arg_slots.get(id(v))
        if slot is not None and self.obj(slot) is data:  # an argument's own data
            return f"a{slot}"
        if v in self.values or slot is not None:
            name = self.unique(data, who)
            if name is None:
                if isinstance(data, tuple) and all(self.known(d) for d in data):
                    return self.array(data, True, who)
                made = self.made_at.get(v, "a line inside the step")
                raise CompileError(
                    f"ndl.compile({self.name}): {who} is a Tensor made at {made} from "
                    f"{describe(v)} computed outside needle's ops, used at {where()}: it "
                    "cannot be replayed. Make it with Tensor operations, or in a function "
                    "marked needle.autograd.array_function")
            return name
        return self.read(v)

    def read(self, v: Value) -> str:
        """The data of a Value made before the step (a parameter, a buffer), read from it
        at replay: the optimizer may have replaced it since."""
        slot = self.reads.get(id(v))
        if slot is not None and self.obj(slot) is v._array:
            return f"a{slot}"
        if id(v) not in self.guards:
            data = v._array
            shape = None if isinstance(data, tuple) else tuple(data.shape)
            dtype = None if isinstance(data, tuple) else data.dtype
            self.guards[id(v)] = (v, v.requires_grad, shape, dtype, v.device)
        name = self.external(v._array, f"{self.const(v)}._array", id(v))
        self.reads[id(v)] = int(name[1:])
        self.last[id(v)] = v._array
        return name

    def ref(self, v: Value) -> str:
        """The program's name for a Value itself (an argument's is the current call's)."""
        return self.args.get(id(v)) or self.const(v)

    def outside(self, v: Value) -> bool:
        """Whether `v` outlives the step: made before it, or an argument."""
        return v not in self.values or id(v) in self.args

    # ----- hooks: steps --------------------------------------------------------------------
    def op(self, op: Any, inputs: tuple, value: Value) -> tuple[Any, Any]:
        """make_from_op's computation of `op` on the Values `inputs`: (output, saved)."""
        if threading.get_ident() == self.thread:
            self.values.add(value)
        arrays = [x._array for x in inputs]
        if not self.active():
            if op.saves:
                return op.forward(*arrays)
            return op.compute(*arrays), None
        who = f"an input of {type(op).__name__}"
        exprs = [self.value(x, who) for x in inputs]
        varying = self._reads_varying(arrays)  # (before: an output may be an input array)
        out = self._run_op(op, arrays, exprs, op.saves)
        if varying:
            self._varies(out[0])
        return out

    def _reads_varying(self, items: Any) -> bool:
        """Whether any array among `items` (arrays, Values, tuples or lists of them) may
        differ at a replay: the step's arguments, data of Tensors made before it, and what
        was computed from them or drawn."""
        for item in items:
            if isinstance(item, (tuple, list)):
                if self._reads_varying(item):
                    return True
                continue
            array = item._array if isinstance(item, Value) else item
            slot = self.slot_of.get(id(array))
            if slot is not None and self.obj(slot) is array and (
                    slot in self.varying or slot in self.origin):
                return True
        return False

    def _varies(self, out: Any) -> None:
        """Mark the slots of `out` (an array, or a tuple or list of them) as varying."""
        for obj in (out, *(out if isinstance(out, (tuple, list)) else ())):
            slot = self.slot_of.get(id(obj))
            if slot is not None and self.obj(slot) is obj:
                self.varying.add(slot)

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
        slots = [getattr(op, n, None) for c in type(op).__mro__ for n in c.__dict__.get(
            "__slots__", ()) if n != "__weakref__"]
        for v in [*state.values(), *slots]:
            if isinstance(v, Value) or (not attrs and has_array(v)):
                raise CompileError(
                    f"ndl.compile({self.name}): {type(op).__name__} holds a "
                    f"{'Tensor' if isinstance(v, Value) else 'array in a slot'}, at {where()}; "
                    "a compiled step replays ops whose arrays are inputs or plain attributes")
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
        varying = self._reads_varying([*args, *kwargs.values()])
        out = self._run_call(fn, unwrapped, kwargs, exprs)
        if varying:
            self._varies(out)  # (a helper of constants gives a constant)
        return out

    def device_call(self, method: Any, device: Any, args: tuple, kwargs: dict) -> Any:
        """A device's creation or draw: run again at replay (host data is a constant; a
        Tensor's data, `Tensor(t)` copying t, is read from it)."""
        raw = tuple(a._realize() if isinstance(a, Value) else a for a in args)
        if not self.active():
            return method(device, *raw, **kwargs)
        if method.__name__ == "random":
            self.draw_devices[id(device)] = device
        who = f"an argument of {type(device).__name__}.{method.__name__}"
        exprs = [self.const(device)] + [self.array(a, False, who) for a in args]
        exprs += [f"{k}={self.array(v, False, who)}" for k, v in kwargs.items()]
        varying = method.__name__ in DRAWS or self._reads_varying([*args, *kwargs.values()])
        out = self._run_call(method, (device,) + raw, kwargs, exprs)
        if varying:
            self._varies(out)  # (a draw, or made from the step's data; not host constants)
        return out

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
        args = tuple(map(listed, args))
        exprs = [self.static(a) for a in args]
        exprs += [f"{k}={self.static(v)}" for k, v in kwargs.items()]
        self.depth += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            self.depth -= 1
        self.replayed_calls += 1
        self.opaques += 1
        call = f"{self.const(fn)}({', '.join(exprs)})"
        if isinstance(out, Value):
            self.register(out._array, f"{call}._array")
        else:
            self.emit("", call)
        self.reads.clear()  # the parameters' data may have been replaced
        if args and is_module(args[0]):  # train()/eval(): replayed, so no guard needed
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

"""A recorded step as one Python function over arrays: guards, the recorded lines, the result.

The recorder's lines become the body of `replay(v0, v1, ...)` (the step's Tensor arguments):
first the guards (the train/eval mode and the count of attribute assignments of every Module
called, the requires_grad, device, shape and dtype of every Tensor read that was made before
the step: a change raises
`Retrace`, before anything ran, and the step is recorded again), then one line per recorded
operation, with each array slot deleted after its last use (so intermediates are freed as
eager frees them), and computations whose results nobody reads dropped. No Tensor, Value or
graph node is made but the Tensors of the result.
"""

from __future__ import annotations

import itertools
import linecache
import re
import weakref
from numbers import Number
from typing import Any

from ..autograd.graph import Value, mark_modified
from .recorder import Recorder
from .support import HOST_READS, CompileError, holds_values, is_array, is_module

_SLOT = re.compile(r"(?<![.\w])a(\d+)\b")  # a slot's name (not an attribute's)
_counter = itertools.count()


class Retrace(Exception):
    """A guard of the program failed: the step must be recorded again."""


def detached(obj: Any) -> Any:
    """The step's result as a call returns it: Tensors as constants sharing their data."""
    if isinstance(obj, Value):
        return type(obj).make_const(obj._array, device=obj.device)
    if isinstance(obj, (tuple, list)):
        items = [detached(o) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, dict):
        return {k: detached(v) for k, v in obj.items()}
    return obj



def _slow_guard(guards: list, seen: list) -> Any:
    """check(i): the slow guard of Tensor i, the same requires_grad, device, shape and dtype
    as recorded (Retrace otherwise); its data is then the one the fast guard expects."""
    def check(i: int) -> None:
        v, requires_grad, shape, dtype, device = guards[i]
        data = v._array
        if v.requires_grad is not requires_grad or v.device != device or (shape is not None and (
                tuple(data.shape) != shape or data.dtype != dtype)):
            raise Retrace
        seen[i] = data
    return check

class Program:
    """The replayable form of one recorded step (called with the new Tensor arguments)."""

    def __init__(self, rec: Recorder, result: Any, n_args: int):
        self.name = rec.name
        end = len(rec.lines)  # (what the step recorded; the result's reads come after)
        used: set[int] = set()
        numbers: list[Any] = []
        out = self._output(rec, result, used, numbers)
        unread = [p for key, p in rec.pending.items() if key not in used]
        if unread:
            lines = "; ".join(p[3] for p in unread)
            raise CompileError(f"ndl.compile({rec.name}): a value is read to the host inside "
                               f"the step at {lines}: its value now would be replayed every "
                               "time. Return the Tensor (or the float or array read itself) "
                               "and read it after the call")
        late = [p[3] for p in rec.pending.values() if p[5] < end]
        if late or (rec.pending and numbers):
            what = ("the step records operations after it, which may use it" if late else
                    f"the result also holds the number {numbers[0]!r}, which may be computed "
                    "from it")
            raise CompileError(
                f"ndl.compile({rec.name}): the value read to the host at "
                f"{'; '.join(late or [p[3] for p in rec.pending.values()])} is returned, but "
                f"{what}: it would be frozen at its value now. Read values to the host at the "
                "end of the step, after its last Tensor operation, or return the Tensors and "
                "read them after the call")
        for key, (v, *_) in rec.guards.items():  # data replaced where nothing recorded it
            if v._array is not rec.last[key]:
                raise CompileError(
                    f"ndl.compile({rec.name}): the data of a Tensor made before the step "
                    f"(shape {tuple(getattr(v._array, 'shape', ()))}) was replaced inside it "
                    "without needle.autograd.mark_modified (or outside an Optimizer's step): "
                    "the change cannot be replayed")
        self.guards = list(rec.guards.values())
        self.seen: list[Any] = [None] * len(self.guards)
        head = []
        for i, (v, rg, *_) in enumerate(self.guards):
            k = rec.const(v)
            head.append(f"if {k}.requires_grad is not {rg} or {k}._array is not _seen[{i}]: "
                        f"_check({i})")
        for m, training, assigned in rec.modules.values():  # (its settings, Parameters, ...
            k = rec.const(m)  # as at its first call: one assigned later records again)
            mode = "" if training is None else f"{k}.training != {training!r} or "
            head.append(f"if {mode}{k}._assigned != {assigned}: raise _Retrace")
        body = _schedule(rec.lines, out)
        params = ", ".join(f"v{i}" for i in range(n_args))
        self.source = "\n    ".join([f"def replay({params}):", *head, *body, f"return {out}"])
        self.source += "\n\n" + "\n    ".join([f"def guard({params}):", *head, *rec.checks,
                                                "return None"])
        if rec.checks:  # (guards on the arguments: not in replay, which a CUDA graph captures)
            self.source += "\n\n" + "\n    ".join([f"def check({params}):", *rec.checks,
                                                    "return None"])
        filename = f"<ndl.compile {rec.name} #{next(_counter)}>"
        linecache.cache[filename] = (len(self.source), None,  # (tracebacks show the line)
                                     self.source.splitlines(True), filename)
        weakref.finalize(self, linecache.cache.pop, filename, None)
        # (the slow guard as a function of the guards alone: a bound method in the scope
        # would make program -> replay -> scope -> program, a cycle only gc frees)
        scope = dict(rec.consts, _seen=self.seen, _check=_slow_guard(self.guards, self.seen),
                     _Retrace=Retrace,
                     _mark_modified=mark_modified, _tensor=_tensor, _host=HOST_READS,
                     _grad_of=_grad_of, _grad_now=_grad_now, _grad_was_none=_grad_was_none)
        exec(compile(self.source, filename, "exec"), scope)  # noqa: S102 (our own source)
        self.replay, self.guard = scope["replay"], scope["guard"]
        self.check = scope.get("check")
        self.steps = len(body)
        self._constants = list(rec.consts.values())
        self._draws = list(rec.draw_devices.values())
        self.replayed_calls = rec.replayed_calls
        self.grad_targets = [v for key, v in rec.grad_targets.items() if key not in rec.args]

    def constants(self) -> list[Any]:
        """The objects the program refers to (parameters, ops, optimizers, devices...)."""
        return self._constants

    def generators(self) -> list[Any]:
        """The training generators of the devices whose `random` the program calls."""
        return [device.generator() for device in self._draws]

    def _output(self, rec: Recorder, obj: Any, used: set[int], numbers: list) -> str:
        """The expression building the step's result at replay (`numbers`: the constant
        numbers in it)."""
        if isinstance(obj, Value):
            data = rec.value(obj, "the step's result")
            return f"_tensor({rec.const(type(obj))}, {data}, {rec.const(obj.device)})"
        pending = rec.pending.get(id(obj))
        if pending is not None and pending[0] is obj:
            used.add(id(obj))
            _, data, kind, _, device, _ = pending
            return f"_host[{kind!r}]({rec.const(device)}, {data})"
        if isinstance(obj, (tuple, list)):
            items = ", ".join(self._output(rec, o, used, numbers) for o in obj)
            if hasattr(obj, "_fields"):  # a namedtuple
                return f"{rec.const(type(obj))}({items})"
            return f"({items},)" if isinstance(obj, tuple) else f"[{items}]"
        if isinstance(obj, dict):
            items = ", ".join(f"{rec.const(k)}: {self._output(rec, v, used, numbers)}"
                              for k, v in obj.items())
            return f"{{{items}}}"
        if isinstance(obj, Number):
            numbers.append(obj)
        elif is_array(obj):  # an array the step computed: its slot (else a constant)
            return rec.array(obj, False, "the step's result")
        elif holds_values(obj) and not is_module(obj):
            raise CompileError(
                f"ndl.compile({rec.name}): the step returns an object of type "
                f"{type(obj).__name__} holding Tensors: a replay rebuilds only tuples, lists, "
                "dicts and namedtuples of them "
                "(this one would be the first call's every time); return one of those")
        return rec.const(obj)

    def __call__(self, tensors: list) -> Any:
        if self.check is not None:
            self.check(*tensors)  # (raises Retrace before anything ran)
        return self.replay(*tensors)


def _tensor(cls: type, data: Any, device: Any) -> Value:
    return cls.make_const(data, device=device)


def _grad_now(v: Value) -> Any:
    """`v.grad` as the step would read it (None, a Value or an array), without the hook."""
    grad = v._grad
    return grad() if grad.__class__ is weakref.ref else grad


def _grad_was_none(v: Value) -> None:
    raise RuntimeError(f"ndl.compile: the step reads the .grad of a {type(v).__name__} of "
                       f"shape {tuple(v._array.shape)} after a replayed call (an optimizer's "
                       "step), where it was None when the step was recorded; it is set now. "
                       "Read it before, or compile again")


def _grad_of(v: Value) -> Any:
    """The array of `v.grad` at replay (the step read a gradient it did not compute)."""
    grad = v._grad
    if grad is None:
        raise RuntimeError(f"ndl.compile: the step reads the .grad of a "
                           f"{type(v).__name__} of shape {tuple(v._array.shape)}, which is "
                           "None now (it was set when the step was recorded)")
    if grad.__class__ is weakref.ref:
        grad = grad()
    return grad._array if isinstance(grad, Value) else grad


def _schedule(lines: list[tuple[str, str, bool]], out: str) -> list[str]:
    """The body: pure lines nobody reads dropped, `del` after each slot's last use."""
    live = set(map(int, _SLOT.findall(out)))
    kept = []
    for targets, expr, pure in reversed(lines):
        defs = {int(targets[1:])} if _SLOT.fullmatch(targets) else set()
        if pure and defs and not defs & live:
            continue
        uses = set(map(int, _SLOT.findall(expr)))
        if not defs:
            uses |= set(map(int, _SLOT.findall(targets)))
        live -= defs
        live |= uses
        kept.append((targets, expr, defs, uses))
    kept.reverse()
    last: dict[int, int] = {}
    for i, (_, _, defs, uses) in enumerate(kept):
        for s in defs | uses:
            last[s] = i
    keep = set(map(int, _SLOT.findall(out)))
    dead: dict[int, list[int]] = {}
    for s, i in last.items():
        if s not in keep:
            dead.setdefault(i, []).append(s)
    body = []
    for i, (targets, expr, _, _) in enumerate(kept):
        body.append(f"{targets} = {expr}" if targets else expr)
        if i in dead:
            body.append("del " + ", ".join(f"a{s}" for s in sorted(dead[i])))
    return body

"""The recorder's hooks on state the step changes or reads outside its array operations: new
Values, `.grad` set and read, data replaced (`mark_modified`), Modules called, optimizer
settings, reads to the host, and what cannot be recorded (control flow on values, NDArray
views). A mixin of `Recorder` (recorder.py), which holds the bookkeeping they use."""

from __future__ import annotations

import threading
from typing import Any

from ..autograd.graph import Value
from .support import HOST_READS, CompileError, has_array, where


class StateHooks:
    """The Recorder's hooks on Values' state, host reads and Modules (see the module doc)."""

    def created(self, v: Value) -> None:
        """A Value made during the step (a constant wrapping an array, a leaf)."""
        if threading.get_ident() != self.thread:
            return
        self.values.add(v)
        if self.depth == 0 and not isinstance(v._array, tuple) and self.known(v._array) is None:
            self.made_at[v] = where()

    def alias(self, new: Value, source: Value) -> None:
        """`new` = `source.detach()`: the same data."""
        if self.active() and self.outside(source):
            self.aliases[new] = source

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

    def grad_set(self, v: Value, raw: bool = False, grad: Any = None) -> None:
        """`v.grad` was set to `grad` (by backward, or assigned): the program sets it at
        replay. (Handed over, not read back: another thread may set v.grad meanwhile.)"""
        if not self.active():
            return
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
        self.grad_targets[id(v)] = v
        self.grads_set.add(id(v))
        self.emit(f"{self.ref(v)}._grad", expr)

    def grad_read(self, v: Value, grad: Value | None) -> None:
        """`v.grad` was read: a gradient from before the step is read from `v` at replay,
        at this point of the step (a backward may set another after). Whether it is None is
        checked: before the replay runs (recording again when it changed) where it is the
        gradient from before the step, else (after a replayed call) at this point."""
        if not (self.active() and self.outside(v)):
            return
        ref = self.ref(v)
        before = id(v) not in self.grads_set and not self.opaques  # (from before the step)
        if grad is None:
            if before:
                self.checks.append(f"if _grad_now({ref}) is not None: raise _Retrace")
            elif id(v) not in self.grads_set:
                self.emit("", f"_grad_now({ref}) is None or _grad_was_none({ref})")
        elif self.known(grad._array) is None:
            if before:
                self.checks.append(f"if _grad_now({ref}) is None: raise _Retrace")
            self.grad_reads[grad] = self.external(grad._array, f"_grad_of({ref})",
                                                  ("grad", id(v)), pure=True)

    def constant(self, output: Value, out_grad: Any) -> Value:
        """backward's raw adjoint of `output` as a constant Value of its kind."""
        return type(output).make_const(out_grad, device=output.device)

    def module(self, m: Any) -> None:
        """A Module was called: replays check its train/eval mode (unless the step sets
        it) and its attributes' assignments, and those of its descendants, which a Module
        may use without calling them (an LSTM's cells)."""
        if not self.active() or id(m) in self.modules:
            return
        for sub in (m, *m.descendants()):
            key = id(sub)
            if key not in self.modules:  # (None: the mode the step sets itself)
                training = None if key in self.moded else sub.training
                self.modules[key] = (sub, training, sub._assigned)

    def module_set(self, m: Any, name: str, value: Any) -> None:
        """`m.name = value` inside the step, where a replay runs no Python: a Tensor the step
        computed or drew, or an argument, kept on a Module (an RNN's hidden state as `self.h`)
        would stay the recording's. (A setting assigned after the Module's first call, a schedule's
        `drop.p = p`, makes the next call record again: the guard reads `_assigned` as it
        was at that call; a constant made in the step, a cached mask, stays valid.)"""
        if not self.active() or not isinstance(value, Value):
            return
        if id(value) in self.args or (not self.outside(value)
                                      and self._reads_varying([value._array])):
            raise CompileError(
                f"ndl.compile({self.name}): a Tensor the step computed (or an argument) is "
                f"kept as {type(m).__name__}.{name} at {where()}: replays would leave the "
                "recording's there. Return it from the step (and pass it back in as an "
                "argument)")

    def backward_node(self, node: Value) -> None:
        """backward reached an op's output: one made before the step (an argument whose
        graph was built outside, a loss made outside) cannot be differentiated at replay."""
        if self.active() and self.outside(node):
            raise CompileError(
                f"ndl.compile({self.name}): backward at {where()} reaches "
                f"{type(node.op).__name__}'s output, made before the step (a Tensor argument "
                "with a graph built outside it, whose forward ran eagerly): a replay cannot "
                "differentiate through it. Run that forward inside the step, or pass the "
                "Tensor detached")

    def setting(self, obj: Any, name: str, value: Any) -> None:
        """An optimizer's hyperparameter set inside the step: set again at replay."""
        if not self.active():
            return
        if isinstance(value, Value) or has_array(value):
            raise CompileError(f"ndl.compile({self.name}): {type(obj).__name__}.{name} is set "
                               f"to a tensor value at {where()}; pass a Python number")
        self.replayed_calls += 1  # (a setting a CUDA graph could not see)
        self.emit(f"{self.const(obj)}.{name}", self.const(value))

    def host_read(self, v: Value, kind: str) -> Any:
        """t.numpy() / t.item() / float(t): allowed only for what the step returns."""
        data = v._realize()
        if not self.active():
            return HOST_READS[kind](v.device, data)
        expr = self.value(v, "a value read to the host")
        out = HOST_READS[kind](v.device, data)
        # the result is found in what the step returns by identity: Python shares small
        # ints and bools, so theirs cannot be told from a constant and are never returned
        key = ("int", len(self.pending)) if type(out) in (int, bool) else id(out)
        # (its device, for the replay's read; the line count: a returned read must be the
        # last thing the step records, as Python may use the value for what follows)
        self.pending[key] = (out, expr, kind, where(), v.device, len(self.lines))
        return out

    def dlpack(self, v: Value) -> None:
        """t.__dlpack__() (np.from_dlpack(t), torch.from_dlpack(t)): a read the recorder
        cannot follow."""
        if self.active():
            raise CompileError(f"ndl.compile({self.name}): a Tensor is read through DLPack at "
                               f"{where()}; what another library computes from it cannot be "
                               "replayed (it would be frozen at its value now): use Tensor "
                               "operations inside the step, or read it after the call")

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

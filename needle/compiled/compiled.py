"""`ndl.compile(fn)`: record a step once per signature, replay it without building a graph."""

from __future__ import annotations

import functools
import threading
import warnings
from collections import OrderedDict
from typing import Any, Callable

from ..autograd import Tensor, TensorTuple, Value, graph
from ..backends import call_hook as _device
from ..grad_mode import _grad_enabled
from .cuda_graph import Graphed, eligible
from .names import assigned, name_guards, snapshot
from .program import Program, Retrace, detached
from .recorder import Recorder
from .support import CompileError, holds_data, is_array, reachable

_capturing = threading.Lock()  # one recording at a time (the hooks are process-wide)


def signature(args: tuple, kwargs: dict) -> tuple[tuple, list[Tensor], list[Any], list[Any]]:
    """(the cache key, the Tensor arguments in order, objects keyed by identity, other
    objects among the arguments: `holding` searches them for Tensors when recording).

    The key holds each Tensor's shape, dtype, device, requires_grad and whether it is a leaf
    (and which arguments are the same Tensor), the values of other arguments (by identity
    when unhashable: the entry keeps those alive, so an id is never reused), and the grad
    mode. An iterator is a CompileError.
    """
    tensors: list[Tensor] = []
    position: dict[int, int] = {}
    pinned: list[Any] = []
    held: list[Any] = []

    def walk(obj: Any) -> Any:
        if isinstance(obj, Value):
            if not isinstance(obj, Tensor) or isinstance(obj, TensorTuple):
                raise TypeError("ndl.compile: TensorTuple arguments are not supported; pass "
                                "its Tensors")
            i = position.get(id(obj))
            if i is not None:
                return ("same", i)
            position[id(obj)] = len(tensors)
            tensors.append(obj)
            data = obj._array  # (whether it has a graph: one made outside is a CompileError)
            return (Tensor, tuple(data.shape), data.dtype, obj.device, obj.requires_grad,
                    obj.op is None)
        kind = type(obj)
        if kind is float or kind is complex or kind is int or kind is str or obj is None:
            pass  # (the common constants first)
        elif isinstance(obj, (tuple, list)):  # namedtuples too: their Tensors are arguments
            return (kind, tuple(map(walk, obj)))
        elif isinstance(obj, dict):  # (keys by type and printed value: 1, 1.0 and True differ)
            return (kind, tuple(((type(k), repr(k) if type(k) in (float, complex) else k),
                                 walk(v)) for k, v in obj.items()))
        elif hasattr(obj, "__next__"):  # (a replay would not draw from it)
            raise CompileError(
                f"ndl.compile: an argument of type {kind.__name__} is an iterator: a replay "
                "would not draw from it, but repeat the recording's items. Draw the batch "
                "before the call and pass its Tensors")
        elif not is_array(obj):
            if holds_data(obj, limit=8):  # (in part at every call: a bounded cost; in
                raise CompileError(_holds_message(kind))  # full when recorded: `held`)
            held.append(obj)
        if isinstance(obj, (float, complex)) or (
                getattr(obj, "shape", None) == () and kind.__module__ == "numpy"):
            return (kind, repr(obj))  # -0.0 is not 0.0, and NaN is NaN
        try:
            hash(obj)
        except TypeError:
            pinned.append(obj)
            return ("id", id(obj))
        return (kind, obj)

    try:
        return (_grad_enabled(), walk(args), walk(kwargs)), tensors, pinned, held
    finally:
        walk = None  # noqa: F841 (the closure's cell held walk itself: a cycle that kept every
        # call's argument Tensors alive until the garbage collector ran)


def _holds_message(kind: type) -> str:
    return (f"ndl.compile: an argument of type {kind.__name__} holds Tensors (or arrays): a "
            "replay would read the ones it held when the step was recorded. Pass the Tensors, "
            "or a tuple, list, dict or namedtuple of them")


class Compiled:
    """A step function recorded once per signature and replayed after (see `compile`)."""

    def __init__(self, fn: Callable, *, max_cache: int = 8, cuda_graph: bool = False):
        if not callable(fn):
            raise TypeError(f"ndl.compile: expected a function, got {type(fn).__name__}")
        if max_cache < 1:
            raise ValueError(f"ndl.compile: max_cache must be >= 1, got {max_cache}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.max_cache = max_cache
        self.cuda_graph = cuda_graph
        # signature -> [its programs, most recent first: one per state of the guards, such
        # as train and eval mode; the objects its key holds by identity; how many times it
        # was recorded, and in a row since its last replay; whether a warning said so]
        self.cache: OrderedDict[tuple, list] = OrderedDict()
        #: how many times the step was recorded (a new signature, a failed guard)
        self.captures = 0
        #: a method (set when bound or defined in a class body): self keyed by identity
        self.method = False
        self._lock = threading.Lock()  # the cache's order and evictions, across threads

    def __set_name__(self, owner: type, name: str) -> None:
        """Defined in a class body: a method, whose first argument is self, also when called
        through the class (`Cls.step(obj, x)` is `obj.step(x)`)."""
        self.method = not isinstance(self.fn, staticmethod)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """`obj.step` for a step defined as a method: `step` bound to `obj`, as a function
        would be (on the class, or for a staticmethod, the step itself)."""
        if instance is None or isinstance(self.fn, staticmethod):
            return self
        self.method = True  # assigned to a class after its creation: a method from now on
        return BoundStep(self, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.method and args:
            return self._call(args[0], args[1:], kwargs)
        return self._call(_UNBOUND, args, kwargs)

    def _call(self, instance: Any, args: tuple, kwargs: dict) -> Any:
        """Replay or record the step for `args`; with `instance` (a bound method's self),
        `fn(instance, *args)`, self keyed by identity and kept alive with its entry."""
        bound = instance is not _UNBOUND
        tracer = graph._TRACER
        if tracer is not None and tracer.thread == threading.get_ident():
            if bound:
                return self.fn(instance, *args, **kwargs)  # inside another recording
            return self.fn(*args, **kwargs)  # inside another recording: part of it
        key, tensors, pinned, held = signature(args, kwargs)
        if bound:  # by identity even when instances compare equal: each reads its own state
            key = (("self", id(instance)), *key)
            pinned.append(instance)
            args = (instance, *args)
        entry = self.cache.get(key)
        if entry is not None:
            for program in entry[0]:
                try:
                    out = program(tensors)
                except Retrace:  # (raised before anything ran)
                    continue
                entry[3] = 0  # (replayed: no run of recordings)
                with self._lock:
                    if key in self.cache:  # (another thread's recording may have evicted it)
                        self.cache.move_to_end(key)
                return out
        for obj in held:  # (recording: a full search, once per signature)
            if holds_data(obj):
                raise CompileError(_holds_message(type(obj)))
        return self._capture(key, tensors, pinned, args, kwargs)

    def _capture(self, key: tuple, tensors: list, pinned: list, args: tuple,
                 kwargs: dict) -> Any:
        name = getattr(self.fn, "__qualname__", type(self.fn).__name__)
        names_before = snapshot(self.fn)
        with _capturing:
            rec = Recorder(name)
            for i, t in enumerate(tensors):
                rec.argument(t, i)
            graph._TRACER = rec
            _device.set_call_hook(rec.device_call)
            try:
                result = self.fn(*args, **kwargs)
            finally:
                graph._TRACER = None
                _device.set_call_hook(None)
            stored = assigned(self.fn, names_before)
            if stored:
                raise CompileError(
                    f"ndl.compile({name}): the step assigned the global or nonlocal variable(s) "
                    f"{', '.join(stored)}, which a replay (no Python runs) would not; keep such "
                    "state in a Tensor argument and the step's result, or outside the step (this "
                    "call ran the step once, eagerly)")
            # an argument the step can also reach otherwise (a closure's Tensor, a parameter)
            # may have been read either way: its program serves that Tensor only
            outside = reachable([self.fn, *pinned, *rec.consts.values(),
                                 *(m for m, *_ in rec.modules.values())])
            rec.checks += [f"if v{i} is not {rec.const(t)}: raise _Retrace"
                           for i, t in enumerate(tensors) if id(t) in outside]
            rec.checks += name_guards(self.fn, rec.const)  # (rebound after the recording)
            program = Program(rec, result, len(tensors))
        replay: Any = program
        if self.cuda_graph:
            why = eligible(program, tensors)
            if why:
                warnings.warn(f"ndl.compile({name}): replayed without a CUDA graph: {why}",
                              stacklevel=3)
            else:
                replay = Graphed(program)
        self.captures += 1
        programs, _, recorded, run, warned = self.cache.get(key, ([], None, 0, 0, False))
        recorded, run = recorded + 1, run + 1
        if not warned and run > 2 * self.max_cache:
            warned = True  # (said once per signature)
            warnings.warn(
                f"ndl.compile({name}): recorded {run} times in a row for the same arguments' "
                "signature: something the step depends on changes at every call (a Module "
                "attribute or mode, a global, a Tensor's requires_grad set inside the step), "
                "so it runs slower than eagerly; see the README's ndl.compile list",
                RuntimeWarning, stacklevel=3)
        with self._lock:  # (another thread's recording may store or evict meanwhile)
            self.cache[key] = [[replay] + programs[:self.max_cache - 1], pinned, recorded, run,
                               warned]
            if key in self.cache:  # (evicted at once only where a thread skipped the lock)
                self.cache.move_to_end(key)
            while len(self.cache) > self.max_cache:
                self.cache.popitem(last=False)
        return detached(result)

    def programs(self) -> list[Program]:
        """The recorded programs, least recently used signature first (`source` shows each)."""
        return [getattr(p, "program", p) for programs, *_ in self.cache.values()
                for p in programs]


_UNBOUND = object()  # Compiled._call's instance when the step is no bound method


class BoundStep:
    """A compiled method bound to an instance (`obj.step`): calls the step with `obj` as
    self; its other attributes (`captures`, `programs()`, `cache`) are the step's, whose
    cache serves every instance."""

    __slots__ = ("__func__", "__self__")

    def __init__(self, step: Compiled, instance: Any):
        self.__func__ = step
        self.__self__ = instance

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__func__._call(self.__self__, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__func__, name)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, BoundStep) and other.__func__ is self.__func__
                and other.__self__ is self.__self__)

    def __hash__(self) -> int:
        return hash((id(self.__func__), id(self.__self__)))

    def __repr__(self) -> str:
        name = getattr(self.__func__, "__qualname__", "step")
        return f"<compiled method {name} of {type(self.__self__).__name__} object>"


def compile(fn: Callable | None = None, *, max_cache: int = 8,  # noqa: A001
            cuda_graph: bool = False) -> Any:
    """Record `fn` (a training or inference step on Tensors) at its first call for each
    signature, then replay the recorded array operations at later calls: no Tensor, graph
    node or gradient rule runs in Python, and the parameters, optimizer state and random
    generators change exactly as eager calls would change them.

    Usable as `step = ndl.compile(fn)` or as a decorator (`@ndl.compile` or
    `@ndl.compile(max_cache=4)`). The signature is the shape, dtype, device and
    requires_grad of each Tensor argument and the value of every other argument; at most
    `max_cache` signatures are kept (and per signature as many programs, one per state of
    the guards: train and eval mode, say). On a method, `obj.step(...)` binds as a function
    would: one cache for all instances, `self` part of the signature by identity (each
    instance recorded once, kept alive while its entry is cached). Returned Tensors are
    constants (no graph). With
    `cuda_graph=True`, a step on a `torch:cuda` or `cuda` device is captured as one CUDA
    graph at its second replay (needle/compiled/cuda_graph.py; elsewhere, or when the
    capture fails, a warning says why not). See the
    README's "Compiled steps" for what is recorded and what raises.
    """
    if fn is None:
        return lambda f: Compiled(f, max_cache=max_cache, cuda_graph=cuda_graph)
    return Compiled(fn, max_cache=max_cache, cuda_graph=cuda_graph)

"""What the recorder's files share: CompileError, where a line is, what counts as an array."""

from __future__ import annotations

import itertools
import os
import traceback
import types
import warnings
from typing import Any

from ..autograd.graph import Value

_HERE = os.path.dirname(os.path.abspath(__file__))
_NEEDLE = os.path.dirname(_HERE)


class CompileError(RuntimeError):
    """What `ndl.compile` cannot record (raised while the first call runs)."""


def where() -> str:
    """'file:line' of the innermost frame outside needle (the caller's line), with the
    needle frame below it when there is one."""
    frames = traceback.extract_stack()[:-1]
    inner = None
    for frame in reversed(frames):
        path = os.path.abspath(frame.filename)
        if path.startswith(_HERE + os.sep) or frame.filename.startswith("<ndl.compile"):
            continue  # the recorder's own frames
        if path.startswith(_NEEDLE + os.sep):
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


def holds_values(obj: Any, depth: int = 2) -> bool:
    """Whether `obj` is or holds a Value or an array: in its elements (tuples, lists, sets,
    dicts) or attributes (`__dict__`, `__slots__`), `depth` levels down."""
    if isinstance(obj, Value) or is_array(obj):
        return True
    if depth == 0 or isinstance(obj, (str, bytes, type, types.ModuleType)):
        return False
    return any(holds_values(o, depth - 1) for o in _contents(obj))


def holds_data(obj: Any, depth: int = 3, limit: int | None = None) -> bool:
    """Whether argument `obj` holds Values or arrays a replay would not see anew, `depth`
    levels down (in the first `limit` items of each container or object, all with None),
    never inside a Module, Optimizer or Device (the step's own state: a Module the step
    calls is guarded, an optimizer's step is replayed)."""
    if isinstance(obj, Value):
        return True
    if type(obj) in _ATOMS or isinstance(obj, _own_state()):  # (before is_array: an
        return False  # optimizer's __getattr__ makes its shape lookup slow)
    if is_array(obj):
        return True
    if depth == 0 or isinstance(obj, _OPAQUE):
        return False
    items = _contents(obj) if limit is None else itertools.islice(_items(obj), limit)
    return any(holds_data(o, depth - 1, limit) for o in items)


_ATOMS = frozenset({int, float, complex, bool, str, bytes, type(None)})
_OPAQUE = (str, bytes, type, types.ModuleType)
_OWN_STATE: tuple = ()


def _own_state() -> tuple:
    """The classes of the step's own state: Module, Optimizer (and needle.distributed's
    wrapper of one) and Device (resolved once: importing them here at load would cycle)."""
    global _OWN_STATE
    if not _OWN_STATE:
        from ..backends import Device
        from ..distributed.parallel import DistributedOptimizer
        from ..nn import Module
        from ..optim import Optimizer

        _OWN_STATE = (Module, Optimizer, DistributedOptimizer, Device)
    return _OWN_STATE


def _items(obj: Any) -> Any:
    """What a container holds, or another object's attributes, as an iterator (no copy)."""
    if isinstance(obj, dict):
        return iter(obj.values())
    if isinstance(obj, (tuple, list, set, frozenset)):
        return iter(obj)
    return iter(_attributes(obj))


def _contents(obj: Any) -> list:
    """What a container holds, or another object's attributes."""
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, (tuple, list, set, frozenset)):
        return list(obj)
    return _attributes(obj)


def reachable(roots: list, depth: int = 6, limit: int = 200000) -> set[int]:
    """The ids of the Values reachable from `roots`, `depth` levels down (at most `limit`
    objects, a RuntimeWarning when it stops there): through functions' closures, defaults
    and the globals they name, containers, and attributes (`__dict__`, `__slots__`) of
    other objects. Strings, numbers, types, modules and arrays hold none and are skipped."""
    found: set[int] = set()
    seen: set[int] = set()
    todo = [(obj, depth) for obj in roots]
    while todo:
        if len(seen) >= limit:
            warnings.warn(f"ndl.compile: stopped looking for the Tensors the step can reach "
                          f"at {limit} objects; an argument that the step also reads "
                          "through the rest is read as the argument at replay",
                          RuntimeWarning, stacklevel=4)
            break
        obj, left = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Value):
            found.add(id(obj))
            continue
        if left == 0:
            continue
        if isinstance(obj, (staticmethod, classmethod, types.MethodType)):
            items = [obj.__func__, getattr(obj, "__self__", None)]
        elif isinstance(obj, types.FunctionType):
            names = obj.__globals__
            items = [c.cell_contents for c in obj.__closure__ or () if _full(c)]
            items += [*(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()]
            items += [names[n] for n in obj.__code__.co_names if n in names]
        else:
            items = _contents(obj)
        todo += [(o, left - 1) for o in items if not _atom(o)]
    return found


def _atom(obj: Any) -> bool:
    """Whether `obj` can hold no Value (nor lead to one): None, a string, a number, a type,
    a module or an array."""
    return obj is None or isinstance(obj, (str, bytes, int, float, complex, type,
                                           types.ModuleType)) or is_array(obj)


def _full(cell: Any) -> bool:
    """Whether a closure's cell holds a value."""
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _attributes(obj: Any) -> list:
    """The values of `obj`'s attributes: its `__dict__` and `__slots__`."""
    items = list(getattr(obj, "__dict__", {}).values())
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        items += [getattr(obj, n, None) for n in ((slots,) if isinstance(slots, str) else slots)
                  if n != "__weakref__"]
    return items


def describe(obj: Any) -> str:
    """`obj` (a Value, an array or a tuple of arrays) for an error message: its shape and dtype."""
    if isinstance(obj, Value):
        obj = obj._array
    if isinstance(obj, tuple):
        return "a tuple of arrays"
    return f"an array of shape {tuple(obj.shape)} and dtype {obj.dtype}"



def is_module(obj: Any) -> bool:
    """Whether `obj` is an nn.Module."""
    from ..nn import Module

    return isinstance(obj, Module)


def listed(obj: Any) -> Any:
    """An iterator as a list of its items (anything else as it is)."""
    try:
        it = iter(obj)
    except TypeError:
        return obj
    return list(obj) if it is obj else obj


#: how each kind of read to the host is made (at recording, and at replay for a result)
HOST_READS = {
    "numpy": lambda device, a: device.to_numpy(a),
    "item": lambda device, a: device.to_numpy(a).item(),
    "float": lambda device, a: float(device.to_numpy(a).item()),
}

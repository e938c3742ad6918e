"""Guards on the names a step function reads: its globals and closure variables.

A replay runs no Python of the step, so what a name held when the step was recorded (a
model, an optimizer, a coefficient) is built into the program. Rebinding the name
afterwards (`opt = SGD(...)` for fine-tuning, `beta = 0.5` for annealing) must record the
step again: each program checks, before it runs, that every global and closure variable
the step function names (its own code and the lambdas and comprehensions in it, not the
functions it calls) still holds the same object, or an equal number or string.
"""

from __future__ import annotations

import dis
import types
from typing import Any, Callable

_ATOMS = (int, str, bool, bytes, type(None))
_MISSING = object()


def same(now: Any, then: Any) -> bool:
    """Whether a name's value `now` is its recorded value `then`: the same object, or a
    number or string of the same type and value (a float as Python prints it: -0.0 is not
    0.0, NaN is NaN)."""
    if now is then:
        return True
    kind = type(now)
    if kind is not type(then):
        return False
    if kind is float or kind is complex or (  # (numpy's scalars as the argument key does)
            kind.__module__ == "numpy" and kind.__name__ != "ndarray"
            and getattr(now, "shape", None) == ()):
        return repr(now) == repr(then)
    return kind in _ATOMS and now == then


def cell_value(cell: Any) -> Any:
    """A closure cell's value (`_MISSING` where it is empty)."""
    try:
        return cell.cell_contents
    except ValueError:
        return _MISSING


_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"})


def _names(code: types.CodeType) -> set[str]:
    """The global names `code` and the code objects nested in it read or write (not its
    attribute names: `opt.step()` names no global `step`)."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_OPS}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def name_guards(fn: Any, const: Callable[[Any], str]) -> list[str]:
    """Lines of a program's guard (`const(obj)`: the program's name for a constant) that
    raise _Retrace where a global or closure variable of step function `fn` now holds
    another value than it does now. Python modules (imports) are not watched."""
    fn = getattr(fn, "__func__", fn)  # (a staticmethod, a bound method)
    code = getattr(fn, "__code__", None)
    if code is None:  # (a callable object, a partial: nothing to read)
        return []
    lines = []
    same_name, missing = const(same), const(_MISSING)
    found = fn.__globals__
    for name in sorted(_names(code)):
        value = found.get(name, _MISSING)
        if value is _MISSING or isinstance(value, types.ModuleType):
            continue
        lines.append(f"if not {same_name}({const(found)}.get({name!r}, {missing}), "
                     f"{const(value)}): raise _Retrace")
    for cell in fn.__closure__ or ():
        value = cell_value(cell)
        if value is _MISSING or isinstance(value, types.ModuleType):
            continue
        lines.append(f"if not {same_name}({const(cell_value)}({const(cell)}), "
                     f"{const(value)}): raise _Retrace")
    return lines


def snapshot(fn: Any) -> tuple[dict, list]:
    """The values of the globals step function `fn` names and of its closure cells, now."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}, []
    found = fn.__globals__
    values = {name: found.get(name, _MISSING) for name in _names(code)}
    return values, [cell_value(c) for c in fn.__closure__ or ()]


def assigned(fn: Any, before: tuple[dict, list]) -> list[str]:
    """The globals and closure variables of `fn` whose values differ from `before` (its
    snapshot): assigned by the step or what it called, which a replay would not do."""
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    values, cells = before
    found = fn.__globals__
    names = [n for n, v in values.items() if not same(found.get(n, _MISSING), v)]
    names += [name for name, cell, v in zip(code.co_freevars, fn.__closure__ or (), cells)
              if not same(cell_value(cell), v)]
    return sorted(names)

"""Checks of the plain Python arguments that constructors and setters take (numbers and flags).

Each returns the value in a canonical form (a float, a bool) or raises a TypeError or
ValueError naming the owner, the argument and the value. They import nothing from needle,
so any module may use them; they run where an object is made or set, never per op or step.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any


def _is_bool(value: Any) -> bool:
    """A Python or numpy bool (numpy's is no subclass of bool, nor registered as a number)."""
    return type(value).__name__ in ("bool", "bool_")


def real(owner: str, name: str, value: Any) -> float:
    """`value` as a float: any real number (numpy's scalars, a Fraction, anything with
    `__float__`), never a bool or complex one; a TypeError naming it otherwise."""
    kind = type(value)
    if kind is float:  # the common case, first (ops check their eps at every call)
        return value
    if not _is_bool(value) and (isinstance(value, numbers.Real) or (
            not isinstance(value, numbers.Complex) and hasattr(kind, "__float__"))):
        try:
            return float(value)
        except (TypeError, ValueError):  # an array of several numbers, say
            pass
    raise TypeError(f"{owner}: {name} must be a real number, found {kind.__name__}")


def integer(owner: str, name: str, value: Any, low: int | None = None) -> int:
    """`value` as an int (numpy's integers too, never a bool or float): a TypeError naming
    it otherwise, a ValueError below `low`."""
    try:
        if _is_bool(value):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{owner}: {name} must be an integer, found {value!r} "
                        f"({type(value).__name__})") from None
    if low is not None and number < low:
        raise ValueError(f"{owner}: {name} must be >= {low}, found {number}")
    return number


def finite(owner: str, name: str, value: Any) -> float:
    """`value` as a float that is neither infinite nor NaN (a TypeError or ValueError
    naming it otherwise)."""
    value = real(owner, name, value)
    if not math.isfinite(value):
        raise ValueError(f"{owner}: {name} must be finite, found {value}")
    return value


def check_range(owner: str, name: str, value: Any, low: float, high: float | None = None,
                high_inclusive: bool = False, low_inclusive: bool = True) -> float:
    """`value` as a finite float, or a ValueError naming it when it is outside the interval
    from `low` to `high` (None: no upper bound; each end included as asked), infinite or NaN."""
    value = real(owner, name, value)
    ok = value >= low if low_inclusive else value > low
    if high is not None:
        ok = ok and (value <= high if high_inclusive else value < high)
    if not ok:
        left = "[" if low_inclusive else "("
        if high is None:
            interval = f">= {low}" if low_inclusive else f"> {low}"
        else:
            interval = f"in {left}{low}, {high}{']' if high_inclusive else ')'}"
        raise ValueError(f"{owner}: {name} must be {interval}, found {value}")
    if math.isinf(value):  # (NaN fails every comparison above)
        raise ValueError(f"{owner}: {name} must be finite, found {value}")
    return value


def flag(owner: str, name: str, value: Any) -> bool:
    """`value` as a bool: True or False (numpy's bools too); a TypeError naming it otherwise
    (a string such as "no" is true to Python, which would silently mean yes)."""
    if not _is_bool(value):
        raise TypeError(f"{owner}: {name} must be True or False, found {value!r} "
                        f"({type(value).__name__})")
    return bool(value)

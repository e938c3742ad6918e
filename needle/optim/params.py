"""What an optimizer checks and converts: its parameter list, step counts, and float16
parameters' float32 updates (the helpers of optimizer.py)."""

from __future__ import annotations

import operator
from typing import Any

from ..autograd import Tensor


def _count(value: Any) -> int | None:
    """`value` as an int >= 0 (numpy's integers too, as a checkpoint read by numpy holds
    them), or None where it is no such count (a bool, a float, a negative number)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    try:
        n = operator.index(value)
    except TypeError:
        return None
    return n if n >= 0 else None


def _half(xp: Any, array: Any) -> bool:
    """Whether `array` is float16: updated in float32, where v = b2 v + (1 - b2) g^2 and
    Adam's eps stay finite and nonzero (g > 256 made v inf for good, eps 1e-7 became 0)."""
    return array.dtype == getattr(xp, "float16", None)


def _widened(xp: Any, param: Any, grad: Any, state: dict) -> tuple[Any, Any, dict]:
    """A float16 parameter, gradient and state as float32 arrays of their own."""
    return (xp.astype(param, xp.float32), xp.astype(grad, xp.float32),
            {k: xp.astype(a, xp.float32) for k, a in state.items()})


def _narrowed(xp: Any, param: Any, state: dict) -> tuple[Any, dict]:
    """The float32 results of a float16 parameter's update, stored in float16."""
    return (xp.astype(param, xp.float16), {k: xp.astype(a, xp.float16)
                                           for k, a in state.items()})


def _parameter_list(owner: str, params: Any) -> list[Tensor]:
    """`params` as a list of floating-point Tensors; a TypeError naming what was given
    otherwise: a single Tensor (whose rows `list()` would take as the parameters, as
    PyTorch refuses it), a Module or any non-iterable, a parameter of another type or of an
    integer or bool dtype (its update would be truncated, or fail in each library's way)."""
    hint = "such as module.parameters(), or [tensor] for one tensor"
    if isinstance(params, Tensor) or callable(getattr(params, "parameters", None)):
        raise TypeError(f"{owner}: the params argument should be an iterable of Tensors "
                        f"({hint}), but got {type(params).__name__}")
    try:
        params = list(params)
    except TypeError:
        raise TypeError(f"{owner}: the params argument should be an iterable of Tensors "
                        f"({hint}), but got {type(params).__name__}") from None
    if not params:
        raise ValueError(f"{owner} got an empty parameter list")
    seen: dict[int, int] = {}
    for i, p in enumerate(params):
        j = seen.setdefault(id(p), i)
        if j != i:  # (PyTorch warns that this will be an error, and updates it twice)
            raise ValueError(f"{owner}: parameter {i} is parameter {j} again: list each "
                             "parameter once (module.parameters() does)")
        if not isinstance(p, Tensor):
            raise TypeError(f"{owner}: parameter {i} must be a Tensor, found {type(p).__name__}")
        if getattr(p.dtype, "kind", None) != "f":
            raise TypeError(f"{owner}: parameter {i} has dtype {p.dtype}: only floating-point "
                            f"parameters can be optimized (convert it first, e.g. with "
                            f"ndl.ops.astype(p, \"float32\"))")
    return params

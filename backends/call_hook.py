"""ndl.compile's hook on the Device methods that make arrays outside any op.

While a step is captured, the creation and random methods named in RECORDED go through the
hook, so the step records them and runs them again at each replay (a draw gives new numbers
from the same generator, as eager would); otherwise they cost one test of a global.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

#: the hook while a step is captured, else None
_CALL_HOOK: Callable | None = None

#: the Device methods that make arrays outside any op (recorded by ndl.compile)
RECORDED = ("zeros", "ones", "full", "empty", "one_hot", "asarray", "rand", "randn",
            "random", "uniform", "normal", "bernoulli")


def set_call_hook(hook: Callable | None) -> None:
    """Install (or remove, with None) ndl.compile's recorder of the RECORDED methods."""
    global _CALL_HOOK
    _CALL_HOOK = hook


def _recorded(method: Callable) -> Callable:
    """`method`, going through the call hook while one is installed."""

    @functools.wraps(method)
    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _CALL_HOOK is None:
            return method(self, *args, **kwargs)
        return _CALL_HOOK(method, self, args, kwargs)

    recorded.is_recorded = True
    return recorded


def record_calls(cls: type) -> None:
    """Route `cls`'s own RECORDED methods through the hook (once per method)."""
    for name in RECORDED:
        method = cls.__dict__.get(name)
        if method is not None and not getattr(method, "is_recorded", False):
            setattr(cls, name, _recorded(method))

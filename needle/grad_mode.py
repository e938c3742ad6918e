"""Grad mode, per thread as in PyTorch: `no_grad`, `enable_grad`, `set_grad_enabled`."""

from __future__ import annotations

import contextvars
import functools
from typing import Any, Callable

# Grad mode, per thread as in PyTorch (and per asyncio task): a ContextVar, because a new
# thread starts in an empty context, so with recording on, and no thread sees another's mode.
_grad_mode: contextvars.ContextVar[bool] = contextvars.ContextVar("grad_mode", default=True)
# make_from_op reads it through this bound method: ~10 ns, a threading.local costs ~50 ns
_grad_enabled = _grad_mode.get
# the modes that open `with` blocks restore on exit, innermost last
_saved_modes: contextvars.ContextVar[tuple[bool, ...]] = contextvars.ContextVar(
    "saved_grad_modes", default=())


class _GradModeContext:
    """Sets this thread's grad mode to `mode` inside a `with` block; usable as a decorator."""

    mode: bool

    def __enter__(self) -> _GradModeContext:
        # the previous mode is kept per thread, not on self: one instance may be shared,
        # nested, or used by several threads at once
        _saved_modes.set(_saved_modes.get() + (_grad_enabled(),))
        _grad_mode.set(self.mode)
        return self

    def __exit__(self, *exc: Any) -> None:
        saved = _saved_modes.get()
        _grad_mode.set(saved[-1])
        _saved_modes.set(saved[:-1])

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradModeContext):
    """Context manager (and decorator) under which this thread records no op in the graph."""

    mode = False


class enable_grad(_GradModeContext):
    """Context manager (and decorator) that turns recording back on inside `no_grad()`."""

    mode = True


class set_grad_enabled:
    """Set this thread's grad mode now; as a context manager, restore the old mode on exit."""

    def __init__(self, mode: bool) -> None:
        self._prev = _grad_enabled()
        _grad_mode.set(bool(mode))

    def __enter__(self) -> set_grad_enabled:
        return self

    def __exit__(self, *exc: Any) -> None:
        _grad_mode.set(self._prev)


def is_grad_enabled() -> bool:
    """False while this thread is inside `no_grad()`."""
    return _grad_enabled()

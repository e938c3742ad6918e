"""needle.compiled: `compile(fn)` records a step's array operations once and replays them."""

from .compiled import Compiled, compile
from .program import Retrace
from .support import CompileError

__all__ = ["Compiled", "CompileError", "Retrace", "compile"]

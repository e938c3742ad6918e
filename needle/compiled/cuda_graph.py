"""A recorded program replayed as one CUDA graph on `torch:cuda` (`ndl.compile(cuda_graph=True)`).

The program's replay is captured with `torch.cuda.graph` at the program's second replay (the
first runs as usual: it warms up cuBLAS and makes the optimizer's state). The step's Tensor
arguments are copied into buffers made for the capture, and every array the step leaves in a
parameter, a buffer or an optimizer's state is copied back, inside the graph, into the array
that held it before, so each replay reads and writes the same memory. The generators the step
draws from are registered with the graph (their offsets advance at each replay, as eager
draws would). Returned Tensors are copies. The torch calls are in
backends/torch_cuda_graph.py. On `cuda` (cupy) the ordinary replay already launches the
kernels one after another with no graph node or gradient rule in Python: cupy refuses cuBLAS
calls inside a stream capture.

Untested on hardware here (no GPU in this project's CI): `tests/test_compile.py` runs it where
torch sees a GPU.
"""

from __future__ import annotations

import re
from typing import Any

from ..autograd.graph import Value
from ..backends import torch_cuda_graph as tcg
from .program import Program

_WRITES_ARGUMENT = re.compile(r"^\s*v\d+\._(grad|array) =", re.M)


def _device(program: Program, tensors: list) -> Any:
    devices = {t.device for t in tensors} | {v.device for v, *_ in program.guards}
    return next(iter(devices)) if len(devices) == 1 else None


def eligible(program: Program, tensors: list) -> str:
    """Why `program` cannot be replayed as a CUDA graph ("" when it can)."""
    device = _device(program, tensors)
    if device is None:
        return "the step uses several devices (or none)"
    why = tcg.unavailable_reason(device)
    if why:
        return why
    if _WRITES_ARGUMENT.search(program.source):
        return "the step sets the .grad or data of an argument"
    if "_host[" in program.source:
        return "the step returns a value read to the host"
    return ""


def _array_refs(obj: Any, depth: int = 0) -> list[tuple[Any, Any, Any]]:
    """(container, key, array) for each tensor held by `obj`'s dicts, lists and dataclass
    fields (an optimizer's state and flat buffers), at most 4 levels down."""
    out: list = []
    if depth > 4:
        return out
    if isinstance(obj, dict):
        items = list(obj.items())
    elif isinstance(obj, list):
        items = list(enumerate(obj))
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, Value)):
        items = list(vars(obj).items())
    else:
        return out
    for key, value in items:
        if tcg.is_tensor(value):
            out.append((obj, key, value))
        elif isinstance(value, (dict, list)) or hasattr(value, "__dataclass_fields__"):
            out.extend(_array_refs(value, depth + 1))
    return out


def _get(container: Any, key: Any) -> Any:
    return container[key] if isinstance(container, (dict, list)) else getattr(container, key)


def _set(container: Any, key: Any, value: Any) -> None:
    if isinstance(container, (dict, list)):
        container[key] = value
    else:
        setattr(container, key, value)


class _Argument:
    """What the program reads of an argument during the capture: its static buffer."""

    __slots__ = ("_array",)

    def __init__(self, array: Any):
        self._array = array


class CudaGraphReplay:
    """`program` captured as one CUDA graph; called with the step's Tensor arguments."""

    def __init__(self, program: Program, tensors: list):
        from ..optim import Optimizer

        self.program = program
        device = _device(program, tensors)
        self.inputs = [device.xp.asarray(t._array, copy=True) for t in tensors]
        refs = [(v, "_array", v._array) for v, *_ in program.guards]
        for opt in program.constants():
            if isinstance(opt, Optimizer):
                refs += _array_refs(opt)

        def run() -> Any:
            out = program.replay(*map(_Argument, self.inputs))
            for container, key, before in refs:  # the same memory at every replay
                now = _get(container, key)
                if now is not before:
                    tcg.copy_into(before, now)
                    _set(container, key, before)
            return out

        self.graph = tcg.CudaGraph(device, run, program.generators())

    def __call__(self, tensors: list) -> Any:
        self.program.guard()  # (raises Retrace: the graph replays no Python)
        for buf, t in zip(self.inputs, tensors):
            tcg.copy_into(buf, t._array)
        self.graph.replay()
        return _copies(self.graph.result)


class Graphed:
    """A program replayed as usual at its first replay (warming up cuBLAS and the optimizer's
    state, which a capture cannot make), then captured at the next and replayed as a graph."""

    def __init__(self, program: Program):
        self.program = program
        self.graph: CudaGraphReplay | None = None
        self.replays = 0

    def __call__(self, tensors: list) -> Any:
        if self.graph is None:
            self.replays += 1
            if self.replays < 2:
                return self.program(tensors)
            self.program.guard()
            self.graph = CudaGraphReplay(self.program, tensors)
        return self.graph(tensors)


def _copies(obj: Any) -> Any:
    """The result with each Tensor's array copied (the graph overwrites its own)."""
    if isinstance(obj, Value):
        return type(obj).make_const(tcg.clone(obj._array), device=obj.device)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_copies(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _copies(v) for k, v in obj.items()}
    return obj

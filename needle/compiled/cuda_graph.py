"""A recorded program replayed as one CUDA graph on a GPU (`ndl.compile(cuda_graph=True)`).

A graph replays kernels only: what Python computed while it was captured (an optimizer's bias
correction, a learning rate) would be frozen in it. So only steps without replayed calls
(Optimizer.step, reset_grad, clip_grad_norm_, train()) are captured: a forward and backward,
or an inference step; the optimizer steps outside, eagerly. The capture happens at the
program's second replay (the first runs as usual and warms up cuBLAS). The step's Tensor
arguments are copied into buffers of the graph; the Tensors it reads (parameters, buffers)
are read from the arrays they held at the capture: before each replay, new data given to
one since (an optimizer's update, `p.data = ...`) is copied into that array, and new data
the step gives one (BatchNorm's running statistics) is copied back into it inside the graph.
The gradients the step sets are the graph's own arrays, given back to their parameters after
each replay. The generators the step draws from are registered with the graph (their
offsets advance at each replay, as eager draws would). Returned Tensors are copies. Checks
that eager defers to the next read (labels in range) are made at the capture only. The
torch calls are in backends/torch_cuda_graph.py, cupy's (the `cuda` device) in
backends/cupy_cuda_graph.py (there the draws read the generator's state from the GPU,
written before each replay). A capture that fails (an operation stream capture does not
allow) leaves the state as it was, warns, and the program replays as usual from then on.

Untested on hardware here (no GPU in this project's CI): `tests/test_compile.py` runs it where
torch or cupy sees a GPU.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from ..autograd.graph import Value
from ..backends import cupy_cuda_graph, torch_cuda_graph
from .program import Program

_WRITES_ARGUMENT = re.compile(r"^\s*v\d+\._(grad|array) =", re.M)


def _device(program: Program, tensors: list) -> Any:
    devices = {t.device for t in tensors} | {v.device for v, *_ in program.guards}
    return next(iter(devices)) if len(devices) == 1 else None


def eligible(program: Program, tensors: list) -> str:
    """Why `program` cannot be replayed as a CUDA graph ("" when it can)."""
    if program.replayed_calls:
        return ("the step calls an optimizer's step (or reset_grad, clip_grad_norm_, train()): "
                "its Python would be frozen in a graph; step the optimizer outside")
    if _WRITES_ARGUMENT.search(program.source):
        return "the step sets the .grad or data of an argument"
    if "_host[" in program.source:
        return "the step returns a value read to the host"
    device = _device(program, tensors)
    if device is None:
        return "the step uses several devices (or none)"
    return unavailable_reason(device)


def unavailable_reason(device: Any) -> str:
    """Why steps on `device` cannot be captured as CUDA graphs ("" when they can)."""
    graphs = _graphs_of(device)
    if graphs is None:
        return f"{device} is not a CUDA device (cuda, or torch on a GPU)"
    return graphs.unavailable_reason(device)


def _graphs_of(device: Any) -> Any:
    """The backends module that captures CUDA graphs on `device` (None: not a GPU device)."""
    if device.kind == "cuda":
        return cupy_cuda_graph
    if device.kind == "torch" and getattr(device.native, "type", "") == "cuda":
        return torch_cuda_graph
    return None


class _Argument:
    """What the program reads of an argument during the capture: its static buffer."""

    __slots__ = ("_array",)

    def __init__(self, array: Any):
        self._array = array


class CudaGraphReplay:
    """`program` captured as one CUDA graph; called with the step's Tensor arguments."""

    def __init__(self, program: Program, tensors: list):
        self.program = program
        device = _device(program, tensors)
        self.graphs = graphs = _graphs_of(device)
        device.check_pending()  # (a deferred check read during the capture would sync)
        self.inputs = [device.xp.asarray(t._array, copy=True) for t in tensors]
        # the arrays the graph reads: each Tensor's data at the capture, kept in place
        self.held = [(v, v._array) for v, *_ in program.guards]

        def run() -> Any:
            out = program.replay(*map(_Argument, self.inputs))
            for v, before in self.held:  # new data of the step's own: back into place
                if v._array is not before:
                    graphs.copy_into(before, v._array)
                    v._array = before
            return out

        grads = [(v, v._grad) for v in program.grad_targets]
        try:
            self.graph = graphs.CudaGraph(device, run, program.generators())
        except Exception:  # nothing ran: put back what the capture's Python replaced
            for v, before in self.held:
                v._array = before
            for v, grad in grads:
                v._grad = grad
            device.discard_pending()  # (checks of arrays the capture never computed)
            raise
        self.grads = [(v, v._grad) for v in program.grad_targets]

    def __call__(self, tensors: list) -> Any:
        self.program.guard(*tensors)  # (raises Retrace: the graph replays no Python)
        copy_into = self.graphs.copy_into
        for v, before in self.held:  # new data since (an optimizer's): into the graph's
            if v._array is not before:
                copy_into(before, v._array)
                v._array = before
        for buf, t in zip(self.inputs, tensors):
            copy_into(buf, t._array)
        self.graph.replay()
        for v, grad in self.grads:
            v._grad = grad
        return _copies(self.graph.result, self.graphs.clone)


class Graphed:
    """A program replayed as usual at its first replay (warming up cuBLAS and the optimizer's
    state, which a capture cannot make), then captured at the next and replayed as a graph;
    if the capture fails, a warning says why and the program replays as usual."""

    def __init__(self, program: Program):
        self.program = program
        self.graph: CudaGraphReplay | None = None
        self.replays = 0
        self.failed = False

    def __call__(self, tensors: list) -> Any:
        if self.graph is None:
            self.replays += 1
            if self.replays < 2 or self.failed:
                return self.program(tensors)
            self.program.guard(*tensors)
            try:
                self.graph = CudaGraphReplay(self.program, tensors)
            except Exception as e:
                self.failed = True
                warnings.warn(f"ndl.compile: the CUDA graph capture failed "
                              f"({type(e).__name__}: {e}); replayed without a graph",
                              stacklevel=3)
                return self.program(tensors)
        return self.graph(tensors)


def _copies(obj: Any, clone: Any) -> Any:
    """The result with each Tensor's array copied (the graph overwrites its own)."""
    if isinstance(obj, Value):
        return type(obj).make_const(clone(obj._array), device=obj.device)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_copies(o, clone) for o in obj)
    if isinstance(obj, dict):
        return {k: _copies(v, clone) for k, v in obj.items()}
    return obj

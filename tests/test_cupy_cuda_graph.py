"""cupy's CUDA graphs (backends/cupy_cuda_graph.py) with cupy faked: what the capture and
each replay do around the GPU work, in order. The real capture runs in
tests/test_compile.py where cupy sees a GPU."""

from __future__ import annotations

import contextlib
import types

import numpy as np
import pytest

from needle.backends import cublas_direct, cupy_cuda_graph


class _FakeCupy:
    """Just what CudaGraph touches of cupy: a stream whose capture records the order of
    events, a pool, an allocator context and `empty`."""

    def __init__(self, log: list):
        class Stream:
            ptr = 1234

            def __init__(self, non_blocking=False):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def begin_capture(self):
                log.append("begin")

            def end_capture(self):
                log.append("end")
                return types.SimpleNamespace(launch=lambda: log.append("launch"))

        self.cuda = types.SimpleNamespace(
            MemoryPool=lambda: types.SimpleNamespace(malloc=None), Stream=Stream,
            using_allocator=lambda malloc: contextlib.nullcontext())
        self.uint8, self.uint64 = np.uint8, np.uint64

    @staticmethod
    def empty(n, dtype):
        return types.SimpleNamespace(data=types.SimpleNamespace(ptr=4096), nbytes=n,
                                     dtype=dtype)


class _FakeGpu:
    """A cuda device's capture hooks, with a host generator [seed, offset]."""

    def __init__(self, log: list):
        self.log, self.cupy, self.native = log, _FakeCupy(log), contextlib.nullcontext()
        self.gen = [7, 100]
        self.capture_matmul = self.capture_draws = None

    def generator(self):
        return self.gen

    def write_generator(self, state):
        self.log.append(("write", tuple(self.gen)))

    def random(self, shape):
        if self.capture_draws is None:
            self.gen[1] += int(np.prod(shape))
        else:
            self.capture_draws[1] += int(np.prod(shape))

    def advance_generator(self, count):
        self.gen[1] += count


class _FakeBlas:
    def __init__(self, log):
        self.log = log

    def bind(self, stream, workspace, nbytes):
        self.log.append(("bind", stream, nbytes))

    def matmul(self, a, b):
        return NotImplemented


def test_cupy_graph_bookkeeping_with_a_faked_capture(monkeypatch):
    """(cpu, cupy faked) the capture binds the direct cuBLAS handle to its stream first,
    counts the step's draws without moving the host offset, and puts eager's matmul and
    draws back even when the step raises; each replay writes the generator's state, launches,
    then moves the offset past the step's draws."""
    log: list = []
    gpu = _FakeGpu(log)
    monkeypatch.setattr(cublas_direct, "for_device", lambda device: _FakeBlas(log))

    def step():
        assert gpu.capture_matmul is not None and log[-1] == "begin"
        gpu.random((3, 4))
        gpu.random((5,))
        return "result"

    graph = cupy_cuda_graph.CudaGraph(gpu, step, [gpu.generator()])
    assert graph.result == "result" and graph.draws == 17
    assert gpu.gen == [7, 100] and gpu.capture_matmul is None and gpu.capture_draws is None
    bind = ("bind", 1234, cublas_direct.WORKSPACE_BYTES)
    assert log == [bind, ("write", (7, 100)), "begin", "end"]
    del log[:]
    graph.replay()
    graph.replay()
    assert log == [("write", (7, 100)), "launch", ("write", (7, 117)), "launch"]
    assert gpu.gen == [7, 134]

    def failing():
        raise RuntimeError("an operation the capture refuses")

    with pytest.raises(RuntimeError, match="capture refuses"):
        cupy_cuda_graph.CudaGraph(gpu, failing, [gpu.generator()])
    assert gpu.capture_matmul is None and gpu.capture_draws is None and gpu.gen == [7, 134]
    with pytest.raises(ValueError, match="only draw from its generator"):
        cupy_cuda_graph.CudaGraph(gpu, step, [[1, 2]])

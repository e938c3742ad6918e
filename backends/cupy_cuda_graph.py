"""CUDA graphs of cupy: what `ndl.compile(cuda_graph=True)` needs on a `cuda` device.

The same four names as torch_cuda_graph.py; needle/compiled/cuda_graph.py picks the file by
device kind and decides what to capture. The step is captured on a side stream (cupy
captures in relaxed mode) and launched on the current stream, in order with eager work.
Everything the captured step allocates comes from a memory pool of the graph's own: a
replay writes that memory again, so nothing outside the graph may be given it. cupy 14
refuses cuBLAS calls during a capture, so the step's matrix products call libcublas
directly then (backends/cublas_direct.py). cupy is reached through the device (imported
when the device first ran).

Untested on hardware here (no GPU in this project's CI): `tests/test_compile.py` runs it
where cupy sees a GPU.
"""

from __future__ import annotations

from typing import Any, Callable

from . import cublas_direct
from .device import Device


def unavailable_reason(device: Device) -> str:
    """Why a step on `device` cannot be captured as a CUDA graph ("" when it can)."""
    if device.kind != "cuda":
        return f"{device} is not a cuda device"
    stream = device.cupy.cuda.Stream
    if not hasattr(stream, "begin_capture"):
        return f"cupy {device.cupy.__version__} has no stream capture"
    return ""


def copy_into(dst: Any, src: Any) -> None:
    """dst[...] = src, in place (a kernel; captured when called inside a capture)."""
    dst[...] = src


def clone(array: Any) -> Any:
    """A copy of `array` in new memory."""
    return array.copy()


class CudaGraph:
    """`run()` captured once as a CUDA graph on `device`, drawing from `generators` (empty,
    or the device's own): the draws read the generator's (seed, offset) from 2 numbers on
    the GPU that each replay writes first, and the offset moves past them after. Matrix
    products call cuBLAS directly during the capture (cupy refuses to), on needle's own
    handle bound to the capture's stream and a workspace of the graph's."""

    def __init__(self, device: Device, run: Callable[[], Any], generators: list) -> None:
        if any(g is not device.generator() for g in generators):
            raise ValueError(f"a CUDA graph on {device} can only draw from its generator")
        cp = device.cupy
        self.device = device
        self.pool = cp.cuda.MemoryPool()  # the graph's memory, held as long as the graph
        self.state, self.draws = None, 0
        with device.native:
            stream = cp.cuda.Stream(non_blocking=True)  # (a stream of this GPU)
            with cp.cuda.using_allocator(self.pool.malloc), stream:
                blas = cublas_direct.for_device(device)  # (made outside the capture)
                self.workspace = cp.empty(cublas_direct.WORKSPACE_BYTES, dtype=cp.uint8)
                blas.bind(stream.ptr, self.workspace.data.ptr, self.workspace.nbytes)
                try:  # (whatever happens, eager products and draws are cupy's again after)
                    device.capture_matmul = blas.matmul
                    if generators:  # (the draw kernels compiled and loaded before capture)
                        self.state = cp.empty(2, dtype=cp.uint64)
                        device.write_generator(self.state)
                        device.capture_draws = [self.state, 0]
                        device.random((1,))
                        device.capture_draws[1] = 0
                    self._capture(stream, run)
                finally:
                    device.capture_matmul = device.capture_draws = None

    def _capture(self, stream: Any, run: Callable[[], Any]) -> None:
        stream.begin_capture()
        try:
            self.result = run()
        finally:
            if self.state is not None:
                self.draws = self.device.capture_draws[1]
            self.graph = stream.end_capture()  # (raises when the capture failed)

    def replay(self) -> None:
        """Launch the captured kernels again, on the current stream (after writing the
        generator's state, when the step draws)."""
        with self.device.native:
            if self.state is not None:
                self.device.write_generator(self.state)
            self.graph.launch()
        if self.state is not None:
            self.device.advance_generator(self.draws)

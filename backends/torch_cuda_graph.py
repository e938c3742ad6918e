"""CUDA graphs of torch: what `ndl.compile(cuda_graph=True)` needs on a `torch:cuda` device.

torch is imported on first use. needle/compiled/cuda_graph.py decides what to capture; this
file only wraps `torch.cuda.CUDAGraph` and the copies a captured step makes.
"""

from __future__ import annotations

from typing import Any, Callable

from .device import Device


def unavailable_reason(device: Device) -> str:
    """Why a step on `device` cannot be captured as a CUDA graph ("" when it can)."""
    if device.kind != "torch" or getattr(device.native, "type", "") != "cuda":
        return f"{device} is not a torch:cuda device"
    import torch

    if not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        return f"torch {torch.__version__} cannot advance a generator's state in a CUDA graph"
    return ""


def is_tensor(obj: Any) -> bool:
    """Whether `obj` is a torch.Tensor (without importing torch when nobody has)."""
    return type(obj).__module__.startswith("torch") and hasattr(obj, "copy_")


def copy_into(dst: Any, src: Any) -> None:
    """dst[...] = src, in place (a kernel; captured when called inside a capture)."""
    dst.copy_(src)


def clone(array: Any) -> Any:
    """A copy of `array` in new memory."""
    return array.clone()


class CudaGraph:
    """`run()` captured once as a CUDA graph on `device`, drawing from `generators` (each
    registered, so its offset advances at every replay as eager draws would)."""

    def __init__(self, device: Device, run: Callable[[], Any], generators: list) -> None:
        import torch

        self.graph = torch.cuda.CUDAGraph()
        for generator in generators:
            self.graph.register_generator_state(generator)
        with torch.cuda.device(device.native):
            with torch.cuda.graph(self.graph):
                self.result = run()

    def replay(self) -> None:
        """Launch the captured kernels again."""
        self.graph.replay()

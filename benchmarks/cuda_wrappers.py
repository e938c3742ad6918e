"""Host time of the Python around needle's cuda kernels, on any machine: each wrapper in
backends/ (BatchNorm, SUM, ReLU's adjoint, ...) called with numpy standing in for cupy and
kernels that do nothing, so what is timed is needle's own Python plus numpy's allocations and
views (cupy's cost more: benchmarks/launch_costs.py measures those on a GPU), each also as a
multiple of PyTorch's host time for one small op on the cpu, measured in the same run. Shapes are
ResNet9's at batch 1,024 and the transformer's at 256 (or smaller, where numpy's allocation
would be what is timed), with the number of calls one training step makes (the seventh
session's profiles), and their total a step; then the Python of a direct raw-kernel launch
(backends/launch.py) with a driver that does nothing.

    python benchmarks/cuda_wrappers.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import best_of  # noqa: E402

from needle.backends import (  # noqa: E402
    add_to_fresh,
    affine_norm,
    cross_entropy,
    flat_concat,
    im2col,
    layer_norm,
    normalize,
    relu,
    softmax,
    sums,
)
from needle.ops.affine_norm import batch_norm_portable, layer_norm_portable  # noqa: E402
from needle.ops.reduce import softmax_xent_portable  # noqa: E402


def stand_in() -> Any:
    """A cuda device whose cupy is numpy and whose kernels do nothing."""
    def raw_kernel(name: str, source: str, entry: str, dtype: str) -> Callable:
        return lambda grid, block, args: None

    def elementwise_kernel(name: str, params: str, outs: str, body: str, exact: bool = False):
        return lambda *args: args[-1]

    cupy = SimpleNamespace(ascontiguousarray=np.ascontiguousarray, empty=np.empty,
                           empty_like=np.empty_like, add=np.add, reshape=np.reshape,
                           int64=np.int64,
                           cuda=SimpleNamespace(alloc=lambda n: np.empty(n, np.uint8)),
                           ndarray=lambda shape, dtype, mem, strides: np.ndarray(
                               shape, dtype, mem, 0, strides))
    return SimpleNamespace(cupy=cupy, native=contextlib.nullcontext(),
                           current=contextlib.nullcontext(), raw_kernel=raw_kernel,
                           elementwise_kernel=elementwise_kernel)


def cases() -> list[tuple[str, str, int, Callable[[], Any]]]:
    """(step, name, calls that step makes, the call)."""
    rng = np.random.default_rng(0)

    def nchw(n: int, c: int, h: int) -> np.ndarray:  # a convolution's output: channels-last
        return rng.standard_normal((n, h, h, c)).astype(np.float32).transpose(0, 3, 1, 2)

    def floats(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    first, last = nchw(1024, 16, 8), nchw(1024, 128, 1)  # its first and last BatchNorms
    w16, w128 = floats(16), floats(128)
    _, y16, s16, m16, _ = batch_norm_portable(first, w16, w16, 1e-5)
    _, y128, s128, m128, _ = batch_norm_portable(last, w128, w128, 1e-5)
    stat = np.zeros((1, 16, 1, 1), np.float32)
    # (the window gathers, the transformer's arrays and the logits at batch 8: numpy's
    # allocations at the steps' batch would be most of what is timed, where cupy's take its
    # memory pool's)
    windows, taps = np.empty((8, 8, 8, 16), np.float32), np.empty((9, 8, 4, 4, 32), np.float32)
    grads = [floats(int(k)) for k in rng.integers(16, 9216, 30)]
    logits, labels = floats(8, 10), rng.integers(0, 10, 8)
    _, e, row_sums = softmax_xent_portable(logits, labels)
    g0 = np.asarray(1.0, np.float32)
    x, w64 = floats(8, 64, 64), floats(64)
    _, yx, sx, mx = layer_norm_portable(x, w64, w64, 1e-5)
    scores = floats(8, 4, 64, 64)
    r9, tf = "ResNet9 b1024", "Transformer b256"
    return [
        (r9, "flat_concat_cuda, 30 small gradients", 1,
         lambda: flat_concat.flat_concat_cuda(grads)),
        (r9, "batch_norm_cuda, 65,536 rows of 16 (in parts, as the first four)", 4,
         lambda: affine_norm.batch_norm_cuda(first, w16, w16, 1e-5)),
        (r9, "batch_norm_cuda, 1,024 rows of 128 (one block, as the last four)", 4,
         lambda: affine_norm.batch_norm_cuda(last, w128, w128, 1e-5)),
        (r9, "batch_norm_grad_cuda, 65,536 rows of 16 (in parts)", 4,
         lambda: affine_norm.batch_norm_grad_cuda(first, first, w16, y16, s16, m16)),
        (r9, "batch_norm_grad_cuda, 1,024 rows of 128", 4,
         lambda: affine_norm.batch_norm_grad_cuda(last, last, w128, y128, s128, m128)),
        (r9, "sum_cuda, an NCHW bias adjoint", 18, lambda: sums.sum_cuda(first, (0, 2, 3))),
        (r9, "relu_cuda", 9, lambda: relu.relu_cuda(first)),
        (r9, "relu_grad_cuda", 9, lambda: relu.relu_grad_cuda(first, first)),
        (r9, "add_to_fresh_cuda, a bias", 10,
         lambda: add_to_fresh.add_to_fresh_cuda(np.zeros((4, 16), np.float32), w16)),
        (r9, "moving_averages_cuda", 8,
         lambda: normalize.moving_averages_cuda(stat, stat, stat, stat, 0.1)),
        (r9, "im2col_cuda, 3 x 3", 8, lambda: im2col.im2col_cuda(windows, (3, 3), 1, 1)),
        (r9, "col2im_cuda, 3 x 3", 7,
         lambda: im2col.col2im_cuda(taps, (8, 8, 8, 32), (3, 3), 2, 1)),
        (r9, "softmax_xent_cuda", 1, lambda: cross_entropy.softmax_xent_cuda(logits, labels)),
        (r9, "softmax_xent_grad_cuda", 1,
         lambda: cross_entropy.softmax_xent_grad_cuda(e, row_sums, labels, g0)),
        (tf, "layer_norm_cuda", 8, lambda: layer_norm.layer_norm_cuda(x, w64, w64, 1e-5)),
        (tf, "layer_norm_grad_cuda", 8,
         lambda: layer_norm.layer_norm_grad_cuda(x, x, w64, yx, sx, mx)),
        (tf, "softmax_cuda (causal)", 2, lambda: softmax.softmax_cuda(scores, 1.0, True)),
        (tf, "softmax_grad_cuda", 2, lambda: softmax.softmax_grad_cuda(scores, scores, 1.0)),
        (tf, "sum_cuda, a bias adjoint", 6, lambda: sums.sum_cuda(x, (0, 1))),
        (tf, "add_to_fresh_cuda, a bias", 8,
         lambda: add_to_fresh.add_to_fresh_cuda(np.zeros((4, 64), np.float32), w64)),
    ]


def launcher_us(calls: int) -> dict[str, float]:
    """The Python of a direct launch (backends/launch.py) with a driver that does nothing:
    relu_grad's four arguments and im2col's twelve, us a call."""
    from needle.backends import launch
    from needle.backends.cuda import typed_source

    class Array:  # what a launch reads of a cupy array
        __slots__ = ("data",)

        def __init__(self, ptr: int):
            self.data = SimpleNamespace(ptr=ptr)

    stream = SimpleNamespace(ptr=0)
    cupy = SimpleNamespace(ndarray=Array, cuda=SimpleNamespace(get_current_stream=lambda: stream))
    class Kernel:  # a cupy RawKernel: its function, and its own launch
        kernel = SimpleNamespace(ptr=1)

        def __call__(self, grid, block, args, shared_mem=0):
            pass

    kernel = Kernel()
    driver = SimpleNamespace(launchKernel=lambda *args: None)
    saved, launch.DIRECT = launch.DIRECT, True
    try:
        out = {}
        for name, source, args in (
                ("relu_grad", relu.SOURCE, (Array(8), Array(16), Array(24), np.int64(64))),
                ("im2col", im2col.SOURCE, (Array(8), Array(16), *map(np.int64, range(10))))):
            run = launch.DirectLaunch(kernel, typed_source(source, "float32"), name, "float32",
                                      contextlib.nullcontext(), cupy, driver)
            run((1,), (256,), args)  # (this thread's first launch of that many arguments)
            out[f"DirectLaunch of {name}, {len(args)} arguments (a driver doing nothing)"] = (
                best_of(lambda run=run, args=args: run((16,), (256,), args), calls, 5) * 1e6)
        return out
    finally:
        launch.DIRECT = saved


def _torch_op_us(calls: int) -> float | None:
    """PyTorch's host time for one small op on the cpu (its dispatcher's per-op cost: what
    each of these wrappers adds to a launch), or None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    t = torch.zeros(4, 16)
    return best_of(lambda: torch.relu(t), calls, 5) * 1e6


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Print each wrapper's host time a call and their total a step; returns the totals (us)
    by step."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed run")
    args = parser.parse_args(argv)
    fake = stand_in()
    modules = (add_to_fresh, affine_norm, cross_entropy, flat_concat, im2col, layer_norm,
               normalize, relu, softmax, sums)
    saved = [m.device_of for m in modules]
    for m in modules:
        m.device_of = lambda a: fake
    try:
        a = np.zeros((4, 16), np.float32)
        numpy_us = best_of(lambda: np.add(a, a, out=a), args.calls, 5) * 1e6
        torch_us = _torch_op_us(args.calls)
        unit = torch_us or numpy_us
        print(f"us a call (best of 5 runs), the same in {'PyTorch' if torch_us else 'numpy'}'s "
              "op calls, calls a step, us a step")
        totals: dict[str, float] = {}
        for step, name, per_step, f in cases():
            if step not in totals:
                print(f"-- {step}")
                totals[step] = 0.0
            us = best_of(f, args.calls, 5) * 1e6
            totals[step] += us * per_step
            print(f"{us:8.2f} {us / unit:6.1f}x {per_step:4d} {us * per_step:8.1f}  {name}",
                  flush=True)
        for step, total in totals.items():
            print(f"{total:30.1f}  a {step} step in all")
        print("-- a raw kernel's launch")
        for name, us in launcher_us(args.calls).items():
            print(f"{us:8.2f} {us / unit:6.1f}x {'':4s} {'':8s}  {name}")
        print(f"(for scale, measured in the same run: numpy's np.add(out=) on 4 x 16 {numpy_us:.2f}"
              " us" + (f", PyTorch's torch.relu on a 4 x 16 cpu tensor {torch_us:.2f} us)"
                       if torch_us else ")"))
    finally:
        for m, f in zip(modules, saved):
            m.device_of = f
    return totals


if __name__ == "__main__":
    main()

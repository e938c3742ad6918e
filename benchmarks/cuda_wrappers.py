"""Host time of the Python around needle's cuda kernels, on any machine: each wrapper in
backends/ (BatchNorm, SUM, ReLU's adjoint, ...) called with numpy standing in for cupy and
kernels that do nothing, so what is timed is needle's own Python plus numpy's allocations and
views (cupy's cost more: benchmarks/launch_costs.py measures those on a GPU). Shapes are
ResNet9's at batch 1,024, with the number of calls one of its training steps makes (seventh
session's profile), and their total a step.

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
    flat_concat,
    im2col,
    normalize,
    relu,
    sums,
)
from needle.ops.affine_norm import batch_norm_portable  # noqa: E402


def stand_in() -> Any:
    """A cuda device whose cupy is numpy and whose kernels do nothing."""
    def raw_kernel(name: str, source: str, entry: str, dtype: str) -> Callable:
        return lambda grid, block, args: None

    def elementwise_kernel(name: str, params: str, outs: str, body: str, exact: bool = False):
        return lambda *args: args[-1]

    cupy = SimpleNamespace(ascontiguousarray=np.ascontiguousarray, empty=np.empty,
                           empty_like=np.empty_like, add=np.add, reshape=np.reshape)
    return SimpleNamespace(cupy=cupy, native=contextlib.nullcontext(),
                           current=contextlib.nullcontext(), raw_kernel=raw_kernel,
                           elementwise_kernel=elementwise_kernel)


def cases() -> list[tuple[str, int, Callable[[], Any]]]:
    """(name, calls a ResNet9 b1024 step makes, the call)."""
    rng = np.random.default_rng(0)

    def nchw(n: int, c: int, h: int) -> np.ndarray:  # a convolution's output: channels-last
        return rng.standard_normal((n, h, h, c)).astype(np.float32).transpose(0, 3, 1, 2)

    first, last = nchw(1024, 16, 8), nchw(1024, 128, 1)  # its first and last BatchNorms
    w16, w128 = (rng.standard_normal(c).astype(np.float32) for c in (16, 128))
    _, y16, s16, m16, _ = batch_norm_portable(first, w16, w16, 1e-5)
    _, y128, s128, m128, _ = batch_norm_portable(last, w128, w128, 1e-5)
    stat = np.zeros((1, 16, 1, 1), np.float32)
    # (the window gathers at batch 8: numpy's allocation of their columns at 1,024 would be
    # most of what is timed, where cupy's takes its memory pool's)
    windows, taps = np.empty((8, 8, 8, 16), np.float32), np.empty((9, 8, 4, 4, 32), np.float32)
    grads = [rng.standard_normal(k).astype(np.float32) for k in rng.integers(16, 9216, 30)]
    return [
        ("flat_concat_cuda, 30 small gradients", 1, lambda: flat_concat.flat_concat_cuda(grads)),
        ("batch_norm_cuda, 65,536 rows of 16 (in parts, as the first four)", 4,
         lambda: affine_norm.batch_norm_cuda(first, w16, w16, 1e-5)),
        ("batch_norm_cuda, 1,024 rows of 128 (one block, as the last four)", 4,
         lambda: affine_norm.batch_norm_cuda(last, w128, w128, 1e-5)),
        ("batch_norm_grad_cuda, 65,536 rows of 16 (in parts)", 4,
         lambda: affine_norm.batch_norm_grad_cuda(first, first, w16, y16, s16, m16)),
        ("batch_norm_grad_cuda, 1,024 rows of 128", 4,
         lambda: affine_norm.batch_norm_grad_cuda(last, last, w128, y128, s128, m128)),
        ("sum_cuda, an NCHW bias adjoint", 18, lambda: sums.sum_cuda(first, (0, 2, 3))),
        ("relu_grad_cuda", 9, lambda: relu.relu_grad_cuda(first, first)),
        ("add_to_fresh_cuda, a bias", 10,
         lambda: add_to_fresh.add_to_fresh_cuda(np.zeros((4, 16), np.float32), w16)),
        ("moving_averages_cuda", 8,
         lambda: normalize.moving_averages_cuda(stat, stat, stat, stat, 0.1)),
        ("im2col_cuda, 3 x 3", 8, lambda: im2col.im2col_cuda(windows, (3, 3), 1, 1)),
        ("col2im_cuda, 3 x 3", 7,
         lambda: im2col.col2im_cuda(taps, (8, 8, 8, 32), (3, 3), 2, 1)),
    ]


def main(argv: list[str] | None = None) -> float:
    """Print each wrapper's host time a call and their total a step; returns the total (us)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed run")
    args = parser.parse_args(argv)
    fake = stand_in()
    modules = (add_to_fresh, affine_norm, flat_concat, im2col, normalize, relu, sums)
    saved = [m.device_of for m in modules]
    for m in modules:
        m.device_of = lambda a: fake
    try:
        total = 0.0
        print("us a call (best of 5 runs), calls a ResNet9 b1024 step, us a step")
        for name, per_step, f in cases():
            us = best_of(f, args.calls, 5) * 1e6
            total += us * per_step
            print(f"{us:8.2f} {per_step:4d} {us * per_step:8.1f}  {name}", flush=True)
        a = np.zeros((4, 16), np.float32)
        scale = best_of(lambda: np.add(a, a, out=a), args.calls, 5) * 1e6
        print(f"{total:24.1f}  a step in all (for scale: numpy's own np.add(out=) on 4 x 16: "
              f"{scale:.2f} us)")
    finally:
        for m, f in zip(modules, saved):
            m.device_of = f
    return total


if __name__ == "__main__":
    main()

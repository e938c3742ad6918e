"""Host time per call (us) of the launches an eager step makes on a GPU, on tiny arrays (so
the GPU's time stays below the host's): cupy's ufuncs, ElementwiseKernel and RawKernel
launches, allocations and views, needle's kernel wrappers and a needle op on cuda, and
PyTorch's equivalents; best of 5 runs of 2,000 calls, each run closed by a sync. The
README's "Host time per call" figures (H100) came from this. Needs cupy, PyTorch and a GPU.

    python benchmarks/launch_costs.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import best_of  # noqa: E402

import needle as ndl  # noqa: E402

N = 2000
RAW_RELU_GRAD = r"""extern "C" __global__ void rg(const float* g, const float* a, float* y,
                                                long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) y[i] = g[i] * (a[i] > 0.f ? 1.f : 0.f);
}"""


def timer(sync: Callable[[], None]) -> Callable[[str, Callable[[], object]], None]:
    """t(name, f): prints the best of 5 runs of N calls of f, in us per call."""
    def t(name: str, f: Callable[[], object]) -> None:
        f()
        sync()
        print(f"{best_of(f, N, 5, sync) * 1e6:8.2f} us  {name}", flush=True)
    return t


def cupy_calls(dev: ndl.Device) -> None:
    from cupy_backends.cuda.api import driver

    from needle.backends import add_to_fresh, elementwise, launch, matmul, normalize, relu, sums

    cp = dev.cupy
    t = timer(cp.cuda.Device().synchronize)
    with dev.native:
        a, b = (cp.random.rand(64, 64, dtype=cp.float32) for _ in range(2))
        y, big = cp.empty_like(a), cp.random.rand(4096, 64, dtype=cp.float32)
        m, v = (cp.random.rand(64, dtype=cp.float32) for _ in range(2))
        raw = cp.RawKernel(RAW_RELU_GRAD, "rg")
        ew = dev.elementwise_kernel("relu_grad", "X g, X a", "X y", relu.RELU_GRAD_CUDA)
        n64 = np.int64(a.size)
        t("cupy.add(a, b, out=y)", lambda: cp.add(a, b, out=y))
        t("a + b", lambda: a + b)
        t("cupy.maximum(a, 0)", lambda: cp.maximum(a, 0))
        t("ElementwiseKernel relu_grad(g, a, y)", lambda: ew(a, b, y))
        t("ElementwiseKernel relu_grad(g, a) (allocates y)", lambda: ew(a, b))
        t("RawKernel rg((16,), (256,), (g, a, y, n))", lambda: raw((16,), (256,), (a, b, y, n64)))
        direct = launch.DirectLaunch(raw, RAW_RELU_GRAD, "rg", "float32", dev.native, cp,
                                     driver)
        saved = launch.DIRECT  # (both ways, whatever NEEDLE_DIRECT_LAUNCH says)
        launch.DIRECT = True
        t("needle DirectLaunch of rg (the same launch)", lambda: direct((16,), (256,),
                                                                       (a, b, y, n64)))
        launch.DIRECT = False
        t("needle DirectLaunch of rg, DIRECT off (cupy's call)",
          lambda: direct((16,), (256,), (a, b, y, n64)))
        launch.DIRECT = saved
        t("cupy.empty((64, 64))", lambda: cp.empty((64, 64), dtype=cp.float32))
        t("cupy.empty_like(a)", lambda: cp.empty_like(a))
        nchw = cp.empty((8, 8, 8, 16), dtype=cp.float32).transpose(0, 3, 1, 2)  # a conv's
        t("cupy.empty_like(an NCHW view of NHWC)", lambda: cp.empty_like(nchw))
        t("needle empty_as(an NCHW view of NHWC)", lambda: elementwise.empty_as(cp, nchw))
        t("needle relu_cuda(an NCHW view of NHWC)", lambda: relu.relu_cuda(nchw))
        t("a.reshape(4096)", lambda: a.reshape(4096))
        t("a.transpose((1, 0))", lambda: a.transpose((1, 0)))
        t("cupy.ascontiguousarray(a.T) (a copy kernel)", lambda: cp.ascontiguousarray(a.T))
        t("cupy.sum(big, axis=0)", lambda: cp.sum(big, axis=0))
        t("cupy.any(a > 0)", lambda: cp.any(a > 0))
        t("needle relu_grad_cuda(g, a)", lambda: relu.relu_grad_cuda(a, b))
        t("needle add_to_fresh_cuda(y, b)", lambda: add_to_fresh.add_to_fresh_cuda(y, b))
        t("needle sum_cuda(big, (0,))", lambda: sums.sum_cuda(big, (0,)))
        t("needle moving_averages_cuda", lambda: normalize.moving_averages_cuda(m, v, m, v, 0.1))
        t("needle matmul_cuda(a, b) (a kept call)", lambda: matmul.matmul_cuda(a, b))
        t("cupy.matmul(a, b)", lambda: cp.matmul(a, b))

        def enter_exit(context):
            with context:
                pass
        t("with cupy's Device (enter and exit)", lambda: enter_exit(dev.native))
        t("with dev.current (what kernels launch in)", lambda: enter_exit(dev.current))
    ta, tb = (ndl.Tensor(np.random.rand(64, 64).astype(np.float32), device=dev) for _ in range(2))
    tg = ndl.Tensor(np.random.rand(64, 64).astype(np.float32), device=dev, requires_grad=True)
    t("needle relu (no grad)", lambda: ndl.ops.relu(ta))
    t("needle a + b (no grad)", lambda: ta + tb)
    t("needle relu (grad)", lambda: ndl.ops.relu(tg))
    t("needle a @ b (grad)", lambda: tg @ tb)


def torch_calls() -> None:
    import torch

    t = timer(torch.cuda.synchronize)
    x, w = (torch.rand(64, 64, device="cuda") for _ in range(2))
    xg = torch.rand(64, 64, device="cuda", requires_grad=True)
    t("torch relu(x)", lambda: torch.relu(x))
    t("torch x + w", lambda: x + w)
    t("torch x @ w", lambda: x @ w)
    t("torch threshold_backward", lambda: torch.ops.aten.threshold_backward(x, w, 0.0))
    t("torch relu(x) (grad)", lambda: torch.relu(xg))
    t("torch empty", lambda: torch.empty((64, 64), device="cuda"))


def main() -> None:
    dev = ndl.cuda()
    if not dev.enabled():
        print(f"benchmarks/launch_costs.py needs a GPU: {dev.unavailable_reason()}")
        return
    cupy_calls(dev)
    try:
        import torch
    except ImportError:
        print("(no PyTorch: its calls are not measured)")
        return
    if torch.cuda.is_available():
        torch_calls()


if __name__ == "__main__":
    main()

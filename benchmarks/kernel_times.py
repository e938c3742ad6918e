"""Device time per kernel of one training step (benchmarks/gpu.py's steps), per framework:
CUPTI through `torch.profiler` records every kernel the process launches, cupy's as well as
PyTorch's, so needle's cuda device is measured alike. Prints, per row and framework, the
unprofiled step time, the GPU time a step and its number of kernels, then the kernels that
took the most time. The README's "Where the time goes" figures came from this (H100).

    python benchmarks/kernel_times.py resnet9_b1024,transformer_b256 ["needle cuda;pytorch cuda"]
    python benchmarks/kernel_times.py transformer_b16 --cpu   (torch:cpu and PyTorch: ops, host)
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu  # noqa: E402

import needle as ndl  # noqa: E402

#: gpu.py's columns measured by default on a GPU
FRAMEWORKS = ("needle cuda", "needle cuda graphed", "needle torch:cuda",
              "needle torch:cuda graphed", "pytorch cuda")
STEPS = 5  # profiled steps (after 5 warm-up and 10 timed ones)


def cpu_step(row: str, framework: str) -> Callable[[], object]:
    """The row's step on the cpu: needle torch:cpu or PyTorch cpu."""
    kind, size, batch = gpu.STEPS[row]
    if framework == "pytorch cpu":
        return gpu.torch_step(kind, size, batch, "cpu")
    return gpu.needle_step(kind, size, batch, ndl.torch("cpu"))


def profile(step: Callable[[], object], sync: Callable[[], None], cpu: bool = False,
            steps: int = STEPS) -> tuple[float, dict[str, tuple[float, float]]]:
    """(ms per unprofiled step, {kernel or op: (us a step, calls a step)}) of `step`: device
    time of each kernel (self time of each op with `cpu`)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for _ in range(5):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(10):
        step()
    sync()
    ms = (time.perf_counter() - start) / 10 * 1e3
    with torch_profile(activities=[ProfilerActivity.CPU if cpu else ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            step()
        sync()
    times: dict[str, tuple[float, float]] = collections.defaultdict(lambda: (0.0, 0.0))
    for event in p.key_averages():
        if cpu or event.device_type.name == "CUDA":
            us = (event.self_cpu_time_total if cpu else event.self_device_time_total) / steps
            if us > 0:
                total, calls = times[event.key]
                times[event.key] = (total + us, calls + event.count / steps)
    return ms, dict(times)


def report(row: str, framework: str, ms: float, times: dict, cpu: bool = False,
           top: int = 22) -> str:
    """The lines printed for one row and framework."""
    total = sum(us for us, _ in times.values())
    count = sum(calls for _, calls in times.values())
    lines = [f"===== {row} {framework}: {ms:.2f} ms/step unprofiled; {total / 1e3:.3f} ms of "
             f"{'host' if cpu else 'kernel'} time a step in {count:.0f} "
             f"{'ops' if cpu else 'kernels'}"]
    for key, (us, calls) in sorted(times.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"  {us:9.1f} us  {calls:5.0f}x  {key[:110]}")
    return "\n".join(lines)


def main() -> None:
    cpu = "--cpu" in sys.argv
    args = [a for a in sys.argv[1:] if a != "--cpu"]
    if not args:
        print(__doc__)
        return
    rows = args[0].split(",")
    frameworks = (args[1].split(";") if len(args) > 1 else
                  ["needle torch:cpu", "pytorch cpu"] if cpu else list(FRAMEWORKS))
    for row in rows:
        for framework in frameworks:
            try:  # one framework failing (no cupy, say) must not stop the others
                if cpu:
                    step, sync = cpu_step(row, framework), (lambda: None)
                else:
                    step, sync = gpu.make_step(row, framework), gpu.sync_of(framework)
                ms, times = profile(step, sync, cpu)
            except Exception as e:
                print(f"===== {row} {framework}: {type(e).__name__}: {e}", flush=True)
                continue
            print(report(row, framework, ms, times, cpu), flush=True)


if __name__ == "__main__":
    main()

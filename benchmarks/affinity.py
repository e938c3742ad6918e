"""Does the host CPU a step runs on decide its time? (a probe of the H100 host's slow stretches)

On the lent H100, needle's step was 60% slower on some host CPUs, PyTorch's 20%.

The process pins itself to `--start` before it allocates anything (numpy, torch and needle
are imported after), so its memory is placed from that CPU. Then, for every CPU it may run
on, it pins itself there and times `--steps` steps of each framework: the wall time and the
thread's CPU time per step (median ms). Wall time well above CPU time is waiting (the GPU, or
the scheduler); CPU time that differs between CPUs is the CPU itself (or memory placed far
from it). Run it twice with different `--start`: if the fast CPUs move with the start CPU,
memory placement decides.

    python benchmarks/affinity.py [--start 0] [--row resnet9_b128] [--steps 10] [--passes 2]
                                  [--cpu]        # needle cpu and PyTorch cpu (no GPU needed)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def pin(cpu: int) -> None:
    """Run this process on `cpu` only: every thread it has (BLAS's, PyTorch's) and those
    it makes later."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except OSError:  # (a thread that ended meanwhile)
            pass


def timed(step, sync, steps: int) -> tuple[float, float]:
    """(median wall ms, median thread-CPU ms) of `steps` calls, each closed by `sync()`."""
    wall, cpu = [], []
    for _ in range(steps):
        w, c = time.perf_counter(), time.thread_time()
        step()
        sync()
        wall.append(time.perf_counter() - w)
        cpu.append(time.thread_time() - c)
    return 1e3 * statistics.median(wall), 1e3 * statistics.median(cpu)


def steps_of(row: str, on_cpu: bool) -> dict:
    """framework -> (step, sync) for gpu.py's `row`, made on the GPU or, with `on_cpu`, on
    needle's cpu and PyTorch's cpu."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gpu

    import needle as ndl

    kind, size, batch = gpu.STEPS[row]
    if on_cpu:
        return {"needle cpu": (gpu.needle_step(kind, size, batch, ndl.cpu()), lambda: None),
                "pytorch cpu": (gpu.torch_step(kind, size, batch, "cpu"), lambda: None)}
    reasons = gpu.available()
    return {f: (gpu.make_step(row, f), gpu.sync_of(f))
            for f in ("needle cuda", "needle torch:cuda", "pytorch cuda") if not reasons[f]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--start", type=int, default=0, help="the CPU pinned before any allocation")
    p.add_argument("--row", default="resnet9_b128", help="a row of benchmarks/gpu.py")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--passes", type=int, default=2, help="sweeps over the CPUs")
    p.add_argument("--cpu", action="store_true", help="needle cpu and PyTorch cpu instead")
    args = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if args.start not in cpus:
        raise SystemExit(f"affinity.py: --start {args.start} is not among this process's "
                         f"CPUs {cpus}")
    pin(args.start)
    steps = steps_of(args.row, args.cpu)
    if not steps:
        print("affinity.py: no GPU framework can run here (try --cpu)")
        return
    for step, sync in steps.values():
        for _ in range(args.warmup):
            step()
        sync()
    print(f"{args.row}: median ms of {args.steps} steps per CPU, wall / thread CPU time; "
          f"memory placed from CPU {args.start}")
    print(f"{'pass':>4s} {'cpu':>4s}" + "".join(f"{f:>26s}" for f in steps), flush=True)
    for n in range(args.passes):
        for cpu in cpus:
            pin(cpu)
            cells = []
            for step, sync in steps.values():
                step()  # the first step after a move pays for the caches
                sync()
                wall, busy = timed(step, sync, args.steps)
                cells.append(f"{wall:8.2f} / {busy:8.2f}")
            print(f"{n:4d} {cpu:4d}" + "".join(f"{c:>26s}" for c in cells), flush=True)


if __name__ == "__main__":
    main()

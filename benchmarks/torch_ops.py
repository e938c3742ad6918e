"""Torch ops per training step: needle's `torch` device against PyTorch itself, counted.

On a GPU every torch op that computes is a kernel launch and every op costs host time, so the
count of ops a step dispatches is what needle's torch:cuda step pays over PyTorch's, and it
can be counted on any machine: this runs benchmarks/gpu.py's steps (MLPResNet, ResNet9, the
transformer) on torch's cpu (or `--device cuda`), counts the ops PyTorch's dispatcher sees in
one step after warm-up (a TorchDispatchMode), and times the steps (medians). The count is
exact and the same on every run; the times are this machine's.

    python benchmarks/torch_ops.py [--only resnet9_b16,transformer_b16] [--device cpu] [--top 8]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu  # noqa: E402
from harness import timed_steps  # noqa: E402

import needle as ndl  # noqa: E402

STEPS = {"mlp_h1024_b100": ("mlp", 1024, 100), "resnet9_b16": ("resnet9", None, 16),
         "resnet9_b128": ("resnet9", None, 128), "transformer_b16": ("transformer", None, 16)}


def count_ops(step) -> collections.Counter:
    """The torch ops one call of `step` dispatches, by name (after three warm-up calls)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    for _ in range(3):
        step()
    with Count() as mode:
        step()
    return mode.ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(STEPS), help="steps, comma-separated")
    parser.add_argument("--device", default="cpu", help="torch's device: cpu or cuda")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--top", type=int, default=0, help="list the N most frequent ops")
    args = parser.parse_args()
    import torch

    why = ndl.torch(args.device).unavailable_reason()
    if why:
        raise SystemExit(f"benchmarks/torch_ops.py: {why}")
    sync = torch.cuda.synchronize if args.device == "cuda" else None
    print(f"torch ops per step and ms per step (median of {args.steps}) on torch "
          f"{torch.__version__} {args.device}")
    print(f"{'step':18s} {'needle torch':>14s} {'compiled':>10s} {'pytorch':>9s}"
          f"{'needle ms':>11s} {'pytorch ms':>11s}")
    for name in args.only.split(","):
        kind, size, batch = STEPS[name]
        device = ndl.torch(args.device)
        eager = gpu.needle_step(kind, size, batch, device)
        compiled = gpu.needle_step(kind, size, batch, device, compiled=True)
        ref = gpu.torch_step(kind, size, batch, args.device)
        counts = [count_ops(s) for s in (eager, compiled, ref)]
        ms = [timed_steps(s, args.steps, sync=sync)["ms"] for s in (eager, ref)]
        print(f"{name:18s} {sum(counts[0].values()):14d} {sum(counts[1].values()):10d} "
              f"{sum(counts[2].values()):9d}{ms[0]:11.2f}{ms[1]:11.2f}", flush=True)
        if args.top:
            ops = sorted(set(counts[0]) | set(counts[2]), key=lambda k: -counts[0][k])
            for op in ops[:args.top]:
                print(f"    {op:30s} {counts[0][op]:6d} {counts[1][op]:10d} {counts[2][op]:9d}")


if __name__ == "__main__":
    main()

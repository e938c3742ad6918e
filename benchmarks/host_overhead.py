"""Host time of a training step: the GPU table's models (benchmarks/gpu.py) made so small that
every step is framework overhead, on the cpu, against PyTorch measured in the same run.

On a GPU the eager steps of benchmarks/gpu.py are bound by the host (an H100 waits for the
Python that launches its kernels), so what a step costs the host decides the GPU table's
eager columns. This measures that cost without a GPU: MLPResNet at hidden 8 and batch 2,
ResNet9 on 8 x 8 images at batch 2, the Transformer at E 8, hidden 16, 4 heads of 2, T 4 and
batch 2; needle's cpu (numpy) and torch:cpu devices, eager and compiled (`ndl.compile`),
against PyTorch cpu eager with multi-tensor (foreach) optimizers, as PyTorch runs them on a
GPU. PyTorch on one thread (numpy's BLAS on its default threads; at these sizes it runs
on one); medians of steps timed in rounds that take turns. The kernels a GPU
launches cost more than these cpu calls, so the ratios here are a floor for the GPU's.

    python benchmarks/host_overhead.py [--steps 200] [--rounds 5] [--only transformer]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu  # noqa: E402
from harness import interleaved_ms  # noqa: E402

import needle as ndl  # noqa: E402

ROWS = {"mlp": ("mlp", 8, 2), "resnet9": ("resnet9", None, 2),
        "transformer": ("transformer", None, 2)}
COLUMNS = ("needle cpu", "needle cpu compiled", "needle torch:cpu", "needle torch:cpu compiled",
           "pytorch cpu")


def small_models() -> None:
    """gpu.py's models at the sizes above (its module settings)."""
    gpu.E, gpu.HIDDEN, gpu.DIM_HEAD, gpu.T, gpu.IMAGE = 8, 16, 2, 4, 8


def make_step(row: str, column: str):
    kind, size, batch = ROWS[row]
    if column == "pytorch cpu":
        return gpu.torch_step(kind, size, batch, "cpu", foreach=True)
    device = ndl.cpu() if column.startswith("needle cpu") else ndl.torch("cpu")
    return gpu.needle_step(kind, size, batch, device, compiled=column.endswith("compiled"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", default="", help=f"comma-separated rows of {', '.join(ROWS)}")
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        print("benchmarks/host_overhead.py: needs PyTorch (pip install needle[torch])")
        return
    torch.set_num_threads(1)
    small_models()
    columns = [c for c in COLUMNS if c == "pytorch cpu" or "torch" not in c
               or ndl.torch().enabled()]
    if len(columns) < len(COLUMNS):
        print(f"needle's torch device is unavailable ({ndl.torch().unavailable_reason()}): "
              "its columns are left out")
    per_round = math.ceil(args.steps / args.rounds)
    print(f"ms per step (median of {per_round * args.rounds} in {args.rounds} rounds taking "
          "turns), PyTorch on one thread; ratio to PyTorch cpu eager with foreach optimizers "
          f"(torch {torch.__version__})")
    print(f"{'step':12s}" + "".join(f"{c:>28s}" for c in columns))
    for row in [r for r in args.only.split(",") if r] or list(ROWS):
        steps = {c: (make_step(row, c), None) for c in columns}
        ms, errors = interleaved_ms(steps, args.rounds, per_round, warmup=5)
        for column, error in errors.items():
            print(f"  {row} on {column}: {error}")
        base = ms.get("pytorch cpu")
        cells = [f"{ms[c]:7.3f} ms ({ms[c] / base:4.2f}x)" if c in ms and base else "n/a"
                 for c in columns]
        print(f"{row:12s}" + "".join(f"{c:>28s}" for c in cells), flush=True)


if __name__ == "__main__":
    main()

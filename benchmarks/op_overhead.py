"""Per-op framework overhead: forward + backward of a chain of 100 adds and muls on (4, 4).

Prints microseconds per op for needle (cpu), PyTorch CPU (when installed) and a hand-written
numpy forward + backward of the same chain, all measured in this run, and their ratios.

    python benchmarks/op_overhead.py [--repeat 7] [--number 200]
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

import needle as ndl

N_PAIRS = 50  # 50 adds + 50 muls = 100 ops


def needle_chain(a, w):
    x = a
    for _ in range(N_PAIRS):
        x = x + w
        x = x * w
    x.backward()


def torch_chain(a, w):
    x = a
    for _ in range(N_PAIRS):
        x = x + w
        x = x * w
    x.backward(torch_ones)


def numpy_chain(a, w):
    xs = []
    x = a
    for _ in range(N_PAIRS):  # forward, keeping what backward needs
        x = x + w
        xs.append(x)
        x = x * w
    g = np.ones_like(x)
    gw = np.zeros_like(w)
    for x_in in reversed(xs):  # backward: d(x*w) and d(x+w)
        gw += g * x_in
        g = g * w
        gw += g
    return g, gw


def per_op_us(fn, *args, number: int, repeat: int) -> float:
    best = min(timeit.repeat(lambda: fn(*args), number=number, repeat=repeat))
    return best / number / (2 * N_PAIRS) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=200)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    a_np = rng.uniform(0.9, 1.0, (4, 4)).astype(np.float32)
    w_np = rng.uniform(0.9, 1.0, (4, 4)).astype(np.float32)

    results = {}
    a, w = ndl.Tensor(a_np), ndl.Tensor(w_np)
    results["needle cpu"] = per_op_us(needle_chain, a, w, number=args.number,
                                      repeat=args.repeat)
    results["numpy (hand-written)"] = per_op_us(numpy_chain, a_np, w_np, number=args.number,
                                                repeat=args.repeat)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        global torch_ones
        torch_ones = torch.ones(4, 4)
        ta = torch.tensor(a_np, requires_grad=True)
        tw = torch.tensor(w_np, requires_grad=True)
        results[f"pytorch {torch.__version__} cpu"] = per_op_us(
            torch_chain, ta, tw, number=args.number, repeat=args.repeat)

    print(f"forward+backward per op, chain of {2 * N_PAIRS} ops on (4, 4) float32")
    base = results["needle cpu"]
    for name, us in results.items():
        print(f"  {name:28s} {us:7.2f} us/op   needle/this = {base / us:5.2f}")
    if torch is None:
        print("  (PyTorch not installed: pip install torch to compare)")


torch_ones = None

if __name__ == "__main__":
    main()

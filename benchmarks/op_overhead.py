"""Per-op framework overhead: forward + backward of a chain of 100 adds and muls on (4, 4).

Prints microseconds per op for needle (cpu; with the course's `backward()`, which records the
gradients' graph, with `backward(create_graph=False)`, PyTorch's default, and with that chain
compiled by `ndl.compile`, recorded once and replayed by every later call), PyTorch CPU
(when installed) and a hand-written numpy forward + backward of the same chain, all measured
in this run, and each one's ratio to PyTorch.

    python benchmarks/op_overhead.py [--rounds 9] [--number 200]
"""

from __future__ import annotations

import argparse
import statistics
import timeit

import numpy as np

import needle as ndl

N_PAIRS = 50  # 50 adds + 50 muls = 100 ops


def needle_chain(a, w, create_graph=True):
    x = a
    for _ in range(N_PAIRS):
        x = x + w
        x = x * w
    x.backward(create_graph=create_graph)  # the course's backward() records a graph


def needle_chain_nograph(a, w):
    needle_chain(a, w, create_graph=False)


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


def per_op_us(fn, *args, number: int) -> float:
    """Microseconds per op of `number` calls of `fn` (one chain of 2 * N_PAIRS ops each)."""
    return timeit.timeit(lambda: fn(*args), number=number) / number / (2 * N_PAIRS) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9,
                        help="rounds; each times every framework once, alternating")
    parser.add_argument("--number", type=int, default=200, help="chains per timing")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    a_np = rng.uniform(0.9, 1.0, (4, 4)).astype(np.float32)
    w_np = rng.uniform(0.9, 1.0, (4, 4)).astype(np.float32)
    a, w = ndl.Tensor(a_np), ndl.Tensor(w_np)
    runs = {"needle cpu": (needle_chain, a, w),
            "  backward(create_graph=False)": (needle_chain_nograph, a, w),
            "  that chain, ndl.compile": (ndl.compile(needle_chain_nograph), a, w),
            "numpy (hand-written)": (numpy_chain, a_np, w_np)}
    try:
        import torch
    except ImportError:
        torch = None
    torch_name = None
    if torch is not None:
        global torch_ones
        torch_ones = torch.ones(4, 4)
        ta = torch.tensor(a_np, requires_grad=True)
        tw = torch.tensor(w_np, requires_grad=True)
        torch_name = f"pytorch {torch.__version__} cpu"
        runs[torch_name] = (torch_chain, ta, tw)
    for fn, *fargs in runs.values():  # warm-up
        per_op_us(fn, *fargs, number=max(1, args.number // 10))
    results: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):  # alternating, so every framework sees the same noise
        for name, (fn, *fargs) in runs.items():
            results[name].append(per_op_us(fn, *fargs, number=args.number))

    print(f"forward+backward per op, chain of {2 * N_PAIRS} ops on (4, 4) float32; "
          f"{args.rounds} alternating rounds of {args.number} chains, medians")
    ref = results[torch_name] if torch_name else results["needle cpu"]
    ref_name = "pytorch" if torch_name else "needle"
    for name, us in results.items():
        ratios = [u / r for u, r in zip(us, ref)]
        print(f"  {name:30s} {statistics.median(us):7.2f} us/op   x {ref_name} = "
              f"{statistics.median(ratios):5.2f}  ({min(ratios):.2f}-{max(ratios):.2f})")
    if torch is None:
        print("  (PyTorch not installed: pip install torch to compare)")


torch_ones = None

if __name__ == "__main__":
    main()

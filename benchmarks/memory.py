"""Memory over a long run: live needle Values and RSS across 2,000 Adam steps of a small MLP.

Prints TENSOR_COUNTER and the resident set size at a few steps for needle (plain backward(),
as users call it) and, when installed, the RSS of the same loop in PyTorch, in this run.

    python benchmarks/memory.py [--steps 2000]
"""

from __future__ import annotations

import argparse

import numpy as np
from harness import rss_mb

import needle as ndl
from needle import autograd


def needle_run(steps: int, marks: set[int]) -> list[tuple[int, int, float]]:
    np.random.seed(0)
    nn = ndl.nn
    model = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(128, 10))
    opt = ndl.optim.Adam(model.parameters(), lr=0.001)
    rng = np.random.default_rng(0)
    x = ndl.Tensor(rng.standard_normal((32, 64)), dtype="float32", requires_grad=False)
    y = ndl.Tensor(rng.integers(0, 10, 32), requires_grad=False)
    loss_fn = nn.SoftmaxLoss()
    rows = []
    for step in range(1, steps + 1):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if step in marks:
            rows.append((step, autograd.TENSOR_COUNTER, rss_mb()))
    return rows


def torch_run(steps: int, marks: set[int]) -> list[tuple[int, float]]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    loss_fn = nn.CrossEntropyLoss()
    rows = []
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if step in marks:
            rows.append((step, rss_mb()))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    marks = {10, args.steps // 4, args.steps // 2, args.steps}
    print(f"{args.steps} Adam steps of Linear-BatchNorm-ReLU-Dropout-Linear, batch 32")
    print("  needle: step  live Values  RSS MB")
    for step, live, rss in needle_run(args.steps, marks):
        print(f"          {step:5d}  {live:11d}  {rss:6.1f}")
    try:
        rows = torch_run(args.steps, marks)
    except ImportError:
        print("  (PyTorch not installed: pip install torch to compare)")
        return
    print("  pytorch: step  RSS MB")
    for step, rss in rows:
        print(f"           {step:5d}  {rss:6.1f}")


if __name__ == "__main__":
    main()

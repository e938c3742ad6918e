"""Convolutions: needle cpu vs PyTorch CPU, measured in the same run.

1. forward+backward of single conv layers at ResNet9's shapes (batch 128, 32x32 input);
2. one ResNet9 training step (batch 128, 3x32x32, SGD lr 0.01; needle with the course's
   `loss.backward()` and as needle-nograph with `backward(create_graph=False)`), the target being
   at most 1.5x PyTorch's time, with each framework's per-step peak memory (each in a fresh
   process: the peak RSS over the steps minus the RSS once model and batch were built);
3. with --portable, needle's portable gather (stacked slices) in place of the cpu device's
   strided-view gather, to show what the fast path buys.

Timings alternate between the frameworks and report medians, since this machine is noisy.

    python benchmarks/conv.py [--steps 20] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch_models
from harness import fresh_process_rounds, timed_steps

import needle as ndl
from needle.kernels import reference_only
from needle.ops.im2col import IM2COL

# (C_in, C_out, kernel, stride, input H=W) of ResNet9's conv layers on 32x32 images
LAYERS = [(3, 16, 7, 4, 32), (16, 32, 3, 2, 8), (32, 32, 3, 1, 4), (32, 64, 3, 2, 4),
          (64, 128, 3, 2, 2), (128, 128, 3, 1, 1)]
BATCH = 128





def use_portable_gather() -> None:
    """Make the cpu run the portable gather (IM2COL's reference) from now on, in this process."""
    reference_only(IM2COL).__enter__()


# ----- single layers -----------------------------------------------------------------------
def needle_layer(c_in, c_out, k, s, h):
    np.random.seed(0)
    layer = ndl.nn.Conv(c_in, c_out, k, stride=s)
    x = ndl.Tensor(np.random.rand(BATCH, c_in, h, h).astype(np.float32), requires_grad=True)

    def run():
        layer.weight.grad = layer.bias.grad = x.grad = None
        out = layer(x)
        out.backward(ndl.ones_like(out))
    return run


def torch_layer(c_in, c_out, k, s, h):
    import torch

    layer = torch.nn.Conv2d(c_in, c_out, k, stride=s, padding=k // 2)
    x = torch.rand(BATCH, c_in, h, h, requires_grad=True)

    def run():
        layer.zero_grad(set_to_none=True)
        x.grad = None
        out = layer(x)
        out.backward(torch.ones_like(out))
    return run


def median_ms(fns: dict, rounds: int) -> dict[str, float]:
    """Median milliseconds of each callable, calls interleaved round by round."""
    for f in fns.values():
        f()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            start = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * float(np.median(t)) for name, t in times.items()}


# ----- one ResNet9 step --------------------------------------------------------------------
def needle_step(portable: bool, create_graph: bool = True):
    from needle.apps.models import ResNet9

    if portable:
        use_portable_gather()
    np.random.seed(0)
    model = ResNet9()
    opt = ndl.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = ndl.nn.SoftmaxLoss()
    rng = np.random.default_rng(0)
    X = ndl.Tensor(rng.random((BATCH, 3, 32, 32), dtype=np.float32), requires_grad=False)
    y = ndl.Tensor(rng.integers(0, 10, BATCH), requires_grad=False)
    model.train()

    def step():
        opt.reset_grad()
        loss = loss_fn(model(X), y)
        loss.backward(create_graph=create_graph)  # the course's backward() records a graph
        opt.step()
    return step


def torch_step():
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = torch_models.resnet9()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    X = torch.rand(BATCH, 3, 32, 32)
    y = torch.randint(0, 10, (BATCH,))
    model.train()

    def step():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(X), y)
        loss.backward()
        opt.step()
    return step


def one_process(which: str, steps: int, threads: int | None) -> dict:
    """Time `steps` ResNet9 steps of one framework in this (fresh) process."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    step = (torch_step() if which == "pytorch" else
            needle_step(which == "needle-portable", create_graph=which != "needle-nograph"))
    return timed_steps(step, steps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="timed ResNet9 steps per round")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of processes")
    p.add_argument("--layer-rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_process(args.one, args.steps, args.threads)))
        return
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"numpy {np.__version__}, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), {os.cpu_count()} cpus")
    print("\nforward+backward of one conv layer, batch 128 (median ms):")
    print(f"{'layer (in, out, k, stride, HxW)':34s} {'needle':>8s} {'portable':>9s} "
          f"{'pytorch':>8s} {'ratio':>6s}")
    for shape in LAYERS:
        fast = needle_layer(*shape)
        ms = median_ms({"needle": fast, "pytorch": torch_layer(*shape)}, args.layer_rounds)
        with reference_only(IM2COL):
            ms["portable"] = median_ms({"p": needle_layer(*shape)}, args.layer_rounds)["p"]
        print(f"{str(shape):34s} {ms['needle']:8.2f} {ms['portable']:9.2f} "
              f"{ms['pytorch']:8.2f} {ms['needle'] / ms['pytorch']:6.2f}")

    print(f"\nResNet9 training step, batch {BATCH}, SGD ({args.rounds} rounds of "
          f"{args.steps} steps, each framework in a fresh process):")
    extra = ["--steps", str(args.steps)] + (["--threads", str(args.threads)] if args.threads
                                            else [])
    names = ["needle", "needle-nograph", "needle-portable", "pytorch"]
    results = fresh_process_rounds(__file__, names, args.rounds, extra)
    base = float(np.median([r["ms"] for r in results["pytorch"]]))
    for which, rs in results.items():
        ms = float(np.median([r["ms"] for r in rs]))
        peak = max(r["peak_mb"] for r in rs)
        print(f"  {which:16s} {ms:8.1f} ms/step  {ms / base:5.2f}x pytorch  "
              f"step peak +{peak:.0f} MB")


if __name__ == "__main__":
    main()

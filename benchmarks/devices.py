"""One MLPResNet training step on every device needle has here, in one run: steps per second.

The step of benchmarks/mlp_resnet.py (784 inputs, hidden 100, 3 residual blocks, BatchNorm1d,
dropout 0.1, batch 100, Adam lr 0.001 with weight decay 0.001, random float32 images) on cpu
(numpy), torch:cpu, jax, and torch:cuda / cuda where present; plus the same model written in
PyTorch itself, the reference. Each device runs in a fresh process, `--rounds` times
alternating; the table gives the median step time of the best round.

    python benchmarks/devices.py
    python benchmarks/devices.py --hidden 1024 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_models  # noqa: E402
from harness import fresh_process_rounds, timed_steps  # noqa: E402

DEVICES = {"cpu": ("cpu", None), "torch:cpu": ("torch", "cpu"), "jax": ("jax", None),
           "torch:cuda": ("torch", "cuda"), "cuda": ("cuda", None)}
REFERENCE = "pytorch (cpu)"


def data(bs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.random((bs, 784), dtype=np.float32), rng.integers(0, 10, bs)


def needle_step(name: str, hidden: int, bs: int):
    """A function running one needle training step on device `name`."""
    import needle as ndl
    from needle.apps.mlp_resnet import MLPResNet

    kind, where = DEVICES[name]
    factory = getattr(ndl, kind)
    device = factory(where) if where else factory()
    np.random.seed(0)
    model = MLPResNet(784, hidden, device=device)
    opt = ndl.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    loss_fn = ndl.nn.SoftmaxLoss()
    model.train()
    X, y = data(bs)

    def step():
        xb = ndl.Tensor(X, device=device, requires_grad=False)
        yb = ndl.Tensor(y, device=device, requires_grad=False)
        loss = loss_fn(model(xb), yb)
        opt.reset_grad()
        loss.backward()
        opt.step()
        return loss.numpy()  # waits for asynchronous devices (jax, cuda)

    return step


def torch_step(hidden: int, bs: int):
    """The same step written in PyTorch on its cpu (benchmarks/mlp_resnet.py's model)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = torch_models.mlp_resnet(hidden)
    opt = torch.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    X, y = data(bs)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))

    def step():
        loss = loss_fn(model(Xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def available(name: str) -> str:
    """"" when device `name` can run here, else the reason."""
    if name == REFERENCE:
        try:
            import torch  # noqa: F401
        except ImportError as e:
            return str(e)
        return ""
    import needle as ndl

    kind, where = DEVICES[name]
    factory = getattr(ndl, kind)
    device = factory(where) if where else factory()
    return device.unavailable_reason() if not device.enabled() else ""


def one(name: str, hidden: int, bs: int, steps: int) -> None:
    """Time `steps` steps in this process and print one JSON line."""
    step = torch_step(hidden, bs) if name == REFERENCE else needle_step(name, hidden, bs)
    print(json.dumps(timed_steps(step, steps)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one(args.one, args.hidden, args.batch_size, args.steps)
    names = []
    for name in [*DEVICES, REFERENCE]:
        reason = available(name)
        if reason:
            print(f"{name}: skipped ({reason.splitlines()[0][:100]})")
        else:
            names.append(name)
    runs = fresh_process_rounds(__file__, names, args.rounds,
                                ["--hidden", str(args.hidden), "--batch-size",
                                 str(args.batch_size), "--steps", str(args.steps)])
    best = {name: min(r["ms"] for r in rounds) for name, rounds in runs.items()}
    ref = best.get(REFERENCE)
    print(f"MLPResNet step, hidden {args.hidden}, batch {args.batch_size}: median of "
          f"{args.steps} steps, best of {args.rounds} fresh processes")
    print(f"| {'device':<14} | {'ms/step':>8} | {'steps/s':>8} | {'vs cpu':>7} | "
          f"{'vs PyTorch':>10} |")
    print(f"|{'-' * 16}|{'-' * 9}:|{'-' * 9}:|{'-' * 8}:|{'-' * 11}:|")
    for name, ms in best.items():
        vs_torch = f"{ms / ref:.2f}x" if ref else "-"
        print(f"| {name:<14} | {ms:8.2f} | {1e3 / ms:8.1f} | {ms / best['cpu']:6.2f}x | "
              f"{vs_torch:>10} |")


if __name__ == "__main__":
    main()

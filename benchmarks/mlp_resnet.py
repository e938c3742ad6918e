"""One training epoch of the course's MLPResNet: needle vs PyTorch CPU vs hand-written numpy.

Setup (the issue's): 784 inputs, BatchNorm1d, dropout 0.1, 3 residual blocks, 60,000 x 784
random float32 images with random labels, batch 100, Adam(lr=0.001, weight_decay=0.001).
All three are timed in this run; each prints seconds per epoch, the ratio to PyTorch, and
the process's peak RSS after it ran.

    python benchmarks/mlp_resnet.py --hidden 100
    python benchmarks/mlp_resnet.py --hidden 1024 --examples 20000   # a shorter epoch
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

import needle as ndl
from needle.apps.mlp_resnet import MLPResNet


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def batches(n: int, bs: int):
    return [np.arange(i, min(i + bs, n)) for i in range(0, n, bs)]


def needle_epoch(X, y, hidden, bs, device) -> float:
    np.random.seed(0)
    model = MLPResNet(784, hidden, device=device)
    opt = ndl.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    loss_fn = ndl.nn.SoftmaxLoss()
    model.train()
    start = time.perf_counter()
    for idx in batches(len(X), bs):
        xb = ndl.Tensor(X[idx], device=device, requires_grad=False)
        yb = ndl.Tensor(y[idx], device=device, requires_grad=False)
        loss = loss_fn(model(xb), yb)
        opt.reset_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def torch_epoch(X, y, hidden, bs) -> float:
    import torch
    from torch import nn

    torch.manual_seed(0)

    def block(dim, h):
        return nn.Sequential(
            Residual(nn.Sequential(nn.Linear(dim, h), nn.BatchNorm1d(h), nn.ReLU(),
                                   nn.Dropout(0.1), nn.Linear(h, dim), nn.BatchNorm1d(dim))),
            nn.ReLU())

    class Residual(nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x) + x

    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(),
                          *[block(hidden, hidden // 2) for _ in range(3)],
                          nn.Linear(hidden, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    loss_fn = nn.CrossEntropyLoss()
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))
    model.train()
    start = time.perf_counter()
    for idx in batches(len(X), bs):
        loss = loss_fn(model(Xt[idx]), yt[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - start


# ----- the same epoch written by hand in numpy (forward, backward, Adam) ------------------

class NumpyMLPResNet:
    """MLPResNet with hand-derived gradients: the floor for a numpy-based framework."""

    def __init__(self, hidden: int, rng: np.random.Generator):
        def linear(i, o):
            bound = np.sqrt(6.0 / i)
            return [rng.uniform(-bound, bound, (i, o)).astype(np.float32),
                    rng.uniform(-np.sqrt(6.0 / o), np.sqrt(6.0 / o), (1, o)).astype(np.float32)]

        h2 = hidden // 2
        self.params = linear(784, hidden)
        for _ in range(3):
            self.params += linear(hidden, h2) + [np.ones(h2, np.float32), np.zeros(h2, np.float32)]
            self.params += linear(h2, hidden) + [np.ones(hidden, np.float32),
                                                 np.zeros(hidden, np.float32)]
        self.params += linear(hidden, 10)
        self.m = [np.zeros_like(p) for p in self.params]
        self.v = [np.zeros_like(p) for p in self.params]
        self.t = 0

    @staticmethod
    def bn_forward(x, w, b, eps=1e-5):
        mu = x.mean(0)
        xc = x - mu
        var = (xc * xc).mean(0)
        inv = 1.0 / np.sqrt(var + eps)
        xhat = xc * inv
        return xhat * w + b, (xhat, inv, w)

    @staticmethod
    def bn_backward(g, cache):
        xhat, inv, w = cache
        gw, gb = (g * xhat).sum(0), g.sum(0)
        gx = g * w
        gx = inv * (gx - gx.mean(0) - xhat * (gx * xhat).mean(0))
        return gx, gw, gb

    def step(self, x, y, rng):
        p = self.params
        grads = [None] * len(p)
        h = np.maximum(x @ p[0] + p[1], 0)
        caches = []
        k = 2
        for _ in range(3):
            a1 = h @ p[k] + p[k + 1]
            b1, c1 = self.bn_forward(a1, p[k + 2], p[k + 3])
            r1 = np.maximum(b1, 0)
            mask = (rng.random(r1.shape) < 0.9).astype(np.float32) / 0.9
            d1 = r1 * mask
            a2 = d1 @ p[k + 4] + p[k + 5]
            b2, c2 = self.bn_forward(a2, p[k + 6], p[k + 7])
            out = np.maximum(b2 + h, 0)
            caches.append((h, c1, r1, mask, d1, c2, out, k))
            h = out
            k += 8
        logits = h @ p[k] + p[k + 1]
        z = logits - logits.max(1, keepdims=True)
        sm = np.exp(z)
        sm /= sm.sum(1, keepdims=True)
        g = sm
        g[np.arange(len(y)), y] -= 1
        g /= len(y)
        grads[k], grads[k + 1] = h.T @ g, g.sum(0, keepdims=True)
        g = g @ p[k].T
        for h_in, c1, r1, mask, d1, c2, out, k in reversed(caches):
            g = g * (out > 0)
            g_res = g
            g, grads[k + 6], grads[k + 7] = self.bn_backward(g, c2)
            grads[k + 4], grads[k + 5] = d1.T @ g, g.sum(0, keepdims=True)
            g = (g @ p[k + 4].T) * mask * (r1 > 0)
            g, grads[k + 2], grads[k + 3] = self.bn_backward(g, c1)
            grads[k], grads[k + 1] = h_in.T @ g, g.sum(0, keepdims=True)
            g = g @ p[k].T + g_res
        g = g * (x @ p[0] + p[1] > 0)
        grads[0], grads[1] = x.T @ g, g.sum(0, keepdims=True)
        self.adam(grads)

    def adam(self, grads, lr=0.001, b1=0.9, b2=0.999, eps=1e-8, wd=0.001):
        self.t += 1
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for i, (p, g) in enumerate(zip(self.params, grads)):
            g = g + wd * p
            self.m[i] = b1 * self.m[i] + (1 - b1) * g
            self.v[i] = b2 * self.v[i] + (1 - b2) * g * g
            self.params[i] = p - lr * (self.m[i] / c1) / (np.sqrt(self.v[i] / c2) + eps)


def numpy_epoch(X, y, hidden, bs) -> float:
    rng = np.random.default_rng(0)
    model = NumpyMLPResNet(hidden, rng)
    start = time.perf_counter()
    for idx in batches(len(X), bs):
        model.step(X[idx], y[idx], rng)
    return time.perf_counter() - start


def run_one(which: str, args) -> tuple[float, float]:
    """Time one framework's epoch in this process; return (seconds, peak RSS in MB)."""
    rng = np.random.default_rng(0)
    X = rng.random((args.examples, 784), dtype=np.float32)
    y = rng.integers(0, 10, args.examples).astype(np.uint8)
    if which == "pytorch":
        secs = torch_epoch(X, y, args.hidden, args.batch_size)
    elif which == "numpy":
        secs = numpy_epoch(X, y, args.hidden, args.batch_size)
    else:
        device = getattr(ndl.backends, args.device)()
        secs = needle_epoch(X, y, args.hidden, args.batch_size, device)
    return secs, peak_rss_mb()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=100)
    parser.add_argument("--examples", type=int, default=60_000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "strict"])
    parser.add_argument("--only", choices=["pytorch", "numpy", "needle"],
                        help="time one framework in this process (used internally)")
    args = parser.parse_args()
    if args.only:
        secs, rss = run_one(args.only, args)
        print(json.dumps({"seconds": secs, "peak_rss_mb": rss}))
        return

    print(f"MLPResNet epoch: {args.examples} x 784, hidden {args.hidden}, batch "
          f"{args.batch_size}, Adam(lr=0.001, weight_decay=0.001); needle on {args.device}")
    try:
        import torch

        names = ["pytorch", "numpy", "needle"]
        label = {"pytorch": f"pytorch {torch.__version__} cpu"}
    except ImportError:
        print("  (PyTorch not installed: pip install torch to compare)")
        names, label = ["numpy", "needle"], {}
    label.update({"numpy": "numpy (hand-written)", "needle": f"needle {args.device}"})
    results = {}
    for name in names:  # one process each, so every peak RSS is its own
        cmd = [sys.executable, __file__, "--only", name, "--hidden", str(args.hidden),
               "--examples", str(args.examples), "--batch-size", str(args.batch_size),
               "--device", args.device]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results[name] = json.loads(out.strip().splitlines()[-1])
    ref = results.get("pytorch", {}).get("seconds")
    for name, r in results.items():
        ratio = f"   {r['seconds'] / ref:5.2f} x pytorch" if ref else ""
        print(f"  {label[name]:26s} {r['seconds']:7.2f} s/epoch{ratio}   "
              f"peak RSS {r['peak_rss_mb']:6.0f} MB")


if __name__ == "__main__":
    main()

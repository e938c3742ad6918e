"""One training epoch of the course's MLPResNet: needle vs PyTorch CPU vs hand-written numpy.

Setup (the issue's): 784 inputs, BatchNorm1d, dropout 0.1, 3 residual blocks, 60,000 x 784
random float32 images with random labels, batch 100, Adam(lr=0.001, weight_decay=0.001).
The frameworks alternate in rounds (one epoch of each per round), so they share the machine's
noise; the table gives the median seconds per epoch, the median of the per-round ratios to
PyTorch, and each one's peak RSS. Every epoch runs in a fresh process: in one process,
OpenBLAS's worker threads (numpy) and PyTorch's spin-wait after their calls and slow each
other down (PyTorch measured 7x slower beside numpy on this 2-core machine). The numpy column
is the limit: the same maths by hand, with Adam in place over one flat buffer in cache-sized
chunks. needle runs three times: with the course's `loss.backward()`, which records the
gradients' graph (second order), with `backward(create_graph=False)`, PyTorch's default, and
with that step compiled by `ndl.compile` (recorded at the first batch, replayed after; the
recording is part of the epoch's time).

    python benchmarks/mlp_resnet.py --hidden 100
    python benchmarks/mlp_resnet.py --hidden 1024 --examples 20000
    python benchmarks/mlp_resnet.py --device cuda   # 2 rounds of 10,000 images (the GPU kit's)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch_models
from harness import fresh_process_rounds, peak_rss_mb

import needle as ndl
from needle.apps.mlp_resnet import MLPResNet


def batches(n: int, bs: int):
    return [np.arange(i, min(i + bs, n)) for i in range(0, n, bs)]


def needle_epoch(X, y, hidden, bs, device, create_graph: bool = True,
                 compiled: bool = False) -> float:
    np.random.seed(0)
    model = MLPResNet(784, hidden, device=device)
    opt = ndl.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    loss_fn = ndl.nn.SoftmaxLoss()
    model.train()

    def step(xb, yb):
        loss = loss_fn(model(xb), yb)
        opt.reset_grad()
        loss.backward(create_graph=create_graph)  # the course's backward() records a graph
        opt.step()
        return loss

    if compiled:
        step = ndl.compile(step)
    start = time.perf_counter()
    for idx in batches(len(X), bs):
        xb = ndl.Tensor(X[idx], device=device, requires_grad=False)
        yb = ndl.Tensor(y[idx], device=device, requires_grad=False)
        loss = step(xb, yb)
    loss.numpy()  # (on a GPU: waits for the last step's work, inside the timing)
    return time.perf_counter() - start


def torch_epoch(X, y, hidden, bs) -> float:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = torch_models.mlp_resnet(hidden)
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
    """MLPResNet with hand-derived gradients and Adam in place over one flat buffer in
    cache-sized chunks: the floor for a framework built on numpy calls."""

    CHUNK = 1 << 16  # elements per Adam chunk: the chunk's six slices stay in cache

    def __init__(self, hidden: int, rng: np.random.Generator):
        h2 = hidden // 2
        shapes = [(784, hidden), (1, hidden)]
        for _ in range(3):
            shapes += [(hidden, h2), (1, h2), (h2,), (h2,), (h2, hidden), (1, hidden),
                       (hidden,), (hidden,)]
        shapes += [(hidden, 10), (1, 10)]
        total = sum(int(np.prod(s)) for s in shapes)
        self.flat = np.empty(total, np.float32)  # parameters, gradients and moments: one
        self.flat_grad = np.empty(total, np.float32)  # flat array each, viewed per tensor
        self.m, self.v = np.zeros(total, np.float32), np.zeros(total, np.float32)
        self.params, self.grads, start = [], [], 0
        for shape in shapes:
            n = int(np.prod(shape))
            self.params.append(self.flat[start:start + n].reshape(shape))
            self.grads.append(self.flat_grad[start:start + n].reshape(shape))
            start += n
        for i, shape in enumerate(shapes):  # Linear: kaiming-uniform weight and bias
            if len(shape) == 2 and shape[0] != 1:
                bound = np.sqrt(6.0 / shape[0])
                self.params[i][...] = rng.uniform(-bound, bound, shape)
                bound = np.sqrt(6.0 / shape[1])
                self.params[i + 1][...] = rng.uniform(-bound, bound, (1, shape[1]))
            elif len(shape) == 1:  # BatchNorm: weight 1, bias 0 (in that order)
                first = shapes[i - 1] != shape
                self.params[i][...] = 1.0 if first else 0.0
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
    def bn_backward(g, cache, gw, gb):
        xhat, inv, w = cache
        np.sum(g * xhat, axis=0, out=gw)
        np.sum(g, axis=0, out=gb)
        gx = g * w
        return inv * (gx - gx.mean(0) - xhat * (gx * xhat).mean(0))

    def step(self, x, y, rng):
        p, grads = self.params, self.grads
        h = h0 = np.maximum(x @ p[0] + p[1], 0)
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
        g = np.exp(z)
        g /= g.sum(1, keepdims=True)
        g[np.arange(len(y)), y] -= 1
        g /= len(y)
        np.matmul(h.T, g, out=grads[k])
        np.sum(g, axis=0, keepdims=True, out=grads[k + 1])
        g = g @ p[k].T
        for h_in, c1, r1, mask, d1, c2, out, k in reversed(caches):
            g = g * (out > 0)
            g_res = g
            g = self.bn_backward(g, c2, grads[k + 6], grads[k + 7])
            np.matmul(d1.T, g, out=grads[k + 4])
            np.sum(g, axis=0, keepdims=True, out=grads[k + 5])
            g = (g @ p[k + 4].T) * mask * (r1 > 0)
            g = self.bn_backward(g, c1, grads[k + 2], grads[k + 3])
            np.matmul(h_in.T, g, out=grads[k])
            np.sum(g, axis=0, keepdims=True, out=grads[k + 1])
            g = g @ p[k].T + g_res
        g = g * (h0 > 0)  # (the forward's activation: no second product)
        np.matmul(x.T, g, out=grads[0])
        np.sum(g, axis=0, keepdims=True, out=grads[1])
        self.adam()

    def adam(self, lr=0.001, b1=0.9, b2=0.999, eps=1e-8, wd=0.001):
        """Adam with L2 weight decay, in place over the flat buffers, chunk by chunk."""
        self.t += 1
        c1, c2 = 1 - b1**self.t, np.sqrt(1 - b2**self.t)
        tmp = np.empty(self.CHUNK, np.float32)
        tmp2 = np.empty_like(tmp)
        n = self.flat.size
        for s in range(0, n, self.CHUNK):
            e = min(n, s + self.CHUNK)
            t, u = tmp[:e - s], tmp2[:e - s]
            p, m, v = self.flat[s:e], self.m[s:e], self.v[s:e]
            np.multiply(p, wd, out=t)
            t += self.flat_grad[s:e]  # g = grad + wd p
            m *= b1
            np.multiply(t, 1 - b1, out=u)
            m += u
            v *= b2
            np.multiply(t, t, out=u)
            u *= 1 - b2
            v += u
            np.sqrt(v, out=u)
            u += eps * c2
            np.divide(m, u, out=t)
            t *= lr * c2 / c1
            p -= t


def numpy_epoch(X, y, hidden, bs) -> float:
    rng = np.random.default_rng(0)
    model = NumpyMLPResNet(hidden, rng)
    start = time.perf_counter()
    for idx in batches(len(X), bs):
        model.step(X[idx], y[idx], rng)
    return time.perf_counter() - start


def make_data(args) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.random((args.examples, 784), dtype=np.float32)
    y = rng.integers(0, 10, args.examples).astype(np.uint8)
    return X, y


def epoch_of(which: str, X, y, args) -> float:
    """Seconds of one epoch of `which` (a fresh model each time)."""
    if which == "pytorch":
        return torch_epoch(X, y, args.hidden, args.batch_size)
    if which == "numpy":
        return numpy_epoch(X, y, args.hidden, args.batch_size)
    device = getattr(ndl.backends, args.device)()
    return needle_epoch(X, y, args.hidden, args.batch_size, device,
                        create_graph=which == "needle", compiled=which == "needle-compiled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=100)
    parser.add_argument("--examples", type=int, default=None,
                        help="images per epoch (default 60,000; 10,000 with --device cuda)")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "strict"])
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds; each runs one epoch of every framework (default 5; 2 "
                        "with --device cuda, where each process also starts cupy)")
    parser.add_argument("--one", choices=["pytorch", "numpy", "needle", "needle-nograph",
                                          "needle-compiled"],
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    # on a GPU the GPU kit gives this script a minute: fewer, shorter epochs by default
    gpu = args.device == "cuda"
    args.examples = args.examples or (10_000 if gpu else 60_000)
    args.rounds = args.rounds or (2 if gpu else 5)
    why = ndl.cuda().unavailable_reason() if gpu else ""
    if why:
        raise SystemExit(f"benchmarks/mlp_resnet.py: --device cuda: {why}")
    if args.one:
        X, y = make_data(args)
        secs = epoch_of(args.one, X, y, args)
        print(json.dumps({"seconds": secs, "peak_rss_mb": peak_rss_mb()}))
        return

    print(f"MLPResNet epoch: {args.examples} x 784, hidden {args.hidden}, batch "
          f"{args.batch_size}, Adam(lr=0.001, weight_decay=0.001); needle on {args.device}; "
          f"{args.rounds} rounds, the frameworks alternating, each epoch in a fresh process")
    try:
        import torch

        names = ["pytorch", "numpy", "needle", "needle-nograph", "needle-compiled"]
        label = {"pytorch": f"pytorch {torch.__version__} cpu ({torch.get_num_threads()} thr)"}
    except ImportError:
        print("  (PyTorch not installed: pip install torch to compare)")
        names, label = ["numpy", "needle", "needle-nograph", "needle-compiled"], {}
    label.update({"numpy": "numpy limit (hand-written)", "needle": f"needle {args.device}",
                  "needle-nograph": "  backward(create_graph=False)",
                  "needle-compiled": "  that step, ndl.compile"})
    extra = ["--hidden", str(args.hidden), "--examples", str(args.examples), "--batch-size",
             str(args.batch_size), "--device", args.device]
    results = fresh_process_rounds(__file__, names, args.rounds, extra)
    ref = [r["seconds"] for r in results.get("pytorch", [])]
    print(f"  {'':30s} {'s/epoch':>8s}  {'x pytorch':>9s}  {'(min-max)':>11s}  {'peak RSS':>8s}")
    for name, rs in results.items():
        ts = [r["seconds"] for r in rs]
        ratio = ""
        if ref:
            ratios = [a / b for a, b in zip(ts, ref)]
            ratio = f"{statistics.median(ratios):9.2f}  ({min(ratios):.2f}-{max(ratios):.2f})"
        print(f"  {label[name]:30s} {statistics.median(ts):8.2f}  {ratio:>22s}  "
              f"{max(r['peak_rss_mb'] for r in rs):5.0f} MB")


if __name__ == "__main__":
    main()

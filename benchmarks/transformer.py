"""One training step of the course's decoder-only Transformer: needle cpu vs PyTorch CPU.

Transformer(E=64, hidden=128, layers=2, heads=4, dim_head=16) on (B=16, T=64): forward,
backward of the mean square of the output, one Adam step (needle also with that step compiled
by `ndl.compile`, recorded in the warm-up); each framework in a fresh process,
alternating, with the step's peak memory (peak RSS over the steps minus the RSS once model and
batch were built). The PyTorch model is written here to the same design (pre-norm attention
with LayerNorm on q, k and v, bias-free projections, causal mask, ReLU feed-forward, a
learned positional embedding); `ptb_lm.py --model transformer` reuses it.

    python benchmarks/transformer.py [--steps 20] [--rounds 3] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
from harness import fresh_process_rounds, timed_steps

import needle as ndl

E, HIDDEN, LAYERS, HEADS, DIM_HEAD = 64, 128, 2, 4, 16
B, T = 16, 64


def torch_transformer(embedding_size: int, hidden_size: int, num_layers: int, num_head: int,
                      dim_head: int, sequence_len: int):
    """The course's Transformer in PyTorch: (T, B, E) -> (T, B, E)."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            inner = num_head * dim_head
            self.prenorm_q, self.prenorm_k, self.prenorm_v = (
                nn.LayerNorm(embedding_size) for _ in range(3))
            self.q_projection = nn.Linear(embedding_size, inner, bias=False)
            self.k_projection = nn.Linear(embedding_size, inner, bias=False)
            self.v_projection = nn.Linear(embedding_size, inner, bias=False)
            self.out_projection = nn.Linear(inner, embedding_size, bias=False)

        def forward(self, x):
            b, t, _ = x.shape

            def heads(proj, norm):
                return proj(norm(x)).reshape(b, t, num_head, dim_head).transpose(1, 2)

            q = heads(self.q_projection, self.prenorm_q)
            k = heads(self.k_projection, self.prenorm_k)
            v = heads(self.v_projection, self.prenorm_v)
            out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out_projection(out.transpose(1, 2).reshape(b, t, num_head * dim_head))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Attention()
            self.linear1 = nn.Linear(embedding_size, hidden_size)
            self.linear2 = nn.Linear(hidden_size, embedding_size)
            self.norm = nn.LayerNorm(embedding_size)

        def forward(self, x):
            x = x + self.attention(x)
            return x + self.linear2(torch.relu(self.linear1(self.norm(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.positions = nn.Embedding(sequence_len, embedding_size)
            self.layers = nn.Sequential(*[Layer() for _ in range(num_layers)])

        def forward(self, x, h=None):
            t = x.shape[0]
            x = x.transpose(0, 1) + self.positions(torch.arange(t, device=x.device))
            return self.layers(x).transpose(0, 1), None

    return Model()


def needle_step(compiled: bool = False):
    np.random.seed(0)
    model = ndl.nn.Transformer(E, HIDDEN, LAYERS, num_head=HEADS, dim_head=DIM_HEAD)
    opt = ndl.optim.Adam(model.parameters(), lr=1e-3)
    X = ndl.Tensor(np.random.default_rng(0).standard_normal((T, B, E)).astype(np.float32),
                   requires_grad=False)
    model.train()

    def step():
        opt.reset_grad()
        out, _ = model(X)
        ((out * out).sum() / math.prod(out.shape)).backward()
        opt.step()
    return ndl.compile(step) if compiled else step


def torch_step():
    import torch

    torch.manual_seed(0)
    model = torch_transformer(E, HIDDEN, LAYERS, HEADS, DIM_HEAD, 2048)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    X = torch.from_numpy(np.random.default_rng(0).standard_normal((T, B, E)).astype(np.float32))
    model.train()

    def step():
        opt.zero_grad()
        out, _ = model(X)
        (out * out).mean().backward()
        opt.step()
    return step


def one_process(which: str, steps: int, threads: int | None) -> dict:
    if threads:
        import torch

        torch.set_num_threads(threads)
    step = torch_step() if which == "pytorch" else needle_step(which == "needle-compiled")
    return timed_steps(step, steps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_process(args.one, args.steps, args.threads)))
        return
    print(f"Transformer(E={E}, hidden={HIDDEN}, layers={LAYERS}, heads={HEADS}, "
          f"dim_head={DIM_HEAD}) on (B={B}, T={T}); {args.rounds} rounds of {args.steps} steps")
    extra = ["--steps", str(args.steps)] + (["--threads", str(args.threads)] if args.threads
                                            else [])
    names = ["needle", "needle-compiled", "pytorch"]
    results = fresh_process_rounds(__file__, names, args.rounds, extra)
    base = float(np.median([r["ms"] for r in results["pytorch"]]))
    for which, rs in results.items():
        ms = float(np.median([r["ms"] for r in rs]))
        print(f"  {which:15s} {ms:8.1f} ms/step  {ms / base:5.2f}x pytorch  "
              f"step peak +{max(r['peak_mb'] for r in rs):.0f} MB")


if __name__ == "__main__":
    main()

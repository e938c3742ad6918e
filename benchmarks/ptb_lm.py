"""The LSTM language model on the built-in Penn Treebank split: needle cpu vs PyTorch CPU.

1. One training epoch (embedding 100, hidden 100, 1 layer, batch 20, windows of 40 tokens,
   SGD lr 4, gradients clipped at norm 0.25), each framework in a fresh process: seconds,
   tokens per second, the ratio to PyTorch, and the peak memory of the epoch (peak RSS
   minus the RSS once model and data were built). Then where needle's time goes (cProfile,
   by function, in this process).
2. With --epochs N: both train N epochs of the same recipe (needle-train --model lstm's
   defaults) and report held-out perplexity after each.

    python benchmarks/ptb_lm.py [--epochs 5] [--threads N]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import subprocess
import sys
import time

import numpy as np
from rss import peak_rss_mb, reset_peak_rss, rss_mb

import needle as ndl
from needle.apps import simple_ml
from needle.apps.models import LanguageModel
from needle.data.ptb import batchify, builtin_ptb_corpus

EMB = HIDDEN = 100
BATCH, BPTT, LR, CLIP = 20, 40, 4.0, 0.25





def data():
    corpus = builtin_ptb_corpus()
    return (batchify(corpus.train, BATCH), batchify(corpus.test, BATCH),
            len(corpus.dictionary))


def needle_setup(vocab: int):
    np.random.seed(0)
    model = LanguageModel(EMB, vocab, HIDDEN, seq_model="lstm", seq_len=BPTT)
    opt = ndl.optim.SGD(model.parameters(), lr=LR)
    loss_fn = ndl.nn.SoftmaxLoss()

    def epoch(train):
        model.train()
        return simple_ml.run_lm_epoch(train, model, loss_fn, opt, BPTT, CLIP)

    def evaluate(test):
        model.eval()
        return simple_ml.run_lm_epoch(test, model, loss_fn, None, BPTT)
    return epoch, evaluate


def torch_setup(vocab: int):
    import torch
    from torch import nn

    torch.manual_seed(0)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, EMB)
            self.lstm = nn.LSTM(EMB, HIDDEN)
            self.linear = nn.Linear(HIDDEN, vocab)

        def forward(self, x, h=None):
            out, h = self.lstm(self.embedding(x), h)
            return self.linear(out.reshape(-1, HIDDEN)), h

    model = LM()
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    def run(batches, train):
        model.train(train)
        h, total, count = None, 0.0, 0
        with torch.set_grad_enabled(train):
            for i in range(0, batches.shape[0] - 1, BPTT):
                n = min(BPTT, batches.shape[0] - 1 - i)
                X = torch.from_numpy(batches[i:i + n].astype(np.int64))
                y = torch.from_numpy(batches[i + 1:i + 1 + n].reshape(-1).astype(np.int64))
                logits, h = model(X, h)
                h = tuple(t.detach() for t in h)
                loss = nn.functional.cross_entropy(logits, y)
                if train:
                    opt.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(model.parameters(), CLIP)
                    opt.step()
                total += float(loss.detach()) * y.numel()
                count += y.numel()
        return 0.0, total / count
    return (lambda train: run(train, True)), (lambda test: run(test, False))


def one_process(which: str, threads: int | None) -> dict:
    """One training epoch of one framework in this (fresh) process."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    train, test, vocab = data()
    epoch, _ = torch_setup(vocab) if which == "pytorch" else needle_setup(vocab)
    reset_peak_rss()
    before = rss_mb()
    start = time.perf_counter()
    epoch(train)
    seconds = time.perf_counter() - start
    tokens = (train.shape[0] - 1) * train.shape[1]
    return {"s": seconds, "tokens_per_s": tokens / seconds, "peak_mb": peak_rss_mb() - before}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=0, help="perplexity runs of N epochs (0: none)")
    p.add_argument("--rounds", type=int, default=2, help="alternating timed epochs per side")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_process(args.one, args.threads)))
        return
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    train, test, vocab = data()
    print(f"PTB built-in split: {train.size} training / {test.size} held-out tokens (batchified),"
          f" vocabulary {vocab}; torch {torch.__version__} ({torch.get_num_threads()} threads)")
    results: dict[str, list[dict]] = {"needle": [], "pytorch": []}
    for _ in range(args.rounds):
        for which in results:
            cmd = [sys.executable, __file__, "--one", which]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            results[which].append(json.loads(out.strip().splitlines()[-1]))
    base = float(np.median([r["s"] for r in results["pytorch"]]))
    print("\none training epoch of the LSTM language model (median of the rounds):")
    for which, rs in results.items():
        secs = float(np.median([r["s"] for r in rs]))
        tps = float(np.median([r["tokens_per_s"] for r in rs]))
        print(f"  {which:8s} {secs:6.2f} s  {secs / base:5.2f}x pytorch  {tps:8.0f} tokens/s  "
              f"peak +{max(r['peak_mb'] for r in rs):.0f} MB")

    print("\nwhere needle's epoch goes (cProfile, top functions by own time):")
    epoch, _ = needle_setup(vocab)
    profile = cProfile.Profile()
    profile.runcall(epoch, train)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
    print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))

    if args.epochs:
        print(f"\n{args.epochs} epochs each, held-out perplexity after each epoch:")
        for name, setup in (("pytorch", torch_setup), ("needle", needle_setup)):
            epoch, evaluate = setup(vocab)
            start, line = time.perf_counter(), []
            for _ in range(args.epochs):
                epoch(train)
                line.append(math.exp(evaluate(test)[1]))
            print(f"  {name:8s} " + " ".join(f"{v:7.1f}" for v in line)
                  + f"   ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

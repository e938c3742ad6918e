"""Language models on the built-in Penn Treebank split: needle cpu vs PyTorch CPU.

`--model lstm` (default), `rnn` or `transformer`, each with needle-train's recipe for it
(lstm: embedding and hidden 100, 1 layer, SGD lr 4, gradients clipped at norm 0.25;
transformer: width 64, 1 layer of 8 heads of 32, Adam lr 0.001 on a cosine schedule); batch
20, windows of 40 tokens.

1. One training epoch, each framework in a fresh process (needle also with its step compiled
   by `ndl.compile`: the same loop as `run_lm_epoch`, its recordings included in the epoch's
   time): seconds, tokens per second, the ratio to PyTorch, and the peak memory of the epoch
   (peak RSS minus the RSS once model and data were built). Then where needle's time goes
   (cProfile, by function, in this process).
2. With --epochs N: both train N epochs of the same recipe and report held-out perplexity
   after each; PyTorch twice, with its own initialisation and with needle's initial weights
   copied in (the course's init differs from PyTorch's: this separates init from numerics).

    python benchmarks/ptb_lm.py [--model lstm] [--epochs 5] [--threads N]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import time

import numpy as np
from harness import fresh_process_rounds, peak_rss_mb, reset_peak_rss, rss_mb

import needle as ndl
from needle.apps import simple_ml, train
from needle.apps.models import LanguageModel
from needle.data.ptb import batchify, builtin_ptb_corpus, get_batch

BATCH, BPTT = 20, 40  # the course's batch and window; the rest is needle-train's recipe


def recipe(model: str) -> dict:
    """needle-train's defaults for `model` (hidden size, optimizer, lr, schedule, clip)."""
    return {**train.SETTINGS, **train.MODELS[model]}


def lr_at(r: dict, epoch: int, epochs: int) -> float:
    if r["schedule"] == "constant":
        return r["lr"]
    return r["lr"] * 0.5 * (1 + math.cos(math.pi * epoch / epochs))


def data():
    corpus = builtin_ptb_corpus()
    return (batchify(corpus.train, BATCH), batchify(corpus.test, BATCH),
            len(corpus.dictionary))


def needle_model(vocab: int, model_name: str) -> LanguageModel:
    """needle's language model, its weights drawn after np.random.seed(0)."""
    np.random.seed(0)
    h = recipe(model_name)["hidden_dim"]
    return LanguageModel(h, vocab, h, seq_model=model_name, seq_len=BPTT)


def needle_setup(vocab: int, model_name: str = "lstm", epochs: int = 1):
    r = recipe(model_name)
    model = needle_model(vocab, model_name)
    optimizer = {"sgd": ndl.optim.SGD, "adam": ndl.optim.Adam}[r["optimizer"]]
    opt = optimizer(model.parameters(), lr=r["lr"], weight_decay=r["weight_decay"])
    loss_fn = ndl.nn.SoftmaxLoss()
    done = [0]

    def epoch(train_data):
        opt.lr = lr_at(r, done[0], epochs)
        done[0] += 1
        model.train()
        return simple_ml.run_lm_epoch(train_data, model, loss_fn, opt, BPTT, r["clip"] or None)

    def evaluate(test):
        model.eval()
        return simple_ml.run_lm_epoch(test, model, loss_fn, None, BPTT)
    return epoch, evaluate


def needle_compiled_setup(vocab: int, model_name: str = "lstm", epochs: int = 1):
    """needle_setup's training epoch with the step compiled: run_lm_epoch's loop, with the
    forward, backward, clipping and optimizer step recorded once per window length."""
    r = recipe(model_name)
    model = needle_model(vocab, model_name)
    optimizer = {"sgd": ndl.optim.SGD, "adam": ndl.optim.Adam}[r["optimizer"]]
    opt = optimizer(model.parameters(), lr=r["lr"], weight_decay=r["weight_decay"])
    loss_fn, params, clip = ndl.nn.SoftmaxLoss(), model.parameters(), r["clip"] or None
    done = [0]

    @ndl.compile
    def step(X, y, h):
        logits, h = model(X, h)
        loss = loss_fn(logits, y)
        opt.reset_grad()
        loss.backward(create_graph=False)
        if clip:
            ndl.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        return logits, loss, h

    def epoch(train_data):
        opt.lr = lr_at(r, done[0], epochs)  # read by the replayed opt.step()
        done[0] += 1
        model.train()
        xp, h, correct, total, count = ndl.cpu().xp, None, None, None, 0
        for i in range(0, train_data.shape[0] - 1, BPTT):
            X, y = get_batch(train_data, i, BPTT)
            logits, loss, h = step(X, y, h)
            n = y.shape[0]  # run_lm_epoch's bookkeeping, kept on the device
            right = xp.sum(xp.astype(xp.argmax(logits._array, axis=1)
                                     == xp.astype(y._array, xp.int64), xp.int64))
            part = xp.astype(loss._array, xp.float64) * n
            correct = right if correct is None else correct + right
            total = part if total is None else total + part
            count += n
        return int(correct) / count, float(total) / count
    return epoch, None


def copy_weights(source: LanguageModel, target) -> None:
    """needle's initial weights into the PyTorch model (same parameter order; Linear and
    recurrent weights transposed, (1, n) biases flattened)."""
    import torch

    params = list(target.parameters())
    if len(params) != len(source.parameters()):
        raise ValueError(f"{len(source.parameters())} needle parameters, {len(params)} torch ones")
    with torch.no_grad():
        for mine, theirs in zip(source.parameters(), params):
            value = mine.numpy()
            if value.shape != tuple(theirs.shape):
                value = value.T if value.T.shape == tuple(theirs.shape) else value.reshape(
                    theirs.shape)
            theirs.copy_(torch.from_numpy(np.ascontiguousarray(value)))


def torch_setup(vocab: int, model_name: str = "lstm", epochs: int = 1,
                same_init: bool = False):
    import torch
    from torch import nn
    from transformer import torch_transformer

    r = recipe(model_name)
    h = r["hidden_dim"]
    torch.manual_seed(0)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, h)
            if model_name == "transformer":  # needle's defaults: 1 layer, 8 heads of 32
                self.seq = torch_transformer(h, h, 1, 8, 32, BPTT)
            else:
                self.seq = (nn.LSTM if model_name == "lstm" else nn.RNN)(h, h)
            self.linear = nn.Linear(h, vocab)

        def forward(self, x, state=None):
            out, state = self.seq(self.embedding(x), state)
            return self.linear(out.reshape(-1, h)), state

    model = LM()
    if same_init:
        copy_weights(needle_model(vocab, model_name), model)
    optimizer = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[r["optimizer"]]
    opt = optimizer(model.parameters(), lr=r["lr"], weight_decay=r["weight_decay"])
    done = [0]

    def detach(state):
        if state is None:
            return None
        return tuple(t.detach() for t in state) if isinstance(state, tuple) else state.detach()

    def run(batches, training):
        if training:
            for group in opt.param_groups:
                group["lr"] = lr_at(r, done[0], epochs)
            done[0] += 1
        model.train(training)
        state, total, count = None, 0.0, 0
        with torch.set_grad_enabled(training):
            for i in range(0, batches.shape[0] - 1, BPTT):
                n = min(BPTT, batches.shape[0] - 1 - i)
                X = torch.from_numpy(batches[i:i + n].astype(np.int64))
                y = torch.from_numpy(batches[i + 1:i + 1 + n].reshape(-1).astype(np.int64))
                logits, state = model(X, state)
                state = detach(state)
                loss = nn.functional.cross_entropy(logits, y)
                if training:
                    opt.zero_grad()
                    loss.backward()
                    if r["clip"]:
                        nn.utils.clip_grad_norm_(model.parameters(), r["clip"])
                    opt.step()
                total += float(loss.detach()) * y.numel()
                count += y.numel()
        return 0.0, total / count
    return (lambda train_data: run(train_data, True)), (lambda test: run(test, False))


def one_process(which: str, model: str, threads: int | None) -> dict:
    """One training epoch of one framework in this (fresh) process."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    train, test, vocab = data()
    setup = {"pytorch": torch_setup, "needle": needle_setup,
             "needle-compiled": needle_compiled_setup}[which]
    epoch, _ = setup(vocab, model)
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
    p.add_argument("--model", choices=["rnn", "lstm", "transformer"], default="lstm",
                   help="the sequence model, with needle-train's recipe for it (default: lstm)")
    p.add_argument("--rounds", type=int, default=2, help="alternating timed epochs per side")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_process(args.one, args.model, args.threads)))
        return
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    train, test, vocab = data()
    print(f"PTB built-in split: {train.size} training / {test.size} held-out tokens (batchified),"
          f" vocabulary {vocab}; torch {torch.__version__} ({torch.get_num_threads()} threads)")
    extra = ["--model", args.model] + (["--threads", str(args.threads)] if args.threads else [])
    results = fresh_process_rounds(__file__, ["needle", "needle-compiled", "pytorch"],
                                   args.rounds, extra)
    base = float(np.median([r["s"] for r in results["pytorch"]]))
    print(f"\none training epoch of the {args.model} language model (median of the rounds):")
    for which, rs in results.items():
        secs = float(np.median([r["s"] for r in rs]))
        tps = float(np.median([r["tokens_per_s"] for r in rs]))
        print(f"  {which:15s} {secs:6.2f} s  {secs / base:5.2f}x pytorch  {tps:8.0f} tokens/s  "
              f"peak +{max(r['peak_mb'] for r in rs):.0f} MB")

    print("\nwhere needle's epoch goes (cProfile, top functions by own time):")
    epoch, _ = needle_setup(vocab, args.model)
    profile = cProfile.Profile()
    profile.runcall(epoch, train)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
    print("\n".join(line for line in text.getvalue().splitlines()[6:] if line.strip()))

    if args.epochs:
        print(f"\n{args.epochs} epochs each, held-out perplexity after each epoch:")
        runs = [("pytorch", lambda: torch_setup(vocab, args.model, args.epochs)),
                ("pytorch, needle's initial weights",
                 lambda: torch_setup(vocab, args.model, args.epochs, same_init=True)),
                ("needle", lambda: needle_setup(vocab, args.model, args.epochs))]
        for name, setup in runs:
            epoch, evaluate = setup()
            start, line = time.perf_counter(), []
            for _ in range(args.epochs):
                epoch(train)
                line.append(math.exp(evaluate(test)[1]))
            print(f"  {name:34s} " + " ".join(f"{v:7.1f}" for v in line)
                  + f"   ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

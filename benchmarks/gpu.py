"""Training steps on one GPU: needle `cuda` (cupy), needle `torch:cuda` and PyTorch CUDA eager.

The steps of the GPU issue's table, each framework on the same card in this one process:
MLPResNet (784 -> hidden, 3 blocks, Dropout 0.1, Adam) at hidden 1024 / batch 100 and hidden
4096 / batch 1024; the course's ResNet9 (SGD) at batch 128 and 1024; the course's Transformer
(E 64, hidden 128, 2 layers, 4 heads of 16, T 64, Adam; mean-square loss) at batch 16 and 256;
and one epoch of the LSTM language model on the built-in Penn Treebank split (needle-train's
recipe: hidden 100, SGD lr 4, clip 0.25, batch 20, windows of 40), also on needle's cpu.
Each needle step also runs compiled (`ndl.compile`, as needle-train runs its step by
default) and with its forward and backward captured as one CUDA graph (`cuda_graph=True`;
the optimizer steps outside, eagerly; where a capture fails, a warning says why and that
column is the ordinary replay). Every
step is closed by a device synchronisation; the figure is the median of `--steps` timed steps
after `--warmup` untimed ones. A row's steps are all made first and then timed in `--rounds`
rounds that take turns (each round times its share of the steps of every framework), so a
slow stretch of the shared host falls on every column alike. Ratios are to PyTorch on the
same GPU.

    python benchmarks/gpu.py [--steps 20] [--rounds 4] [--only mlp_h1024_b100,lstm_epoch]
                             [--no-cpu-epoch] [--cupy-launches]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other benchmarks' models

import torch_models as torch_models_of  # noqa: E402
from harness import interleaved_ms  # noqa: E402

import needle as ndl  # noqa: E402

E, HIDDEN, LAYERS, HEADS, DIM_HEAD, T = 64, 128, 2, 4, 16, 64
IMAGE = 32  # ResNet9's images are IMAGE x IMAGE (benchmarks/host_overhead.py makes them small)
STEPS = {  # name -> (kind, size, batch)
    "mlp_h1024_b100": ("mlp", 1024, 100),
    "mlp_h4096_b1024": ("mlp", 4096, 1024),
    "resnet9_b128": ("resnet9", None, 128),
    "resnet9_b1024": ("resnet9", None, 1024),
    "transformer_b16": ("transformer", None, 16),
    "transformer_b256": ("transformer", None, 256),
}
FRAMEWORKS = ("needle cuda", "needle cuda compiled", "needle cuda graphed", "needle torch:cuda",
              "needle torch:cuda compiled", "needle torch:cuda graphed", "pytorch cuda")
#: with --cupy-launches: needle cuda's eager step with its raw kernels launched by cupy's
#: RawKernel call (backends/launch.py's DIRECT off during the step), an A/B in the same rounds
CUPY_LAUNCHES = "needle cuda, cupy launches"


# ----- synchronisation -------------------------------------------------------------------------
def sync_of(framework: str) -> Callable[[], None]:
    """A function that waits for the framework's GPU work."""
    if framework.startswith("needle cuda"):
        import cupy

        return cupy.cuda.Device().synchronize
    import torch

    return torch.cuda.synchronize


# ----- needle steps ----------------------------------------------------------------------------
def needle_device(framework: str) -> ndl.Device:
    return ndl.cuda() if framework.startswith("needle cuda") else ndl.torch("cuda")


def needle_step(kind: str, size: int | None, batch: int, device: ndl.Device,
                compiled: bool = False, graphed: bool = False) -> Callable:
    """One eager training step, or with `compiled` the same step under ndl.compile (recorded
    at the first call, replayed after), or with `graphed` its forward and backward compiled
    with cuda_graph=True (one CUDA graph on torch:cuda) and the optimizer stepping outside."""
    rng = np.random.default_rng(0)
    ndl.manual_seed(0)
    if kind == "mlp":
        from needle.apps.mlp_resnet import MLPResNet

        model = MLPResNet(784, size, device=device)
        opt = ndl.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
        X = ndl.Tensor(rng.random((batch, 784), dtype=np.float32), device=device)
        y = ndl.Tensor(rng.integers(0, 10, batch), device=device)
        loss_of = lambda: ndl.nn.SoftmaxLoss()(model(X), y)  # noqa: E731
    elif kind == "resnet9":
        from needle.apps.models import ResNet9

        model = ResNet9(device=device)
        opt = ndl.optim.SGD(model.parameters(), lr=0.01)
        X = ndl.Tensor(rng.random((batch, 3, IMAGE, IMAGE), dtype=np.float32), device=device)
        y = ndl.Tensor(rng.integers(0, 10, batch), device=device)
        loss_of = lambda: ndl.nn.SoftmaxLoss()(model(X), y)  # noqa: E731
    else:
        model = ndl.nn.Transformer(E, HIDDEN, LAYERS, num_head=HEADS, dim_head=DIM_HEAD,
                                   device=device)
        opt = ndl.optim.Adam(model.parameters(), lr=1e-3)
        X = ndl.Tensor(rng.standard_normal((T, batch, E)).astype(np.float32), device=device)

        def loss_of():
            out, _ = model(X)
            return (out * out).sum() / math.prod(out.shape)
    X.requires_grad = False
    model.train()

    def step(*batch):  # the batch is an argument, so that a compiled step reads it afresh
        opt.reset_grad()
        loss = loss_of()
        loss.backward(create_graph=False)
        opt.step()
        return loss
    if graphed:
        def forward_backward(*batch):
            loss = loss_of()
            loss.backward(create_graph=False)
            return loss
        graph = ndl.compile(forward_backward, cuda_graph=True)

        def graphed_step():
            opt.reset_grad()
            loss = graph(X)
            opt.step()
            return loss
        return graphed_step
    if compiled:  # no cuda_graph: a step that steps an optimizer is not captured (its Python
        step = ndl.compile(step)  # would be frozen in the graph)
    return lambda: step(X)


# ----- PyTorch steps ---------------------------------------------------------------------------
def torch_models(kind: str, size: int | None):
    """The PyTorch twin of the row's needle model (benchmarks/torch_models.py)."""
    if kind == "mlp":
        return torch_models_of.mlp_resnet(size)
    if kind == "resnet9":
        return torch_models_of.resnet9()
    from transformer import torch_transformer

    return torch_transformer(E, HIDDEN, LAYERS, HEADS, DIM_HEAD, 2048)


def torch_step(kind: str, size: int | None, batch: int, device: str = "cuda",
               foreach: bool | None = None) -> Callable:
    """PyTorch's eager step; `foreach` is its optimizers' (None: PyTorch's default, the
    multi-tensor updates on a GPU and one tensor at a time on the cpu)."""
    import torch

    torch.manual_seed(0)
    dev = torch.device(device)
    model = torch_models(kind, size).to(dev)
    gen = torch.Generator(device=dev).manual_seed(0)
    if kind == "transformer":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach)
        X = torch.randn(T, batch, E, device=dev, generator=gen)

        def loss_of():
            out, _ = model(X)
            return (out * out).mean()
    else:
        shape = (batch, 784) if kind == "mlp" else (batch, 3, IMAGE, IMAGE)
        X = torch.rand(shape, device=dev, generator=gen)
        y = torch.randint(0, 10, (batch,), device=dev, generator=gen)
        opt = (torch.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001,
                                foreach=foreach)
               if kind == "mlp" else torch.optim.SGD(model.parameters(), lr=0.01,
                                                     foreach=foreach))
        loss_of = lambda: torch.nn.functional.cross_entropy(model(X), y)  # noqa: E731
    model.train()

    def step():
        opt.zero_grad()
        loss_of().backward()
        opt.step()
    return step


# ----- the LSTM language model's epoch ---------------------------------------------------------
def lm_data():
    from needle.data.ptb import batchify, builtin_ptb_corpus

    corpus = builtin_ptb_corpus()
    return batchify(corpus.train, 20), len(corpus.dictionary)


def needle_lm_epoch(device: ndl.Device, data: np.ndarray, vocab: int, sync,
                    compiled: bool = False, graphed: bool = False) -> float:
    """needle-train's LSTM epoch (the one epoch loop over LMWindows), eager, with the
    training step compiled as needle-train compiles it by default, or `graphed` as
    `needle-train --cuda-graph` runs it (forward and backward one CUDA graph per window
    length, clipping and update eager)."""
    from needle.apps.epoch_loop import LMWindows, epoch_counts, training_step
    from needle.apps.models import LanguageModel

    ndl.manual_seed(0)
    model = LanguageModel(100, vocab, 100, seq_model="lstm", seq_len=40, device=device)
    opt = ndl.optim.SGD(model.parameters(), lr=4.0)
    loss_fn = ndl.nn.SoftmaxLoss()
    model.train()
    step = (training_step(model, loss_fn, opt, create_graph=False, clip=0.25,
                          cuda_graph=graphed) if compiled or graphed else None)

    def epoch(rows: np.ndarray) -> None:
        epoch_counts(LMWindows(rows, 40, device), model, loss_fn, opt, create_graph=False,
                     clip=0.25, check_finite=True, step=step)
    epoch(data[:81])  # warm up (and record the compiled step's signatures)
    sync()
    start = time.perf_counter()
    epoch(data)
    sync()
    return time.perf_counter() - start


def torch_lm_epoch(data: np.ndarray, vocab: int) -> float:
    import torch
    from torch import nn

    torch.manual_seed(0)
    dev = torch.device("cuda")

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, 100)
            self.seq = nn.LSTM(100, 100)
            self.linear = nn.Linear(100, vocab)

        def forward(self, x, state=None):
            out, state = self.seq(self.embedding(x), state)
            return self.linear(out.reshape(-1, 100)), state

    model = LM().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=4.0)
    tokens = torch.from_numpy(data.astype(np.int64)).to(dev)

    def epoch(n_rows):
        state, total = None, torch.zeros((), device=dev)
        for i in range(0, n_rows - 1, 40):
            n = min(40, n_rows - 1 - i)
            X, y = tokens[i:i + n], tokens[i + 1:i + 1 + n].reshape(-1)
            logits, state = model(X, state)
            state = tuple(s.detach() for s in state)
            loss = nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            opt.step()
            total += loss.detach() * y.numel()
        return float(total)
    epoch(81)
    torch.cuda.synchronize()
    start = time.perf_counter()
    epoch(data.shape[0])
    torch.cuda.synchronize()
    return time.perf_counter() - start


# ----- driver ----------------------------------------------------------------------------------
def available() -> dict[str, str]:
    """framework -> why it cannot run here ("" when it can)."""
    reasons = {"needle cuda": ndl.cuda().unavailable_reason(),
               "needle torch:cuda": ndl.torch("cuda").unavailable_reason()}
    reasons["pytorch cuda"] = reasons["needle torch:cuda"]
    reasons[CUPY_LAUNCHES] = reasons["needle cuda"]
    for name in ("needle cuda", "needle torch:cuda"):
        reasons[f"{name} compiled"] = reasons[name]
    for name in ("needle cuda", "needle torch:cuda"):
        reasons[f"{name} graphed"] = reasons[name]
    return reasons


def with_cupy_launches(step: Callable) -> Callable:
    """`step` with needle's raw kernels launched by cupy's call (launch.DIRECT off)."""
    from needle.backends import launch

    def run():
        saved, launch.DIRECT = launch.DIRECT, False
        try:
            return step()
        finally:
            launch.DIRECT = saved
    return run


def make_step(name: str, framework: str) -> Callable:
    kind, size, batch = STEPS[name]
    if framework == "pytorch cuda":
        return torch_step(kind, size, batch)
    if framework == CUPY_LAUNCHES:
        return with_cupy_launches(needle_step(kind, size, batch, ndl.cuda()))
    return needle_step(kind, size, batch, needle_device(framework),
                       compiled=framework.endswith("compiled"),
                       graphed=framework.endswith("graphed"))


def run_row(name: str, frameworks: list[str], steps: int, warmup: int,
            rounds: int) -> dict[str, float | None]:
    """framework -> median ms of `name`'s step (None where it failed, with a line saying
    why): every framework's step made first, then timed in rounds that take turns."""
    made, failed = {}, {}
    for framework in frameworks:
        try:
            made[framework] = (make_step(name, framework), sync_of(framework))
        except Exception as e:
            failed[framework] = f"{type(e).__name__}: {e}"
    ms, errors = interleaved_ms(made, rounds, max(1, math.ceil(steps / rounds)), warmup=warmup)
    for framework, error in {**failed, **errors}.items():
        print(f"  {name} on {framework}: {error}", flush=True)
    return {framework: ms.get(framework) for framework in frameworks}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=4,
                   help="the frameworks take turns this many times per row (steps split "
                   "among them), so a slow stretch of the host falls on all alike")
    p.add_argument("--only", default="", help="comma-separated rows (of "
                   f"{', '.join(STEPS)}, lstm_epoch)")
    p.add_argument("--no-cpu-epoch", action="store_true",
                   help="skip the LSTM epoch on needle's cpu (the 3x target's reference)")
    p.add_argument("--cupy-launches", action="store_true",
                   help=f"add the column {CUPY_LAUNCHES!r} to the steps' table")
    args = p.parse_args()
    columns = FRAMEWORKS + ((CUPY_LAUNCHES,) if args.cupy_launches else ())
    reasons = available()
    if reasons["pytorch cuda"] and reasons["needle cuda"]:
        print(f"benchmarks/gpu.py: no GPU here: {reasons['needle cuda']}")
        return
    only = [n for n in args.only.split(",") if n] or [*STEPS, "lstm_epoch"]
    print(f"median of {args.steps} steps after {args.warmup}, each closed by a sync, in "
          f"{args.rounds} rounds taking turns; ratio to PyTorch CUDA eager on the same GPU")
    print(f"{'step':17s}" + "".join(f"{f:>28s}" for f in columns))
    for name in only:
        if name == "lstm_epoch":
            continue
        row: dict[str, Any] = dict.fromkeys(columns)
        row.update(run_row(name, [f for f in columns if not reasons[f]], args.steps,
                           args.warmup, args.rounds))
        base = row.get("pytorch cuda")
        cells = []
        for framework in columns:
            ms = row[framework]
            ratio = f" ({ms / base:4.1f}x)" if ms is not None and base else ""
            cells.append("n/a" if ms is None else f"{ms:8.2f} ms{ratio}")
        print(f"{name:17s}" + "".join(f"{c:>28s}" for c in cells), flush=True)
    if "lstm_epoch" in only:
        data, vocab = lm_data()
        epochs = {}
        for framework in FRAMEWORKS:
            if reasons[framework]:
                continue
            try:
                if framework == "pytorch cuda":
                    epochs[framework] = torch_lm_epoch(data, vocab)
                else:
                    epochs[framework] = needle_lm_epoch(
                        needle_device(framework), data, vocab, sync_of(framework),
                        compiled=framework.endswith("compiled"),
                        graphed=framework.endswith("graphed"))
            except Exception as e:
                print(f"  lstm_epoch on {framework}: {type(e).__name__}: {e}", flush=True)
        if not args.no_cpu_epoch:
            epochs["needle cpu"] = needle_lm_epoch(ndl.cpu(), data, vocab, lambda: None)
        cpu = epochs.get("needle cpu")
        print("LSTM LM epoch (s): " + ", ".join(
            f"{k} {v:.2f}" + (f" ({cpu / v:.1f}x faster than cpu)" if cpu and k != "needle cpu"
                              else "") for k, v in epochs.items()), flush=True)


if __name__ == "__main__":
    main()

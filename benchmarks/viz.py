"""How long ndl.viz.to_dot takes on large graphs (the issue asks: 10,000 nodes under a second).

Graphs: a chain of 10,000 nodes (one leaf, 9,999 ops on a (4, 4) tensor with a shared
parameter), and the training graph of the LSTM language model over 40 tokens (its loss, every
node the backward pass walks). Prints the median of `--repeat` runs, with no limit and with the
default limit (500 nodes), and the time `dot` takes to render the default-limited graph when
the graphviz package and program are installed.

    python benchmarks/viz.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import needle as ndl
from needle.apps.models import LanguageModel
from needle.autograd import find_topo_sort


def chain(n: int) -> tuple[ndl.Tensor, dict]:
    """A graph of `n` nodes: x, w and n - 2 ops alternating matmul by w and relu."""
    x = ndl.Tensor(np.full((4, 4), 0.1), dtype="float32")
    w = ndl.nn.Parameter(np.eye(4), dtype="float32")
    y = x
    for i in range(n - 2):
        y = y @ w if i % 2 == 0 else ndl.ops.relu(y)
    return y, {"x": x, "w": w}


def lstm_loss() -> tuple[ndl.Tensor, ndl.nn.Module]:
    """The loss of the LSTM language model (hidden 100, vocabulary 1000) on 40 x 20 tokens."""
    np.random.seed(0)
    model = LanguageModel(100, 1000, 100, seq_model="lstm", seq_len=40)
    tokens = ndl.Tensor(np.random.randint(0, 1000, (40, 20)), requires_grad=False)
    targets = ndl.Tensor(np.random.randint(0, 1000, 800), requires_grad=False)
    logits, _ = model(tokens)
    return ndl.nn.SoftmaxLoss()(logits, targets), model


def median_ms(root: ndl.Tensor, repeat: int, **options) -> float:
    """The median milliseconds of `repeat` calls of to_dot(root, **options)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        ndl.viz.to_dot(root, **options)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with np.errstate(all="ignore"):
        graphs = {"chain": chain(10_000), "lstm loss": lstm_loss()}
    for name, (root, params) in graphs.items():
        nodes = len(find_topo_sort([root]))
        full = median_ms(root, args.repeat, params=params, max_nodes=None)
        limited = median_ms(root, args.repeat, params=params)
        print(f"{name:10s} {nodes:6d} nodes: to_dot {full:7.1f} ms all nodes, {limited:6.1f} ms"
              f" with the default limit ({ndl.viz.MAX_NODES})")
        if shutil.which("dot"):
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                ndl.viz.draw(root, Path(tmp) / "graph.svg", params=params)
                print(f"{'':10s} draw (dot, svg, default limit): "
                      f"{time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()

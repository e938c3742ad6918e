"""The cnn main job (`needle-train --model cnn`) against PyTorch CPU, in the same run.

Both train the same net (MNISTConvNet: three Conv3x3-BN-ReLU-MaxPool2 blocks of 16, 32 and
64 channels, then one Linear) with the same recipe: the built-in 5,000 MNIST training images
with random shifts of up to 2 pixels (needle's RandomCrop, drawn from numpy in both runs),
batch 100, Adam (lr 0.01, weight decay 0.001) on a cosine schedule, and a pass over the
10,000 test images after every epoch. Prints wall time and final test accuracy of each.

    python benchmarks/mnist_cnn.py [--epochs 15] [--threads N]
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

from needle.apps import train
from needle.data import MNIST_FILES, DataLoader, MNISTDataset, builtin_mnist_dir, transforms


def needle_run(epochs: int) -> tuple[float, float]:
    """(seconds, test accuracy) of needle-train --model cnn."""
    parser = train.build_parser()
    args = parser.parse_args(["--model", "cnn", "--epochs", str(epochs), "--quiet"])
    start = time.perf_counter()
    metrics = train.train(train.setup(parser, args))
    return time.perf_counter() - start, 1 - metrics["test_err"]


def torch_run(epochs: int, lr: float = train.MODELS["cnn"]["lr"],
              weight_decay: float = 0.001) -> tuple[float, float]:
    """(seconds, test accuracy) of the same net and recipe in PyTorch."""
    import torch
    from torch import nn

    start = time.perf_counter()
    np.random.seed(0)
    torch.manual_seed(0)
    files = [builtin_mnist_dir() / name for name in MNIST_FILES]
    train_set = MNISTDataset(files[0], files[1], transforms=[transforms.RandomCrop(2)])
    test_set = MNISTDataset(files[2], files[3])
    layers, channels = [], 1
    for width in (16, 32, 64):
        layers += [nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                   nn.MaxPool2d(2)]
        channels = width
    model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * 3 * 3, 10))
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)

    def batches(dataset, size, shuffle):
        for X, y in DataLoader(dataset, size, shuffle=shuffle):  # host numpy batches
            yield (torch.from_numpy(X.numpy()).reshape(-1, 1, 28, 28),
                   torch.from_numpy(y.numpy().astype(np.int64)))

    for epoch in range(epochs):
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * epoch / epochs))
        model.train()
        for X, y in batches(train_set, 100, True):
            loss = nn.functional.cross_entropy(model(X), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for X, y in batches(test_set, 1000, False):
                correct += int((model(X).argmax(1) == y).sum())
    return time.perf_counter() - start, correct / len(test_set)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=train.MODELS["cnn"]["epochs"])
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = p.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{args.epochs} epochs, torch {torch.__version__} ({torch.get_num_threads()} "
          f"threads), {os.cpu_count()} cpus")
    results = {"pytorch": torch_run(args.epochs), "needle": needle_run(args.epochs)}
    base = results["pytorch"][0]
    for name, (secs, acc) in results.items():
        print(f"  {name:8s} {secs:7.1f} s  {secs / base:5.2f}x pytorch  "
              f"test accuracy {100 * acc:.2f}%")


if __name__ == "__main__":
    main()

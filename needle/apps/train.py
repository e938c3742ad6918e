"""`needle-train`: train the course's MLPResNet on MNIST (built in, or a full download).

    needle-train                        # built-in data: 5k training images, official 10k test
    needle-train --device strict --epochs 2 --quiet
    needle-train --checkpoint run.npz   # saved after every epoch; --resume run.npz continues
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import needle as ndl
from needle.apps.mlp_resnet import MLPResNet
from needle.data import (
    MNIST_FILES,
    DataLoader,
    MNISTDataset,
    builtin_mnist_dir,
    find_mnist_files,
    transforms,
)

DEVICES = {"cpu": ndl.cpu, "cuda": ndl.cuda, "strict": ndl.strict}
OPTIMIZERS = {"adam": ndl.optim.Adam, "sgd": ndl.optim.SGD}
# settings that must match between a checkpoint and the run that resumes it
ARCH_KEYS = ("hidden_dim", "optimizer", "batch_size", "seed", "epochs", "schedule",
             "augment")


def build_parser() -> argparse.ArgumentParser:
    """The command line of needle-train."""
    p = argparse.ArgumentParser(
        prog="needle-train",
        description="Train needle's MLPResNet on MNIST and report test accuracy.",
    )
    p.add_argument("--device", default="cpu", choices=sorted(DEVICES),
                   help="where to compute (default: cpu)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="folder with the four MNIST files (default: the built-in set)")
    p.add_argument("--epochs", type=int, default=20, help="training epochs (default: 20)")
    p.add_argument("--batch-size", type=int, default=100, help="batch size (default: 100)")
    p.add_argument("--optimizer", default="adam", choices=sorted(OPTIMIZERS))
    p.add_argument("--lr", type=float, default=0.001, help="learning rate (default: 0.001)")
    p.add_argument("--weight-decay", type=float, default=0.001,
                   help="L2 weight decay (default: 0.001)")
    p.add_argument("--hidden-dim", type=int, default=256,
                   help="width of the residual MLP (default: 256)")
    p.add_argument("--schedule", default="cosine", choices=["cosine", "constant"],
                   help="learning rate over the epochs (default: cosine decay to 0)")
    p.add_argument("--augment", type=int, default=2, metavar="PIXELS",
                   help="random shifts of up to PIXELS for training images (0: off; default 2)")
    p.add_argument("--seed", type=int, default=0, help="numpy seed for weights and shuffling")
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="save model and optimizer here after every epoch (atomic .npz)")
    p.add_argument("--resume", type=Path, default=None, help="continue from a checkpoint")
    p.add_argument("--stop-after", type=int, default=None, metavar="N",
                   help="stop after N epochs of this run (continue later with --resume)")
    p.add_argument("--quiet", action="store_true", help="print only the final summary")
    return p


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """Validate arguments (usage errors, not tracebacks); return (device, files, checkpoint)."""
    counts = {"epochs": args.epochs, "batch_size": args.batch_size,
              "hidden_dim": args.hidden_dim, "stop_after": args.stop_after}
    for name, value in counts.items():
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if not args.lr > 0:
        parser.error(f"--lr must be positive, got {args.lr}")
    if args.weight_decay < 0:
        parser.error(f"--weight-decay must be non-negative, got {args.weight_decay}")
    if args.augment < 0:
        parser.error(f"--augment must be non-negative, got {args.augment}")
    device = DEVICES[args.device]()
    if not device.enabled():
        parser.error(f"--device {args.device}: {device.unavailable_reason()}")
    try:
        files = find_mnist_files(args.data_dir or builtin_mnist_dir())
    except FileNotFoundError as e:
        parser.error(f"--data-dir: {e}")
    checkpoint = None
    if args.resume is not None:
        try:
            checkpoint = ndl.load(args.resume)
        except (OSError, ValueError) as e:
            parser.error(f"--resume: cannot read the checkpoint {args.resume}: {e}")
        saved = checkpoint.get("config", {}) if isinstance(checkpoint, dict) else {}
        for key in ARCH_KEYS:
            if saved.get(key) != getattr(args, key):
                parser.error(f"--resume: {args.resume} was trained with {key}="
                             f"{saved.get(key)!r}, this run asks for {getattr(args, key)!r}")
    return device, [files[name] for name in MNIST_FILES], checkpoint


def _rng_state() -> dict:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"keys": keys, "pos": int(pos), "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached)}


def _set_rng_state(state: dict) -> None:
    np.random.set_state(("MT19937", np.asarray(state["keys"], dtype=np.uint32),
                         int(state["pos"]), int(state["has_gauss"]),
                         float(state["cached_gaussian"])))


def run_epoch(loader, model, loss_fn, opt=None, bar=None) -> tuple[float, float]:
    """One pass (training when `opt` is given); returns (error rate, mean loss)."""
    xp = loader.device.xp
    errors = total = None  # device scalars: no host round trip per batch
    count = 0
    for i, (X, y) in enumerate(loader):
        if opt is not None:
            logits = model(X)
            loss = loss_fn(logits, y)
            opt.reset_grad()
            loss.backward(create_graph=False)
            opt.step()
        else:
            with ndl.no_grad():
                logits = model(X)
                loss = loss_fn(logits, y)
        n = X.shape[0]
        wrong = xp.sum(xp.astype(xp.argmax(logits.cached_data, axis=1)
                                 != xp.astype(y.cached_data, xp.int64), xp.int64))
        errors = wrong if errors is None else errors + wrong
        total = loss.cached_data * n if total is None else total + loss.cached_data * n
        count += n
        if bar is not None:
            bar.update(1)
            if i % 10 == 9:
                bar.set_postfix(loss=f"{float(total) / count:.4f}")
    return int(errors) / count, float(total) / count


def train(args: argparse.Namespace, device, files, checkpoint: dict | None = None) -> dict:
    """Train as `args` says (continuing `checkpoint` if given); return the last metrics."""
    np.random.seed(args.seed)
    augment = [transforms.RandomCrop(args.augment)] if args.augment else None
    train_set = MNISTDataset(files[0], files[1], transforms=augment)
    test_set = MNISTDataset(files[2], files[3])
    train_loader = DataLoader(train_set, args.batch_size, shuffle=True, device=device)
    test_loader = DataLoader(test_set, 1000, device=device)
    model = MLPResNet(784, args.hidden_dim, device=device)
    opt = OPTIMIZERS[args.optimizer](model.parameters(), lr=args.lr,
                                     weight_decay=args.weight_decay)
    loss_fn = ndl.nn.SoftmaxLoss()
    start = 0
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["optimizer"])
        _set_rng_state(checkpoint["rng"])
        start = int(checkpoint["epoch"])
    end = args.epochs if args.stop_after is None else min(args.epochs, start + args.stop_after)
    say = (lambda *a: None) if args.quiet else print
    say(f"needle-train: MLPResNet(hidden {args.hidden_dim}) on {len(train_set)} training / "
        f"{len(test_set)} test images, {args.optimizer} lr {args.lr}, device {device}")
    started = time.perf_counter()
    metrics = {"epoch": start, "model": model}
    for epoch in range(start, end):
        if args.schedule == "cosine":
            opt.lr = args.lr * 0.5 * (1 + math.cos(math.pi * epoch / args.epochs))
        model.train()
        # the bar shows on terminals only (disable=None), never with --quiet
        with tqdm(total=len(train_loader), desc=f"epoch {epoch + 1}/{args.epochs}",
                  leave=False, disable=True if args.quiet else None, file=sys.stderr) as bar:
            train_err, train_loss = run_epoch(train_loader, model, loss_fn, opt, bar)
        model.eval()
        test_err, test_loss = run_epoch(test_loader, model, loss_fn)
        metrics.update(epoch=epoch + 1, train_err=train_err, train_loss=train_loss,
                       test_err=test_err, test_loss=test_loss)
        say(f"epoch {epoch + 1:3d}  train err {train_err:.4f} loss {train_loss:.4f}  "
            f"test err {test_err:.4f} loss {test_loss:.4f}")
        if args.checkpoint is not None:
            ndl.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                      "epoch": epoch + 1, "rng": _rng_state(),
                      "config": {k: getattr(args, k) for k in ARCH_KEYS}}, args.checkpoint)
    metrics["seconds"] = time.perf_counter() - started
    return metrics


def main(argv: list[str] | None = None) -> int:
    """Entry point of `needle-train` and `python -m needle.apps.train`."""
    parser = build_parser()
    args = parser.parse_args(argv)
    device, files, checkpoint = _check_args(parser, args)
    m = train(args, device, files, checkpoint)
    if "test_err" not in m:
        print(f"needle-train: nothing to do: {args.resume} already has {m['epoch']} of "
              f"{args.epochs} epochs")
    elif m["epoch"] < args.epochs:
        print(f"stopped after epoch {m['epoch']} of {args.epochs} "
              f"(test accuracy {100 * (1 - m['test_err']):.2f}%); continue with --resume")
    else:
        print(f"final: test accuracy {100 * (1 - m['test_err']):.2f}% "
              f"(loss {m['test_loss']:.4f}), train accuracy {100 * (1 - m['train_err']):.2f}%, "
              f"{args.epochs} epochs, {m['seconds']:.1f} s training on {device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

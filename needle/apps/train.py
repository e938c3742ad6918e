"""`needle-train`: train the course's MLPResNet on MNIST (built in, or a full download).

    needle-train                        # built-in data: 5k training images, official 10k test
    needle-train --device strict --epochs 2 --quiet
    needle-train --checkpoint run.npz   # saved after every epoch; --resume run.npz continues
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import needle as ndl
from needle.apps.mlp_resnet import MLPResNet
from needle.data import MNIST_FILES, DataLoader, MNISTDataset, builtin_mnist_dir, find_mnist_files

DEVICES = {"cpu": ndl.cpu, "cuda": ndl.cuda, "strict": ndl.strict}
OPTIMIZERS = {"adam": ndl.optim.Adam, "sgd": ndl.optim.SGD}
# settings that must match between a checkpoint and the run that resumes it
ARCH_KEYS = ("hidden_dim", "optimizer", "batch_size", "seed")


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
    p.add_argument("--seed", type=int, default=0, help="numpy seed for weights and shuffling")
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="save model and optimizer here after every epoch (atomic .npz)")
    p.add_argument("--resume", type=Path, default=None, help="continue from a checkpoint")
    p.add_argument("--quiet", action="store_true", help="print only the final summary")
    return p


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """Validate arguments (usage errors, not tracebacks); return (device, data files)."""
    for name in ("epochs", "batch_size", "hidden_dim"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, "
                         f"got {getattr(args, name)}")
    if not args.lr > 0:
        parser.error(f"--lr must be positive, got {args.lr}")
    if args.weight_decay < 0:
        parser.error(f"--weight-decay must be non-negative, got {args.weight_decay}")
    device = DEVICES[args.device]()
    if not device.enabled():
        parser.error(f"--device {args.device}: {device.unavailable_reason()}")
    try:
        files = find_mnist_files(args.data_dir or builtin_mnist_dir())
    except FileNotFoundError as e:
        parser.error(f"--data-dir: {e}")
    if args.resume is not None and not args.resume.is_file():
        parser.error(f"--resume: no checkpoint at {args.resume}")
    return device, [files[name] for name in MNIST_FILES]


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


def train(args: argparse.Namespace, device, files) -> dict:
    """Train as `args` says; return the final metrics."""
    np.random.seed(args.seed)
    train_set, test_set = MNISTDataset(files[0], files[1]), MNISTDataset(files[2], files[3])
    train_loader = DataLoader(train_set, args.batch_size, shuffle=True, device=device)
    test_loader = DataLoader(test_set, 1000, device=device)
    model = MLPResNet(784, args.hidden_dim, device=device)
    opt = OPTIMIZERS[args.optimizer](model.parameters(), lr=args.lr,
                                     weight_decay=args.weight_decay)
    loss_fn = ndl.nn.SoftmaxLoss()
    start_epoch = 0
    if args.resume is not None:
        start_epoch = _resume(args, model, opt)
    say = (lambda *a: None) if args.quiet else print
    say(f"needle-train: MLPResNet(hidden {args.hidden_dim}) on {len(train_set)} training / "
        f"{len(test_set)} test images, {args.optimizer} lr {args.lr}, device {device}")
    started = time.perf_counter()
    metrics = {}
    for epoch in range(start_epoch, args.epochs):
        model.train()
        with tqdm(total=len(train_loader), desc=f"epoch {epoch + 1}/{args.epochs}",
                  leave=False, disable=args.quiet, file=sys.stderr) as bar:
            train_err, train_loss = run_epoch(train_loader, model, loss_fn, opt, bar)
        model.eval()
        test_err, test_loss = run_epoch(test_loader, model, loss_fn)
        metrics = {"epoch": epoch + 1, "train_err": train_err, "train_loss": train_loss,
                   "test_err": test_err, "test_loss": test_loss}
        say(f"epoch {epoch + 1:3d}  train err {train_err:.4f} loss {train_loss:.4f}  "
            f"test err {test_err:.4f} loss {test_loss:.4f}")
        if args.checkpoint is not None:
            ndl.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                      "epoch": epoch + 1, "rng": _rng_state(),
                      "config": {k: getattr(args, k) for k in ARCH_KEYS}}, args.checkpoint)
    metrics["seconds"] = time.perf_counter() - started
    metrics["model"] = model
    return metrics


def _resume(args: argparse.Namespace, model, opt) -> int:
    """Restore model, optimizer and RNG from `args.resume`; return the epochs already done."""
    state = ndl.load(args.resume)
    saved = state.get("config", {})
    for key in ARCH_KEYS:
        if key in saved and saved[key] != getattr(args, key):
            raise SystemExit(f"needle-train: error: --resume {args.resume} was trained with "
                             f"{key}={saved[key]!r}, this run asks for {getattr(args, key)!r}")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    _set_rng_state(state["rng"])
    return int(state["epoch"])


def main(argv: list[str] | None = None) -> int:
    """Entry point of `needle-train` and `python -m needle.apps.train`."""
    parser = build_parser()
    args = parser.parse_args(argv)
    device, files = _check_args(parser, args)
    m = train(args, device, files)
    if "test_err" not in m:
        print(f"needle-train: nothing to do, the checkpoint already has {args.epochs} epochs")
        return 0
    print(f"final: test accuracy {100 * (1 - m['test_err']):.2f}% (loss {m['test_loss']:.4f}), "
          f"train accuracy {100 * (1 - m['train_err']):.2f}%, {m['epoch']} epochs in "
          f"{m['seconds']:.1f} s on {device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

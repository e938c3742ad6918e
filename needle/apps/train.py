"""`needle-train`: train the course's MLPResNet, a conv net, ResNet9 or a language model.

    needle-train                        # MLPResNet on the built-in MNIST: 5k training images,
                                        # the official 10k test images
    needle-train --model cnn            # a conv net on the same data
    needle-train --model resnet9 --data-dir cifar-10-batches-py   # a CIFAR-10 copy of yours
    needle-train --model resnet9 --download   # fetched once into ~/.cache/needle (or --data-dir)
    needle-train --model lstm           # a word-level language model on the built-in PTB
    needle-train --device strict --epochs 2 --quiet
    needle-train --device torch:cuda    # PyTorch's GPU (or torch:cpu, torch:mps, jax)
    needle-train --checkpoint run.npz   # saved after every epoch; --resume run.npz continues

This module sets a run up and trains it epoch by epoch; the command line and settings are
`train_config`'s, the models `train_models`' registry, the data `train_data`'s, the checkpoint
format `train_checkpoint`'s, and each pass is the one epoch loop, `epoch_loop.run_epoch`.

Exit status: 0 done, 1 the loss became nan/inf or a checkpoint could not be written,
2 a usage or data error, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import needle as ndl
import needle.distributed as dist
from needle.apps import checks, curves, train_checkpoint, train_data
from needle.apps.epoch_loop import NonFiniteLoss, run_epoch, training_step
from needle.apps.train_config import (
    DEVICES,
    MODELS,
    OPTIMIZERS,
    PLACES,
    SETTINGS,
    build_parser,
    check_writable,
    resolve,
    validate,
)
from needle.apps.train_models import REGISTRY, Model
from needle.backends import Device
from needle.data import DataLoader
from needle.distributed import launch

# what other code reads from here: the settings' tables, the parser, the loop
__all__ = ["DEVICES", "MODELS", "PLACES", "SETTINGS", "Run", "TrainingStopped", "build_parser",
           "main", "run_epoch", "setup", "train"]


@dataclass
class Run:
    """Everything `train` needs, checked and built by `setup`."""

    config: dict[str, Any]
    device: Device
    train_loader: DataLoader | np.ndarray  # language models: batchified token ids
    test_loader: DataLoader | np.ndarray
    model: ndl.nn.Module
    opt: ndl.optim.Optimizer
    checkpoint: Path | None  # where to save after every epoch
    resume: Path | None
    start: int = 0  # epochs already done
    seconds: float = 0.0  # training time of those epochs
    stop_after: int | None = None
    quiet: bool = False
    distributed: bool = False  # data-parallel over MPI ranks: rank 0 prints and saves
    saved: tuple[Path, int] | None = None  # the newest checkpoint file and its epoch
    compile: bool = True  # train with the step compiled by ndl.compile (--no-compile: eager)
    cuda_graph: bool = False  # its forward and backward captured as CUDA graphs (GPU default)
    step: Any = None  # that compiled step, made at the first training pass
    log: curves.EpochLog | None = None  # --log-csv and --plot

    @property
    def entry(self) -> Model:
        """The registry's entry of the trained model."""
        return REGISTRY[self.config["model"]]


def _cuda_graph(parser: argparse.ArgumentParser, args: argparse.Namespace,
                device: Device) -> bool:
    """Whether the step's forward and backward are captured as CUDA graphs: --cuda-graph
    (a usage error where none can be), --no-cuda-graph, or by default wherever one can be
    (a GPU device, the step compiled, not --distributed)."""
    from needle.compiled.cuda_graph import unavailable_reason

    if args.cuda_graph:
        _check_cuda_graph(parser, args, device)
        return True
    if args.cuda_graph is None:
        return not (args.no_compile or args.distributed or unavailable_reason(device))
    return False


def _check_cuda_graph(parser: argparse.ArgumentParser, args: argparse.Namespace,
                      device: Device) -> None:
    """Usage errors for --cuda-graph where no graph can be captured."""
    from needle.compiled.cuda_graph import unavailable_reason

    if args.no_compile:
        parser.error("--cuda-graph captures the compiled step: it cannot go with --no-compile")
    if args.distributed:
        parser.error("--cuda-graph is not supported with --distributed")
    why = unavailable_reason(device)
    if why:
        parser.error(f"--cuda-graph needs a GPU device (--device cuda or torch:cuda): {why}")


def setup(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Run:
    """Check the arguments and build the run; every user mistake is a usage error (exit 2)."""
    stored = train_checkpoint.read(parser, args.resume) if args.resume is not None else None
    config = resolve(parser, args, stored)
    validate(parser, config, args.stop_after, args.distributed)
    curves.check_arguments(parser, args)
    start = stored["epoch"] if stored else 0
    if config["epochs"] < start:
        parser.error(f"--epochs {config['epochs']}: {args.resume} already has {start} epochs")
    checkpoint = args.checkpoint if args.checkpoint is not None else args.resume
    checks.distinct_files(parser, [("--checkpoint", args.checkpoint), ("--resume", args.resume),
                                   ("--log-csv", args.log_csv), ("--plot", args.plot)])
    if args.stop_after is not None and checkpoint is None:
        parser.error("--stop-after needs --checkpoint FILE: without one nothing is saved to "
                     "continue from")
    if checkpoint is not None:
        check_writable(parser, "--checkpoint" if args.checkpoint else "--resume", checkpoint)
    device = DEVICES[config["device"]]()
    if not device.enabled():
        hint = (f" ({args.resume} ran there; pass --device cpu to continue on the cpu)"
                if stored and args.device is None else "")
        parser.error(f"--device {config['device']}: {device.unavailable_reason()}{hint}")
    cuda_graph = _cuda_graph(parser, args, device)
    entry = REGISTRY[config["model"]]
    data_config = config
    if args.download:  # the folder fetched into --data-dir (or the cache) is read this time
        data_config = {**config, "data_dir": _download(parser, entry, config, args.quiet)}
    training, test, vocab = _datasets(parser, data_config, device)
    if args.distributed:
        training, test = _shard(parser, config, training, test)
    # (the folder --download fetched into is saved: `--resume FILE` alone reads it again)
    run = Run(data_config, device, training, test, *_model(config, device, vocab), checkpoint,
              args.resume, stop_after=args.stop_after, quiet=args.quiet,
              compile=not args.no_compile, cuda_graph=cuda_graph)
    if stored is not None:
        train_checkpoint.restore(parser, args.resume, stored, run.model, run.opt, device,
                                 config["device"])
        run.start, run.seconds, run.saved = start, stored["seconds"], (args.resume, start)
    if not (args.distributed and dist.rank() != 0):  # under --distributed rank 0 alone writes
        run.log = curves.EpochLog.from_args(
            parser, args, language_model=entry.kind.language_model, start=start,
            seconds=stored["seconds"] if stored else 0.0,
            title=f"{entry.display(config)} on {entry.data.name}, device {config['device']}")
    if args.distributed:  # every rank starts from rank 0's weights and buffers
        run.opt, run.distributed = dist.distributed_optimizer(run.opt, module=run.model), True
    return run


def _download(parser: argparse.ArgumentParser, entry: Model, cfg: dict[str, Any],
              quiet: bool) -> str:
    """--download: the folder the model's data set was fetched into."""
    if entry.data.download is None:
        offers = "; ".join(
            f"{m.data.name} for --model {name}" for name, m in REGISTRY.items() if m.data.download)
        parser.error(f"--download fetches {offers}; {entry.data.name} is built in")
    return train_data.download(parser, entry.data, cfg, quiet)


def _datasets(parser: argparse.ArgumentParser, cfg: dict[str, Any], device: Device) -> tuple:
    """The model's training and test data, and the vocabulary size (None for images)."""
    return REGISTRY[cfg["model"]].data.read(parser, cfg, device)


def _shard(parser: argparse.ArgumentParser, cfg: dict[str, Any], train: DataLoader,
           test: DataLoader) -> tuple[DataLoader, DataLoader]:
    """This rank's share of the data under --distributed (image models)."""
    problem = launch.check_batch_size(cfg["batch_size"])
    if problem:
        parser.error(problem)
    return launch.shard_loaders(train, test)


def _model(cfg: dict[str, Any], device: Device,
           vocab: int | None = None) -> tuple[ndl.nn.Module, ndl.optim.Optimizer]:
    """A fresh model (weights drawn after seeding numpy and every device's generator) and its
    optimizer."""
    ndl.manual_seed(cfg["seed"])
    model = REGISTRY[cfg["model"]].build(cfg, device, vocab)
    momentum = {"momentum": cfg["momentum"]} if cfg["optimizer"] == "sgd" else {}
    opt = OPTIMIZERS[cfg["optimizer"]](model.parameters(), lr=cfg["lr"],
                                       weight_decay=cfg["weight_decay"], **momentum)
    return model, opt


class TrainingStopped(RuntimeError):
    """The run cannot go on (a nan/inf loss, a checkpoint that cannot be written): exit 1."""


def _lr_at(cfg: dict[str, Any], epoch: int) -> float:
    """The learning rate of `epoch` (from 0): cosine decay from lr to 0 over all the epochs."""
    if cfg["schedule"] == "constant":
        return cfg["lr"]
    return cfg["lr"] * 0.5 * (1 + math.cos(math.pi * epoch / cfg["epochs"]))


def train(run: Run, progress: dict[str, int] | None = None) -> dict[str, Any]:
    """Train `run` from `run.start` to its end (or `stop_after`); return the last metrics.

    `progress["epoch"]` is the epoch under way, for the message after a Ctrl-C.
    """
    cfg, progress, entry = run.config, {} if progress is None else progress, run.entry
    end = cfg["epochs"] if run.stop_after is None else min(cfg["epochs"],
                                                           run.start + run.stop_after)
    say = (lambda *a: None) if run.quiet else print
    say(f"needle-train: {entry.display(cfg)} on {entry.data.name}, "
        f"{entry.kind.sizes(run.train_loader, run.test_loader)}, {cfg['optimizer']} lr "
        f"{cfg['lr']}, device {run.device}"
        + (f", {dist.world_size()} MPI ranks" if run.distributed else "")
        + (f", resuming {run.resume} after epoch {run.start}" if run.resume else ""))
    started = time.perf_counter()
    metrics: dict[str, Any] = {"epoch": run.start, "seconds": run.seconds}
    # numpy's overflow warnings are noise: a nan/inf loss stops the run with its own message
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for epoch in range(run.start + 1, end + 1):
            progress["epoch"] = epoch
            metrics.update(_train_epoch(run, epoch), epoch=epoch,
                           seconds=run.seconds + time.perf_counter() - started)
            say(entry.kind.epoch_line(epoch, metrics))
            if run.log is not None:
                _write_log(run, epoch, metrics)
            if run.checkpoint is not None:
                _save(run, epoch, metrics["seconds"])
    if run.log is not None and not run.log.plot_every_epoch:
        _write_log(run, end, None)
    return metrics


def _write_log(run: Run, epoch: int, metrics: dict[str, Any] | None) -> None:
    """Record `epoch` in --log-csv (and --plot), or with no metrics draw the figure."""
    try:
        if metrics is None:
            run.log.draw()
        else:
            run.log.record(epoch, metrics, run.opt.lr)
    except OSError as e:
        raise TrainingStopped(f"cannot write {e.filename or 'the log or figure'} after epoch "
                              f"{epoch} ({e.strerror or e}); {_last_checkpoint(run)}") from None


def _train_epoch(run: Run, epoch: int) -> dict[str, float]:
    """Epoch `epoch` (from 1): a training pass at the scheduled lr, then a test pass."""
    run.opt.lr = _lr_at(run.config, epoch - 1)
    run.model.train()
    batches = run.entry.kind.batches(run.train_loader, run.device)
    # the bar shows on terminals only (disable=None), never with --quiet
    with tqdm(total=len(batches), desc=f"epoch {epoch}/{run.config['epochs']}",
              leave=False, disable=True if run.quiet else None, file=sys.stderr) as bar:
        train_err, train_loss = _checked_epoch(run, epoch, batches, "training", bar)
    if run.distributed:  # BatchNorm's running statistics: their mean over the ranks
        dist.average_buffers(run.model)
    run.model.eval()
    batches = run.entry.kind.batches(run.test_loader, run.device)
    test_err, test_loss = _checked_epoch(run, epoch, batches, "test", None)
    return {"train_err": train_err, "train_loss": train_loss, "test_err": test_err,
            "test_loss": test_loss}


def _checked_epoch(run: Run, epoch: int, batches, phase: str, bar) -> tuple[float, float]:
    """One training or test pass over `batches`: (error rate, mean loss) over every rank's
    share; a nan/inf loss stops the run (TrainingStopped)."""
    opt = run.opt if phase == "training" else None
    clip = run.config["clip"] or None
    if opt is not None and run.compile and run.step is None:
        run.step = training_step(run.model, ndl.nn.SoftmaxLoss(), opt, create_graph=False,
                                 clip=clip, cuda_graph=run.cuda_graph)
    try:
        err, loss = run_epoch(batches, run.model, ndl.nn.SoftmaxLoss(), opt, create_graph=False,
                              clip=clip, bar=bar, check_finite=True,
                              step=run.step if run.compile else None)
    except NonFiniteLoss as e:
        raise TrainingStopped(f"the {phase} loss became {e.loss} in epoch {epoch}, batch "
                              f"{e.batch}; stopped ({_last_checkpoint(run)}); a smaller --lr "
                              "may help") from None
    return launch.reduce_metrics(err, loss, batches) if run.distributed else (err, loss)


def _save(run: Run, epoch: int, seconds: float) -> None:
    """Write the checkpoint after `epoch` (train_checkpoint's format).

    Under --distributed rank 0 alone writes (the ranks agree: buffers were just averaged)."""
    if not (run.distributed and dist.rank() != 0):
        try:
            train_checkpoint.write(run.checkpoint, run.model, run.opt, epoch, run.device,
                                   run.config, seconds)
        except OSError as e:
            raise TrainingStopped(f"cannot write the checkpoint {run.checkpoint} after epoch "
                                  f"{epoch} ({e}); {_last_checkpoint(run)}") from None
    run.saved = (run.checkpoint, epoch)


def _last_checkpoint(run: Run) -> str:
    """Where the run can be continued from, in words."""
    if run.saved is not None:
        path, epoch = run.saved
        return f"the last checkpoint is {path} (epoch {epoch}): continue with --resume {path}"
    if run.checkpoint is None:
        return "nothing was saved: no --checkpoint"
    return f"no checkpoint written to {run.checkpoint} yet"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _summary(run: Run, m: dict[str, Any]) -> str:
    """The last line: the final result, where a stopped run continues, or nothing to do."""
    total = run.config["epochs"]
    if "test_err" not in m:
        unplotted = run.log is not None and run.log.plot_path is not None and not run.log.rows
        return (f"needle-train: nothing to do: {run.resume} already has {m['epoch']} of "
                f"{_plural(total, 'epoch')} (a larger --epochs extends the run)"
                + (f"; no epochs to draw to {run.log.plot_path} (needle-plot draws a "
                   "--log-csv log)" if unplotted else ""))
    result, train_result = run.entry.kind.results(m)
    if m["epoch"] < total:
        return (f"stopped after epoch {m['epoch']} of {total} ({result}); continue with "
                f"--resume {run.checkpoint}")
    return (f"final: {result} (loss {m['test_loss']:.4f}), {train_result}, "
            f"{_plural(total, 'epoch')}, {m['seconds']:.1f} s training on {run.device}")


def _fail(message: str, status: int) -> int:
    print(f"needle-train: {message}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    """Entry point of `needle-train` and `python -m needle.apps.train`: the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose and not args.distributed:
        parser.error("--verbose applies to --distributed runs (every rank prints); a single "
                     "process prints anyway")
    if args.distributed:  # one exit status for every rank; rank 0 alone prints
        try:
            dist.init()
        except RuntimeError as e:  # no mpi4py or no MPI library
            parser.error(f"--distributed: {e}")
        return launch.run_job(lambda: _main(parser, args), verbose=args.verbose)
    return _main(parser, args)


def _main(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Set up and train; the exit status."""
    run, progress = None, {}
    try:
        run = setup(parser, args)
        metrics = train(run, progress)
    except KeyboardInterrupt:
        if run is None:
            return _fail("interrupted before training", 130)
        where = f"in epoch {progress['epoch']}" if progress else "before the first epoch"
        return _fail(f"interrupted {where}; {_last_checkpoint(run)}", 130)
    except TrainingStopped as e:
        return _fail(str(e), 1)
    except MemoryError as e:  # (a model or batch too big for this machine: --hidden-dim 1e8)
        where = "building the run" if run is None else "training"
        return _fail(f"out of memory {where} ({e}); try a smaller --hidden-dim or "
                     f"--batch-size", 1)
    print(_summary(run, metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

Exit status: 0 done, 1 the loss became nan/inf or a checkpoint could not be written,
2 a usage or data error, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

import needle as ndl
import needle.distributed as dist
from needle.apps import checks, curves
from needle.apps.mlp_resnet import MLPResNet, NonFiniteLoss, run_epoch
from needle.apps.mnist_cnn import MNISTConvNet
from needle.apps.models import LanguageModel, ResNet9
from needle.apps.simple_ml import run_lm_epoch
from needle.backends import Device
from needle.data import (
    MNIST_FILES,
    CIFAR10Dataset,
    DataLoader,
    Dataset,
    MNISTDataset,
    builtin_mnist_dir,
    find_mnist_files,
    transforms,
)
from needle.data.download import DownloadError, cifar10_folder
from needle.data.ptb import Corpus, batchify, builtin_ptb_corpus
from needle.distributed import launch

DEVICES = ndl.backends.placements()  # "cpu", "cuda", ..., "torch:cuda": from the device table
OPTIMIZERS = {"adam": ndl.optim.Adam, "sgd": ndl.optim.SGD}
SCHEDULES = ("cosine", "constant")
# the settings of a run: stored in its checkpoints; a resumed run must agree (but --epochs)
SETTINGS: dict[str, Any] = {
    "model": "mlp", "epochs": 20, "batch_size": 100, "optimizer": "adam", "lr": 0.001,
    "weight_decay": 0.001, "momentum": 0.0, "hidden_dim": 256, "schedule": "cosine",
    "augment": 2, "seed": 0, "clip": 0.0,
}
# each model's own defaults, over SETTINGS; the data set a model trains on
MODELS: dict[str, dict[str, Any]] = {
    "mlp": {},
    # lr 0.01: the course's conv init draws weights sqrt(6) times wider than PyTorch's, and
    # with BatchNorm after each conv that only shrinks Adam's relative steps; on the built-in
    # set seeds 0, 1, 2 reach 98.86%, 98.89%, 98.75% (lr 0.003: 98.63%, 98.67%, 98.53%)
    "cnn": {"epochs": 15, "lr": 0.01},
    "resnet9": {"epochs": 10, "augment": 4},
    # the course's language-model recipe (train_ptb): SGD lr 4 at a constant rate, batch 20,
    # windows of 40 tokens; plus gradient clipping at norm 0.25, without which it diverges
    "rnn": {"epochs": 5, "batch_size": 20, "optimizer": "sgd", "lr": 4.0, "weight_decay": 0.0,
            "hidden_dim": 100, "schedule": "constant", "augment": 0, "clip": 0.25},
    "lstm": {"epochs": 5, "batch_size": 20, "optimizer": "sgd", "lr": 4.0, "weight_decay": 0.0,
             "hidden_dim": 100, "schedule": "constant", "augment": 0, "clip": 0.25},
    # the decoder-only transformer (embedding = feed-forward width = hidden_dim, 8 heads of
    # 32, one layer) trains with Adam instead
    "transformer": {"epochs": 5, "batch_size": 20, "optimizer": "adam", "lr": 0.001,
                    "weight_decay": 0.0, "hidden_dim": 64, "schedule": "cosine", "augment": 0,
                    "clip": 0.25},
}
LANGUAGE_MODELS = ("rnn", "lstm", "transformer")
LM_SEQ_LEN = 40  # tokens per window (the course's bptt)
DATASETS = {"mlp": "MNIST", "cnn": "MNIST", "resnet9": "CIFAR-10", "rnn": "PTB", "lstm": "PTB",
            "transformer": "PTB"}
# where a run computes and finds its data: stored too, but a resumed run may change them
PLACES: dict[str, Any] = {"device": "cpu", "data_dir": None}


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _defaults_text(key: str, unused: tuple[str, ...] = ()) -> str:
    """A setting's default for every model (but the `unused` ones) where they differ, for
    --help: "100 for mlp, cnn and resnet9; 20 for rnn, lstm and transformer"."""
    by_value: dict[Any, list[str]] = {}
    for model, own in MODELS.items():
        if model not in unused:
            by_value.setdefault(own.get(key, SETTINGS[key]), []).append(model)
    if len(by_value) == 1:
        return str(next(iter(by_value)))
    return "; ".join(f"{value} for {_and(models)}" for value, models in by_value.items())


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def build_parser() -> argparse.ArgumentParser:
    """The command line of needle-train; settings default to None (filled in by `setup`)."""
    d = {**SETTINGS, **PLACES}
    p = argparse.ArgumentParser(
        prog="needle-train",
        description="Train one of the course's models and report its test accuracy or "
                    "held-out perplexity: mlp (MLPResNet, the default) or cnn (a conv net) on "
                    "MNIST, resnet9 (ResNet9) on CIFAR-10, or the LanguageModel with rnn, "
                    "lstm or transformer on Penn Treebank. Defaults differ by model: each "
                    "option lists every model's.",
        epilog="With --resume, settings left out are the stored run's; settings given must "
               "agree with it, except --epochs (which may extend the run), --device and "
               "--data-dir. Exit status: 0 done, 1 nan/inf loss or a failed checkpoint "
               "write, 2 usage or data error, 130 interrupted.")
    add = p.add_argument
    add("--model", choices=sorted(MODELS),
        help="mlp: the course's MLPResNet on MNIST; cnn: conv-BN-ReLU-pool blocks on MNIST; "
             "resnet9: the course's ResNet9 on CIFAR-10, which needs --data-dir; rnn, lstm, "
             "transformer: the course's LanguageModel on the built-in Penn Treebank split "
             f"(default: {d['model']})")
    add("--device", choices=sorted(DEVICES), help=f"where to compute (default: {d['device']})")
    add("--data-dir", type=Path,
        help="MNIST: folder with the four MNIST files, gzipped or not (default: the built-in "
             "set); CIFAR-10: the cifar-10-batches-py folder of the python version (required "
             "but with --download, where it is the folder to download into); "
             "PTB: a folder with train.txt and test.txt (default: the built-in split)")
    add("--download", action="store_true",
        help="CIFAR-10: fetch the python version (md5-checked) into --data-dir, else "
             "~/.cache/needle, unless it is there already (default: off)")
    add("--epochs", type=int, help="training epochs in all (default: "
                                   f"{_defaults_text('epochs')})")
    add("--batch-size", type=int, help=f"batch size (default: {_defaults_text('batch_size')})")
    add("--optimizer", choices=sorted(OPTIMIZERS),
        help=f"the update rule (default: {_defaults_text('optimizer')})")
    add("--lr", type=float, help=f"learning rate, the peak of the schedule "
                                 f"(default: {_defaults_text('lr')})")
    add("--weight-decay", type=float,
        help=f"L2 weight decay (default: {_defaults_text('weight_decay')})")
    add("--momentum", type=float, help="SGD momentum in [0, 1), the course's u = m u + (1-m) g;"
                                       f" sgd only (default: {d['momentum']})")
    add("--hidden-dim", type=int, help="width of the residual MLP, or the embedding and hidden"
                                       " size of the language models; not used by cnn and "
                                       "resnet9 (default: "
                                       f"{_defaults_text('hidden_dim', ('cnn', 'resnet9'))})")
    add("--clip", type=float, help="clip the gradients' global norm to this, 0: off (default: "
                                   f"{_defaults_text('clip')})")
    add("--schedule", choices=SCHEDULES,
        help=f"learning rate over the epochs: cosine decay to 0 or constant "
             f"(default: {_defaults_text('schedule')})")
    add("--augment", type=int, metavar="PIXELS",
        help="random shifts of up to PIXELS for training images (CIFAR-10: and random "
             "horizontal flips), 0: off; image models only (default: "
             f"{_defaults_text('augment', LANGUAGE_MODELS)})")
    add("--seed", type=int, help=f"numpy seed for weights, shuffling, dropout and shifts "
                                 f"(default: {d['seed']})")
    add("--checkpoint", type=Path, metavar="FILE",
        help="save the run to FILE (.npz, atomically) after every epoch "
             "(default: none; with --resume, the resumed file)")
    add("--resume", type=Path, metavar="FILE",
        help="continue the run saved in FILE, with its settings (default: none)")
    add("--stop-after", type=int, metavar="N",
        help="stop after N epochs of this invocation; needs a checkpoint (default: never)")
    add("--quiet", action="store_true", help="print only the final summary (default: off)")
    curves.add_arguments(p)
    add("--distributed", action="store_true",
        help="data-parallel over the ranks of `mpiexec -n N needle-train --distributed`, "
             "image models; --batch-size is the global batch (default: off)")
    add("--verbose", action="store_true",
        help="with --distributed, let every rank print, not only rank 0 (default: off)")
    return p


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
    log: curves.EpochLog | None = None  # --log-csv and --plot


def setup(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Run:
    """Check the arguments and build the run; every user mistake is a usage error (exit 2)."""
    stored = _read_checkpoint(parser, args.resume) if args.resume is not None else None
    config = _resolve(parser, args, stored)
    _validate(parser, config, args.stop_after)
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
        _check_writable(parser, "--checkpoint" if args.checkpoint else "--resume", checkpoint)
    device = DEVICES[config["device"]]()
    if not device.enabled():
        hint = (f" ({args.resume} ran there; pass --device cpu to continue on the cpu)"
                if stored and args.device is None else "")
        parser.error(f"--device {config['device']}: {device.unavailable_reason()}{hint}")
    data_config = config
    if args.download:  # the folder fetched into --data-dir (or the cache) is read this time
        data_config = {**config, "data_dir": _download_cifar10(parser, config, args.quiet)}
    if config["model"] in LANGUAGE_MODELS:
        train_data, test_data, vocab = _ptb(parser, config)
    else:
        train_set, test_set = _datasets(parser, data_config)
        train_data = DataLoader(train_set, config["batch_size"], shuffle=True, device=device)
        test_data, vocab = DataLoader(test_set, 1000, device=device), None
    if args.distributed:
        train_data, test_data = _shard(parser, config, train_data, test_data)
    run = Run(config, device, train_data, test_data, *_model(config, device, vocab),
              checkpoint, args.resume, stop_after=args.stop_after, quiet=args.quiet)
    if stored is not None:
        try:
            run.model.load_state_dict(stored["model"])
            run.opt.load_state_dict(stored["optimizer"])
            _set_rng_state(stored["rng"], device)
        except (ValueError, TypeError, KeyError) as e:
            parser.error(f"--resume: {args.resume} does not fit this model: {e}")
        run.start, run.seconds, run.saved = start, stored["seconds"], (args.resume, start)
    if not (args.distributed and dist.rank() != 0):  # under --distributed rank 0 alone writes
        run.log = curves.EpochLog.from_args(
            parser, args, language_model=config["model"] in LANGUAGE_MODELS, start=start,
            seconds=stored["seconds"] if stored else 0.0,
            title=f"{_model_name(config)} on {DATASETS[config['model']]}, "
                  f"device {config['device']}")
    if args.distributed:  # every rank starts from rank 0's weights and buffers
        run.opt, run.distributed = dist.distributed_optimizer(run.opt, module=run.model), True
    return run


def _shard(parser: argparse.ArgumentParser, cfg: dict[str, Any], train: DataLoader,
           test: DataLoader) -> tuple[DataLoader, DataLoader]:
    """This rank's share of the data under --distributed (image models only)."""
    if cfg["model"] in LANGUAGE_MODELS:
        parser.error(f"--distributed trains image models, not {cfg['model']}")
    problem = launch.check_batch_size(cfg["batch_size"])
    if problem:
        parser.error(problem)
    return launch.shard_loaders(train, test)


def _model(cfg: dict[str, Any], device: Device,
           vocab: int | None = None) -> tuple[ndl.nn.Module, ndl.optim.Optimizer]:
    """A fresh model (weights drawn after seeding numpy and every device's generator) and its
    optimizer."""
    ndl.manual_seed(cfg["seed"])
    if cfg["model"] in LANGUAGE_MODELS:
        h = cfg["hidden_dim"]
        model = LanguageModel(h, vocab, h, seq_model=cfg["model"], seq_len=LM_SEQ_LEN,
                              device=device)
    elif cfg["model"] == "cnn":
        model = MNISTConvNet(device=device)
    elif cfg["model"] == "resnet9":
        model = ResNet9(device=device)
    else:
        model = MLPResNet(784, cfg["hidden_dim"], device=device)
    momentum = {"momentum": cfg["momentum"]} if cfg["optimizer"] == "sgd" else {}
    opt = OPTIMIZERS[cfg["optimizer"]](model.parameters(), lr=cfg["lr"],
                                       weight_decay=cfg["weight_decay"], **momentum)
    return model, opt


def _read_checkpoint(parser: argparse.ArgumentParser, path: Path) -> dict:
    """The checkpoint at `path`, checked to be one that needle-train wrote."""
    try:
        ck = ndl.load(path)
    except (OSError, ValueError) as e:
        parser.error(f"--resume: cannot read the checkpoint {path}: {e}")
    kinds = {"model": dict, "optimizer": dict, "rng": dict, "config": dict, "epoch": int,
             "seconds": float}
    if not isinstance(ck, dict):
        parser.error(f"--resume: {path} is not a needle-train checkpoint")
    if isinstance(ck.get("config"), dict):
        ck["config"].setdefault("model", "mlp")  # written before --model existed
        ck["config"].setdefault("clip", 0.0)  # and before --clip
    bad = [k for k, kind in kinds.items() if type(ck.get(k)) is not kind]
    if not bad:
        expected = {**{k: (type(v),) for k, v in SETTINGS.items()}, "device": (str,),
                    "data_dir": (str, type(None))}
        bad = [f"config[{k!r}]" for k, types in expected.items()
               if type(ck["config"].get(k, ...)) not in types] or checks.checkpoint_fields(ck)
    if bad:
        parser.error(f"--resume: {path} is not a needle-train checkpoint of this version "
                     f"(missing or malformed: {', '.join(bad)})")
    return ck


def _resolve(parser: argparse.ArgumentParser, args: argparse.Namespace,
             stored: dict | None) -> dict[str, Any]:
    """Every setting: given on the command line, else stored in the checkpoint, else default."""
    config, clashes = {}, []
    saved = stored["config"] if stored else {}
    model = args.model or saved.get("model", SETTINGS["model"])
    if model not in MODELS:  # only a stored value can get here
        parser.error(f"--model: unknown {model!r}, choose from {sorted(MODELS)}")
    if args.hidden_dim is not None and model not in ("mlp", *LANGUAGE_MODELS):
        parser.error(f"--hidden-dim applies to --model mlp, rnn, lstm and transformer only, "
                     f"not {model}")
    if args.augment and model in LANGUAGE_MODELS:
        parser.error(f"--augment applies to image models, not {model}")
    for key, default in {**SETTINGS, **MODELS[model], **PLACES}.items():
        given = getattr(args, key)
        if isinstance(given, Path):
            given = str(given.resolve())
        if given is None:
            config[key] = saved.get(key, default)
        else:
            config[key] = given
            if stored and key in SETTINGS and key != "epochs" and given != saved[key]:
                clashes.append(f"{_flag(key)} {saved[key]} (this run asks for {given})")
    if clashes:
        them = "them" if len(clashes) > 1 else "it"
        parser.error(f"--resume: {args.resume} was trained with {', '.join(clashes)}; leave "
                     f"{them} out to continue with the stored settings")
    return config


def _validate(parser: argparse.ArgumentParser, cfg: dict[str, Any],
              stop_after: int | None) -> None:
    """Usage errors for values out of range (command-line or stored ones alike)."""
    counts = {"epochs": cfg["epochs"], "batch_size": cfg["batch_size"],
              "hidden_dim": cfg["hidden_dim"], "stop_after": stop_after}
    for key, value in counts.items():
        if value is not None and value < 1:
            parser.error(f"{_flag(key)} must be at least 1, got {value}")
    if cfg["clip"] < 0 or not math.isfinite(cfg["clip"]):
        parser.error(f"--clip must be a finite number >= 0, got {cfg['clip']}")
    for key in ("lr", "weight_decay", "momentum"):
        if not math.isfinite(cfg[key]):
            parser.error(f"{_flag(key)} must be a finite number, got {cfg[key]}")
    if not cfg["lr"] > 0:
        parser.error(f"--lr must be positive, got {cfg['lr']}")
    if cfg["weight_decay"] < 0:
        parser.error(f"--weight-decay must be non-negative, got {cfg['weight_decay']}")
    if not 0 <= cfg["momentum"] < 1:
        parser.error(f"--momentum must lie in [0, 1), got {cfg['momentum']}")
    if cfg["momentum"] != 0 and cfg["optimizer"] != "sgd":
        parser.error(f"--momentum applies to --optimizer sgd only, not {cfg['optimizer']}")
    if cfg["augment"] < 0:
        parser.error(f"--augment must be non-negative, got {cfg['augment']}")
    if not 0 <= cfg["seed"] < 2**32:
        parser.error(f"--seed must lie in [0, 2**32), got {cfg['seed']}")
    for key, choices in (("device", DEVICES), ("optimizer", OPTIMIZERS),
                         ("schedule", SCHEDULES), ("model", MODELS)):
        if cfg[key] not in choices:  # only a stored value can get here
            parser.error(f"{_flag(key)}: unknown {cfg[key]!r}, choose from {sorted(choices)}")


def _check_writable(parser: argparse.ArgumentParser, flag: str, path: Path) -> None:
    """Fail now, not after an epoch, when a checkpoint could not be written to `path`."""
    if path.is_dir():
        parser.error(f"{flag} {path}: is a folder; name a file, e.g. {path / 'run.npz'}")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        parser.error(f"{flag} {path}: cannot save there: {folder} {what}")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        parser.error(f"{flag} {path}: cannot write in the folder {folder} ({e.strerror})")


def _datasets(parser: argparse.ArgumentParser,
              cfg: dict[str, Any]) -> tuple[Dataset, Dataset]:
    """The training set (with the random shifts) and the test set; bad files are usage errors."""
    if cfg["model"] == "resnet9":
        return _cifar10(parser, cfg)
    where = f"--data-dir {cfg['data_dir']}" if cfg["data_dir"] else "the built-in MNIST set"
    augment = [transforms.RandomCrop(cfg["augment"])] if cfg["augment"] else None
    try:
        files = find_mnist_files(cfg["data_dir"] or builtin_mnist_dir())
        paths = [files[name] for name in MNIST_FILES]
        sets = (MNISTDataset(paths[0], paths[1], transforms=augment),
                MNISTDataset(paths[2], paths[3]))
    except (OSError, ValueError) as e:
        parser.error(f"{where}: {e}")
    checks.image_data(parser, where, *sets, cfg["augment"])
    return sets


def _cifar10(parser: argparse.ArgumentParser,
             cfg: dict[str, Any]) -> tuple[CIFAR10Dataset, CIFAR10Dataset]:
    """CIFAR-10 from --data-dir (not built in), with random flips and shifts for training."""
    if not cfg["data_dir"]:
        parser.error("--model resnet9 trains on CIFAR-10, which is not built in: pass "
                     "--data-dir DIR, the cifar-10-batches-py folder of the python version "
                     "(https://www.cs.toronto.edu/~kriz/cifar.html), or --download to fetch it")
    augment = ([transforms.RandomFlipHorizontal(), transforms.RandomCrop(cfg["augment"])]
               if cfg["augment"] else None)
    try:
        sets = (CIFAR10Dataset(cfg["data_dir"], train=True, transforms=augment),
                CIFAR10Dataset(cfg["data_dir"], train=False))
    except (OSError, ValueError) as e:
        parser.error(f"--data-dir {cfg['data_dir']}: {e}")
    checks.image_data(parser, f"--data-dir {cfg['data_dir']}", *sets, cfg["augment"])
    return sets


def _download_cifar10(parser: argparse.ArgumentParser, cfg: dict[str, Any],
                      quiet: bool) -> str:
    """--download: the CIFAR-10 batch folder in --data-dir (or the cache), fetched there if
    missing."""
    if cfg["model"] != "resnet9":
        parser.error(f"--download fetches CIFAR-10 for --model resnet9; "
                     f"{DATASETS[cfg['model']]} is built in")
    try:
        return str(cifar10_folder(cfg["data_dir"], download=True, progress=not quiet))
    except (OSError, ValueError, DownloadError) as e:
        parser.error(f"--download: {e}")


def _ptb(parser: argparse.ArgumentParser,
         cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, int]:
    """Batchified training and held-out token ids, and the vocabulary size."""
    where = f"--data-dir {cfg['data_dir']}" if cfg["data_dir"] else "the built-in PTB set"
    try:
        corpus = Corpus(cfg["data_dir"]) if cfg["data_dir"] else builtin_ptb_corpus()
    except (OSError, ValueError) as e:
        parser.error(f"{where}: {e}")
    bs = cfg["batch_size"]
    checks.token_data(parser, where, cfg["data_dir"], corpus, bs)
    return batchify(corpus.train, bs), batchify(corpus.test, bs), len(corpus.dictionary)


def _rng_state(device: ndl.Device) -> dict:
    """numpy's global state and, where it has its own, the device's training generator's."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"keys": keys, "pos": int(pos), "has_gauss": int(has_gauss),
             "cached_gaussian": float(cached)}
    device_state = device.rng_state()
    if device_state is not None:
        state["device"] = device_state
    return state


def _set_rng_state(state: dict, device: ndl.Device) -> None:
    np.random.set_state(("MT19937", np.asarray(state["keys"], dtype=np.uint32),
                         int(state["pos"]), int(state["has_gauss"]),
                         float(state["cached_gaussian"])))
    if "device" in state:
        device.set_rng_state(state["device"])


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
    cfg, progress = run.config, {} if progress is None else progress
    end = cfg["epochs"] if run.stop_after is None else min(cfg["epochs"],
                                                           run.start + run.stop_after)
    say = (lambda *a: None) if run.quiet else print
    lm = cfg["model"] in LANGUAGE_MODELS
    name = _model_name(cfg)
    sizes = ((run.train_loader.size, run.test_loader.size, "held-out tokens") if lm else
             (len(run.train_loader.dataset), len(run.test_loader.dataset), "test images"))
    say(f"needle-train: {name} on {DATASETS[cfg['model']]}, {sizes[0]} training / {sizes[1]} "
        f"{sizes[2]}, {cfg['optimizer']} lr {cfg['lr']}, device {run.device}"
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
            if lm:
                say(f"epoch {epoch:3d}  train perplexity {math.exp(metrics['train_loss']):.2f}"
                    f"  held-out perplexity {math.exp(metrics['test_loss']):.2f} (loss "
                    f"{metrics['test_loss']:.4f})")
            else:
                say(f"epoch {epoch:3d}  train err {metrics['train_err']:.4f} loss "
                    f"{metrics['train_loss']:.4f}  test err {metrics['test_err']:.4f} loss "
                    f"{metrics['test_loss']:.4f}")
            if run.log is not None:
                _write_log(run, epoch, metrics)
            if run.checkpoint is not None:
                _save(run, epoch, metrics["seconds"])
    if run.log is not None and not run.log.plot_every_epoch:
        _write_log(run, end, None)
    return metrics


def _model_name(cfg: dict[str, Any]) -> str:
    """The trained model in words, for the header line and the figure's title."""
    h = cfg["hidden_dim"]
    return {"mlp": f"MLPResNet(hidden {h})", "cnn": "MNISTConvNet", "resnet9": "ResNet9",
            "rnn": f"LanguageModel(rnn, hidden {h})", "lstm": f"LanguageModel(lstm, hidden {h})",
            "transformer": f"LanguageModel(transformer, hidden {h})"}[cfg["model"]]


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
    # the bar shows on terminals only (disable=None), never with --quiet
    lm = run.config["model"] in LANGUAGE_MODELS
    steps = _windows(run.train_loader) if lm else len(run.train_loader)
    with tqdm(total=steps, desc=f"epoch {epoch}/{run.config['epochs']}",
              leave=False, disable=True if run.quiet else None, file=sys.stderr) as bar:
        train_err, train_loss = _checked_epoch(run, epoch, "training", bar)
    if run.distributed:  # BatchNorm's running statistics: their mean over the ranks
        dist.average_buffers(run.model)
    run.model.eval()
    test_err, test_loss = _checked_epoch(run, epoch, "test", None)
    return {"train_err": train_err, "train_loss": train_loss, "test_err": test_err,
            "test_loss": test_loss}


def _checked_epoch(run: Run, epoch: int, phase: str, bar) -> tuple[float, float]:
    """One training or test pass; a nan/inf loss stops the run (TrainingStopped)."""
    loader = run.train_loader if phase == "training" else run.test_loader
    opt = run.opt if phase == "training" else None
    try:
        if run.config["model"] in LANGUAGE_MODELS:
            acc, loss = run_lm_epoch(loader, run.model, ndl.nn.SoftmaxLoss(), opt, LM_SEQ_LEN,
                                     run.config["clip"] or None, run.device, "float32", bar)
            return 1.0 - acc, loss
        err, loss = run_epoch(loader, run.model, ndl.nn.SoftmaxLoss(), opt,
                              create_graph=False, bar=bar, check_finite=True)
        return launch.reduce_metrics(err, loss, loader) if run.distributed else (err, loss)
    except NonFiniteLoss as e:
        raise TrainingStopped(f"the {phase} loss became {e.loss} in epoch {epoch}, batch "
                              f"{e.batch}; stopped ({_last_checkpoint(run)}); a smaller --lr "
                              "may help") from None


def _save(run: Run, epoch: int, seconds: float) -> None:
    """Write the checkpoint after `epoch`: model, optimizer, random state, settings, time.

    Under --distributed rank 0 alone writes (the ranks agree: buffers were just averaged)."""
    if run.distributed and dist.rank() != 0:
        run.saved = (run.checkpoint, epoch)
        return
    try:
        ndl.save({"model": run.model.state_dict(), "optimizer": run.opt.state_dict(),
                  "epoch": epoch, "rng": _rng_state(run.device), "config": run.config,
                  "seconds": seconds}, run.checkpoint)
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


def _windows(data: np.ndarray) -> int:
    """How many windows of LM_SEQ_LEN a language-model epoch over `data` takes."""
    return len(range(0, data.shape[0] - 1, LM_SEQ_LEN))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _summary(run: Run, m: dict[str, Any]) -> str:
    """The last line: the final result, where a stopped run continues, or nothing to do."""
    total = run.config["epochs"]
    if "test_err" not in m:
        return (f"needle-train: nothing to do: {run.resume} already has {m['epoch']} of "
                f"{_plural(total, 'epoch')} (a larger --epochs extends the run)")
    if run.config["model"] in LANGUAGE_MODELS:
        result = f"held-out perplexity {math.exp(m['test_loss']):.2f}"
        train_result = f"train perplexity {math.exp(m['train_loss']):.2f}"
    else:
        result = f"test accuracy {100 * (1 - m['test_err']):.2f}%"
        train_result = f"train accuracy {100 * (1 - m['train_err']):.2f}%"
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
    print(_summary(run, metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""needle-train's command line and settings: the parser, and the settings of a run resolved
(command line, else a resumed checkpoint's, else the model's default) and checked."""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path
from typing import Any

import needle as ndl
from needle.apps import curves
from needle.apps.train_models import REGISTRY, Kind

DEVICES = ndl.backends.placements()  # "cpu", "cuda", ..., "torch:cuda": from the device table
OPTIMIZERS = {"adam": ndl.optim.Adam, "sgd": ndl.optim.SGD}
SCHEDULES = ("cosine", "constant")
# the settings of a run: stored in its checkpoints; a resumed run must agree (but --epochs)
SETTINGS: dict[str, Any] = {
    "model": "mlp", "epochs": 20, "batch_size": 100, "optimizer": "adam", "lr": 0.001,
    "weight_decay": 0.001, "momentum": 0.0, "hidden_dim": 256, "schedule": "cosine",
    "augment": 2, "seed": 0, "clip": 0.0,
}
# each model's own defaults over SETTINGS (from the registry)
MODELS: dict[str, dict[str, Any]] = {name: m.defaults for name, m in REGISTRY.items()}
# where a run computes and finds its data: stored too, but a resumed run may change them
PLACES: dict[str, Any] = {"device": "cpu", "data_dir": None}


def flag(key: str) -> str:
    """The option of a setting: batch_size -> --batch-size."""
    return "--" + key.replace("_", "-")


def and_words(words: list[str], conjunction: str = "and") -> str:
    """"a", "a and b", "a, b and c" (or another conjunction)."""
    if len(words) == 1:
        return words[0]
    return f"{', '.join(words[:-1])} {conjunction} {words[-1]}"


def _users(key: str) -> list[str]:
    """The models that use setting `key`."""
    return [name for name, m in REGISTRY.items() if key not in m.ignores]


def _ignoring(key: str) -> str:
    """The models that have no use for setting `key`, in words."""
    return and_words([name for name, m in REGISTRY.items() if key in m.ignores])


def _defaults_text(key: str) -> str:
    """A setting's default for every model that uses it, where they differ, for --help:
    "100 for mlp, cnn and resnet9; 20 for rnn, lstm and transformer"."""
    by_value: dict[Any, list[str]] = {}
    for name in _users(key):
        by_value.setdefault(REGISTRY[name].defaults.get(key, SETTINGS[key]), []).append(name)
    if len(by_value) == 1:
        return str(next(iter(by_value)))
    return "; ".join(f"{value} for {and_words(models)}" for value, models in by_value.items())


def _model_help() -> str:
    """--model's help: every model, what it is and what it trains on."""
    return "; ".join(
        f"{name}: {m.about} on {m.data.name}"
        + ("" if m.data.built_in else " (not built in: --data-dir or --download)")
        for name, m in REGISTRY.items())


def build_parser() -> argparse.ArgumentParser:
    """The command line of needle-train; settings default to None (filled in by `resolve`)."""
    d = {**SETTINGS, **PLACES}
    p = argparse.ArgumentParser(
        prog="needle-train",
        description=f"Train one of the course's models (--model "
                    f"{and_words(list(REGISTRY), 'or')}) and report its test accuracy or, "
                    "for a language model, its held-out perplexity. Defaults differ by "
                    "model: each option lists every model's.",
        epilog="With --resume, settings left out are the stored run's; settings given must "
               "agree with it, except --epochs (which may extend the run), --device and "
               "--data-dir. Exit status: 0 done, 1 nan/inf loss or a failed checkpoint "
               "write, 2 usage or data error, 130 interrupted.")
    add = p.add_argument
    add("--model", choices=sorted(REGISTRY), help=f"{_model_help()} (default: {d['model']})")
    add("--device", choices=sorted(DEVICES), help=f"where to compute (default: {d['device']})")
    add("--data-dir", type=Path,
        help="MNIST: folder with the four MNIST files, gzipped or not (default: the built-in "
             "set); CIFAR-10: the cifar-10-batches-py folder of the python version (required "
             "but with --download, where it is the folder to download into); "
             "PTB: a folder with train.txt and test.txt (default: the built-in split)")
    add("--download", action="store_true",
        help="CIFAR-10: fetch the python version (md5-checked) into --data-dir, else "
             "$XDG_CACHE_HOME/needle or ~/.cache/needle, unless it is there already "
             "(default: off)")
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
                                       f" size of the language models; not used by "
                                       f"{_ignoring('hidden_dim')} (default: "
                                       f"{_defaults_text('hidden_dim')})")
    add("--clip", type=float, help="clip the gradients' global norm to this before each step "
                                   "(with --distributed: the gradients averaged over the "
                                   "ranks), 0: off (default: "
                                   f"{_defaults_text('clip')})")
    add("--schedule", choices=SCHEDULES,
        help=f"learning rate over the epochs: cosine decay to 0 or constant "
             f"(default: {_defaults_text('schedule')})")
    add("--augment", type=int, metavar="PIXELS",
        help="random shifts of up to PIXELS for training images (CIFAR-10: and random "
             f"horizontal flips), 0: off; not used by {_ignoring('augment')} (default: "
             f"{_defaults_text('augment')})")
    add("--seed", type=int, help="seed of numpy's global state (weights, shuffling, shifts) "
                                 "and of the device's generator (dropout; numpy's on cpu and "
                                 f"strict) (default: {d['seed']})")
    add("--checkpoint", type=Path, metavar="FILE",
        help="save the run to FILE (.npz, atomically) after every epoch "
             "(default: none; with --resume, the resumed file)")
    add("--resume", type=Path, metavar="FILE",
        help="continue the run saved in FILE, with its settings (default: none)")
    add("--stop-after", type=int, metavar="N",
        help="stop after N epochs of this invocation; needs a checkpoint (default: never)")
    add("--quiet", action="store_true", help="print only the final summary (default: off)")
    curves.add_arguments(p)
    add("--no-compile", action="store_true",
        help="run each training step eagerly instead of replaying it as compiled by "
             "ndl.compile: the same numbers, bit for bit (default: off, compiled)")
    add("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
        help="capture each training step's forward and backward as one CUDA graph per batch "
             "shape (devices cuda and torch:cuda), the update running eagerly around it: "
             "far less host time per step on a GPU; --no-cuda-graph replays the compiled "
             "step without one (default: on for cuda and torch:cuda unless --no-compile or "
             "--distributed, else off)")
    add("--distributed", action="store_true",
        help="data-parallel over the ranks of `mpiexec -n N needle-train --distributed`, "
             f"{distributable()}; --batch-size is the global batch (default: off)")
    add("--verbose", action="store_true",
        help="with --distributed, let every rank print, not only rank 0 (default: off)")
    return p


def distributable() -> str:
    """The kinds of model --distributed trains, in words."""
    kinds: list[Kind] = []
    for m in REGISTRY.values():
        if m.kind.distributes and m.kind not in kinds:
            kinds.append(m.kind)
    return and_words([k.words for k in kinds])


def resolve(parser: argparse.ArgumentParser, args: argparse.Namespace,
            stored: dict | None) -> dict[str, Any]:
    """Every setting: given on the command line, else stored in the checkpoint, else default."""
    config, clashes = {}, []
    saved = stored["config"] if stored else {}
    model = args.model or saved.get("model", SETTINGS["model"])
    if model not in REGISTRY:  # only a stored value can get here
        parser.error(f"--model: unknown {model!r}, choose from {sorted(REGISTRY)}")
    for key in REGISTRY[model].ignores:
        if getattr(args, key):  # given, and not 0
            parser.error(f"{flag(key)} applies to {_users_text(key)}, not {model}")
    for key, default in {**SETTINGS, **REGISTRY[model].defaults, **PLACES}.items():
        given = getattr(args, key)
        if isinstance(given, Path):
            given = str(given.resolve())
        if given is None:
            config[key] = saved.get(key, default)
        else:
            config[key] = given
            if stored and key in SETTINGS and key != "epochs" and given != saved[key]:
                clashes.append(f"{flag(key)} {saved[key]} (this run asks for {given})")
    if clashes:
        them = "them" if len(clashes) > 1 else "it"
        parser.error(f"--resume: {args.resume} was trained with {', '.join(clashes)}; leave "
                     f"{them} out to continue with the stored settings")
    return config


def _users_text(key: str) -> str:
    """The models that use `key`: "image models" where they are one kind's, else a list."""
    users = _users(key)
    for kind in {id(m.kind): m.kind for m in REGISTRY.values()}.values():
        if users == [name for name, m in REGISTRY.items() if m.kind is kind]:
            return kind.words
    return f"--model {and_words(users)} only"


def validate(parser: argparse.ArgumentParser, cfg: dict[str, Any], stop_after: int | None,
             distributed: bool = False) -> None:
    """Usage errors for values out of range (command-line or stored ones alike), and for
    settings --distributed cannot train."""
    counts = {"epochs": cfg["epochs"], "batch_size": cfg["batch_size"],
              "hidden_dim": cfg["hidden_dim"], "stop_after": stop_after}
    for key, value in counts.items():
        if value is not None and value < 1:
            parser.error(f"{flag(key)} must be at least 1, got {value}")
    if cfg["clip"] < 0 or not math.isfinite(cfg["clip"]):
        parser.error(f"--clip must be a finite number >= 0, got {cfg['clip']}")
    for key in ("lr", "weight_decay", "momentum"):
        if not math.isfinite(cfg[key]):
            parser.error(f"{flag(key)} must be a finite number, got {cfg[key]}")
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
                         ("schedule", SCHEDULES), ("model", REGISTRY)):
        if cfg[key] not in choices:  # only a stored value can get here
            parser.error(f"{flag(key)}: unknown {cfg[key]!r}, choose from {sorted(choices)}")
    if distributed and not REGISTRY[cfg["model"]].kind.distributes:
        parser.error(f"--distributed trains {distributable()}, not {cfg['model']}")


def check_writable(parser: argparse.ArgumentParser, flag: str, path: Path) -> None:
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

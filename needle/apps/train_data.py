"""needle-train's data sets: MNIST and Penn Treebank (built in, or a folder of yours) and
CIFAR-10 (a folder of yours, or downloaded); every problem reading them is a usage error
(exit 2) naming the file."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from needle.apps import checks
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

TEST_BATCH_SIZE = 1000  # images per test batch (any size gives the same numbers)

# (training data, test data, vocabulary size or None): DataLoaders of images, or batchified
# token ids (nbatch, batch_size)
Data = tuple[Any, Any, int | None]


@dataclass(frozen=True)
class DataSet:
    """A data set needle-train trains on: its name, how it is read from the settings (their
    data_dir and batch_size, the training images' augment) onto a device, whether it is
    built in, how --download fetches it into a folder (given data_dir and quiet), if it
    can, and for images their (rows, cols), which its models are built for."""

    name: str
    read: Callable[[argparse.ArgumentParser, dict[str, Any], Device], Data]
    built_in: bool = True
    download: Callable[[str | None, bool], str] | None = None
    image_size: tuple[int, int] | None = None


def _loaders(train_set: Dataset, test_set: Dataset, cfg: dict[str, Any],
             device: Device) -> Data:
    """Shuffled training batches of batch_size and test batches, on `device`."""
    return (DataLoader(train_set, cfg["batch_size"], shuffle=True, device=device),
            DataLoader(test_set, TEST_BATCH_SIZE, device=device), None)


def _mnist(parser: argparse.ArgumentParser, cfg: dict[str, Any], device: Device) -> Data:
    """MNIST from data_dir (else the built-in set), random shifts for training images."""
    where = f"--data-dir {cfg['data_dir']}" if cfg["data_dir"] else "the built-in MNIST set"
    augment = [transforms.RandomCrop(cfg["augment"])] if cfg["augment"] else None
    try:
        files = find_mnist_files(cfg["data_dir"] or builtin_mnist_dir())
        paths = [files[name] for name in MNIST_FILES]
        sets = (MNISTDataset(paths[0], paths[1], transforms=augment),
                MNISTDataset(paths[2], paths[3]))
    except (OSError, ValueError) as e:
        parser.error(f"{where}: {e}")
    checks.image_data(parser, where, *sets, cfg["augment"], MNIST.image_size, cfg["model"])
    return _loaders(*sets, cfg, device)


def _cifar10(parser: argparse.ArgumentParser, cfg: dict[str, Any], device: Device) -> Data:
    """CIFAR-10 from data_dir (not built in), random flips and shifts for training images."""
    if not cfg["data_dir"]:
        parser.error(f"--model {cfg['model']} trains on CIFAR-10, which is not built in: pass "
                     "--data-dir DIR, the cifar-10-batches-py folder of the python version "
                     "(https://www.cs.toronto.edu/~kriz/cifar.html), or --download to fetch it")
    augment = ([transforms.RandomFlipHorizontal(), transforms.RandomCrop(cfg["augment"])]
               if cfg["augment"] else None)
    try:
        sets = (CIFAR10Dataset(cfg["data_dir"], train=True, transforms=augment),
                CIFAR10Dataset(cfg["data_dir"], train=False))
    except (OSError, ValueError) as e:
        parser.error(f"--data-dir {cfg['data_dir']}: {e}")
    checks.image_data(parser, f"--data-dir {cfg['data_dir']}", *sets, cfg["augment"],
                      CIFAR10.image_size, cfg["model"])
    return _loaders(*sets, cfg, device)


def _download_cifar10(data_dir: str | None, quiet: bool) -> str:
    """The CIFAR-10 batch folder in `data_dir` (else the cache), fetched there if missing."""
    return str(cifar10_folder(data_dir, download=True, progress=not quiet))


def _ptb(parser: argparse.ArgumentParser, cfg: dict[str, Any], device: Device) -> Data:
    """Batchified training and held-out token ids (host arrays: the windows go to `device`
    as they are cut), and the vocabulary size."""
    where = f"--data-dir {cfg['data_dir']}" if cfg["data_dir"] else "the built-in PTB set"
    try:
        corpus = Corpus(cfg["data_dir"]) if cfg["data_dir"] else builtin_ptb_corpus()
    except (OSError, ValueError) as e:
        parser.error(f"{where}: {e}")
    bs = cfg["batch_size"]
    checks.token_data(parser, where, cfg["data_dir"], corpus, bs)
    return batchify(corpus.train, bs), batchify(corpus.test, bs), len(corpus.dictionary)


# MLPResNet takes 784 = 28 * 28 features, MNISTConvNet 1x28x28 images, ResNet9 3x32x32
MNIST = DataSet("MNIST", _mnist, image_size=(28, 28))
CIFAR10 = DataSet("CIFAR-10", _cifar10, built_in=False, download=_download_cifar10,
                  image_size=(32, 32))
PTB = DataSet("PTB", _ptb)


def download(parser: argparse.ArgumentParser, data: DataSet, cfg: dict[str, Any],
             quiet: bool) -> str:
    """--download: the folder `data` (which has a `download`) was fetched into (data_dir,
    else the cache), for the settings to read this time."""
    try:
        return data.download(cfg["data_dir"], quiet)
    except (OSError, ValueError, DownloadError) as e:
        parser.error(f"--download: {e}")

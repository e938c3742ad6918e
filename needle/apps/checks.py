"""needle-train's checks of its data, files and checkpoints: each problem is a usage error
(exit 2) in one line naming the file, found before training rather than mid-epoch."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from needle.data import CIFAR10Dataset, Dataset, MNISTDataset
from needle.data.ptb import TEST_FILE, TRAIN_FILE, Corpus

NUM_CLASSES = 10  # the image models predict 10 classes: MNIST's digits, CIFAR-10's classes
MT19937_WORDS = 624  # the key length of numpy's legacy random state


def image_data(parser: argparse.ArgumentParser, where: str, train_set: Dataset,
               test_set: Dataset, augment: int, size: tuple[int, int], model: str) -> None:
    """Both sets hold images of `size` (rows, cols), which `model` is built for, their labels
    lie in [0, 10), and shifts of `augment` pixels leave part of every image in view."""
    for split, ds in (("training", train_set), ("test", test_set)):
        if len(ds) == 0:
            parser.error(f"{where}: {_files(ds, split)} no images")
        if isinstance(ds, MNISTDataset):  # CIFAR-10's reader checks its labels itself
            bad = np.flatnonzero(ds.labels >= NUM_CLASSES)
            if bad.size:
                more = f", and {bad.size - 1} more" if bad.size > 1 else ""
                parser.error(f"{where}: {ds.label_filename}: labels must lie in 0..9, found "
                             f"{ds.labels[bad[0]]} (the label of image {bad[0]}){more}")
    _check_size(parser, where, train_set, test_set, size, model)
    side = min(_image_size(train_set))
    if augment >= side:
        parser.error(f"--augment {augment}: shifts of up to {augment} pixels can move a "
                     f"{'x'.join(map(str, _image_size(train_set)))} training image out of "
                     f"view entirely; use at most {side - 1}")


def _check_size(parser: argparse.ArgumentParser, where: str, train_set: Dataset,
                test_set: Dataset, size: tuple[int, int], model: str) -> None:
    """A usage error naming the file when the images of either set are not `size`: a model
    reading another size fails in its first layer, or, with as many pixels, trains on and
    tests scrambled images."""
    need = "x".join(map(str, size))
    found = [_image_size(ds) for ds in (train_set, test_set)]
    if found[0] != size and math.inf not in found[0]:
        parser.error(f"{where}: --model {model} needs {need} images, found "
                     f"{'x'.join(map(str, found[0]))} in {_name(train_set, 'training')}")
    if found[1] != size and math.inf not in found[1]:
        parser.error(f"{where}: the test images in {_name(test_set, 'test')} are "
                     f"{'x'.join(map(str, found[1]))}, the training images {need}: "
                     f"--model {model} needs {need} images")


def _name(ds: Dataset, split: str) -> str:
    """The image file of `ds` (CIFAR-10's reader checks its image size itself)."""
    return str(ds.image_filename) if isinstance(ds, MNISTDataset) else f"the {split} set"


def _files(ds: Dataset, split: str) -> str:
    """The file(s) of `ds`, as the subject of "... no images"."""
    if isinstance(ds, MNISTDataset):
        return f"{ds.image_filename} holds"
    if isinstance(ds, CIFAR10Dataset):
        if len(ds.files) == 1:
            return f"{ds.files[0]} holds"
        return f"the {split} batches ({', '.join(p.name for p in ds.files)}) hold"
    return f"the {split} set holds"


def _image_size(ds: Dataset) -> tuple[int, int]:
    """(rows, cols) of the images of `ds`."""
    if isinstance(ds, MNISTDataset):
        return ds.image_shape[:2]
    return ds.X.shape[2:4] if isinstance(ds, CIFAR10Dataset) else (math.inf, math.inf)


def token_data(parser: argparse.ArgumentParser, where: str, data_dir: str | None,
               corpus: Corpus, batch_size: int) -> None:
    """Each split of `corpus` (from `data_dir`, else built in) fills the 2 rows of batch_size
    columns that one window (inputs, and the next tokens as targets) needs."""
    names = ((Path(data_dir) / TRAIN_FILE, Path(data_dir) / TEST_FILE) if data_dir else
             ("its first 90% of lines", "its last 10%"))
    for name, tokens in zip(names, (len(corpus.train), len(corpus.test))):
        if tokens < 2 * batch_size:
            parser.error(f"{where}: {name} holds {tokens} tokens, fewer than one window of "
                         f"--batch-size {batch_size} needs ({2 * batch_size}: two rows of "
                         f"{batch_size}); use a longer file or a smaller --batch-size")


def checkpoint_fields(ck: dict[str, Any]) -> list[str]:
    """The fields of a needle-train checkpoint (of the right types) whose values are bad."""
    bad = []
    if ck["epoch"] < 0:
        bad.append(f"epoch ({ck['epoch']}, negative)")
    if not (math.isfinite(ck["seconds"]) and ck["seconds"] >= 0):
        bad.append(f"seconds ({ck['seconds']})")
    rng = ck["rng"]
    keys = rng.get("keys")
    if not (isinstance(keys, np.ndarray) and keys.shape == (MT19937_WORDS,)
            and keys.dtype == np.uint32):
        found = (f"a {keys.dtype} array of shape {keys.shape}" if isinstance(keys, np.ndarray)
                 else type(keys).__name__)
        bad.append(f"rng['keys'] ({found}, expected {MT19937_WORDS} uint32)")
    for field, kind, low, high in (("pos", int, 0, MT19937_WORDS), ("has_gauss", int, 0, 1)):
        value = rng.get(field)
        if type(value) is not kind or not low <= value <= high:
            bad.append(f"rng[{field!r}] ({value!r}, expected an int in [{low}, {high}])")
    if type(rng.get("cached_gaussian")) is not float:
        bad.append(f"rng['cached_gaussian'] ({rng.get('cached_gaussian')!r}, expected a float)")
    return bad


def distinct_files(parser: argparse.ArgumentParser,
                   files: list[tuple[str, Path | None]]) -> None:
    """Files a run writes (flag, path) must differ: written in turn, each would replace the
    other. The pair --checkpoint F --resume F (continue and write back) is allowed."""
    given = [(flag, path) for flag, path in files if path is not None]
    for i, (flag, path) in enumerate(given):
        for other, other_path in given[:i]:
            if {flag, other} != {"--checkpoint", "--resume"} and _same_file(path, other_path):
                parser.error(f"{other} {other_path} and {flag} {path} name the same file: "
                             "each would overwrite the other; name two files")


def _same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` are one file (through symlinks and hard links, existing or not)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False

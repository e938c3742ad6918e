"""MNIST: `parse_mnist`, `MNISTDataset`, and locating the files (the packaged copy included)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .dataset import Dataset, TransformFn, builtin_data_dir
from .idx import read_idx_ubyte

IMAGE_MAGIC = 0x00000803
LABEL_MAGIC = 0x00000801

MNIST_FILES: tuple[str, str, str, str] = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def _load(
    image_filename: str | os.PathLike, label_filename: str | os.PathLike
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Read and check both files; returns (X float32 (N, rows*cols), y uint8, (rows, cols))."""
    images = read_idx_ubyte(image_filename, IMAGE_MAGIC, "MNIST image")
    labels = read_idx_ubyte(label_filename, LABEL_MAGIC, "MNIST label")
    n, rows, cols = images.shape
    if n != len(labels):
        raise ValueError(
            f"MNIST image and label counts disagree: {n} images in {image_filename}, "
            f"{len(labels)} labels in {label_filename}"
        )
    X = images.reshape(n, rows * cols).astype(np.float32) / np.float32(255.0)
    return X, labels.copy(), (rows, cols)


def parse_mnist(
    image_filename: str | os.PathLike, label_filename: str | os.PathLike
) -> tuple[np.ndarray, np.ndarray]:
    """MNIST images as float32 (N, rows*cols) in [0, 1] and labels as uint8 (N,)."""
    X, y, _ = _load(image_filename, label_filename)
    return X, y


class MNISTDataset(Dataset):
    """MNIST from IDX files: `dataset[i]` is `(image (rows*cols,) float32, label uint8)`.

    Transforms see each image as (rows, cols, 1) and their result is flattened again; for a
    slice or index array they run on every selected image in order.
    """

    def __init__(
        self,
        image_filename: str | os.PathLike,
        label_filename: str | os.PathLike,
        transforms: Sequence[TransformFn] | None = None,
    ):
        images, labels, (rows, cols) = _load(image_filename, label_filename)
        super().__init__(transforms)
        self.image_filename = Path(image_filename)
        self.label_filename = Path(label_filename)
        self.images = images
        self.labels = labels
        self.image_shape = (rows, cols, 1)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: Any) -> tuple[np.ndarray, Any]:
        x, y = self.images[index], self.labels[index]
        if not self.transforms:
            return x, y
        if x.ndim == 1:
            return self._transform(x), y
        if len(x) == 0:
            return x, y
        return np.stack([self._transform(img) for img in x]), y

    def _transform(self, flat: np.ndarray) -> np.ndarray:
        return np.reshape(self.apply_transforms(flat.reshape(self.image_shape)), -1)

    def __repr__(self) -> str:
        return (
            f"MNISTDataset({str(self.image_filename)!r}, {str(self.label_filename)!r}, "
            f"len={len(self)}, transforms={self.transforms!r})"
        )


def builtin_mnist_dir() -> Path:
    """The folder of the MNIST copy shipped with needle (5k training, 10k test images)."""
    return builtin_data_dir("mnist")


def find_mnist_files(data_dir: str | os.PathLike) -> dict[str, Path]:
    """The four MNIST files in `data_dir` by MNIST_FILES name (.gz preferred, else uncompressed)."""
    folder = Path(data_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"MNIST directory not found: {folder}")
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in MNIST_FILES:
        candidates = (folder / name, folder / name.removesuffix(".gz"))
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            missing.append(f"{candidates[0].name} (or {candidates[1].name})")
        else:
            found[name] = path
    if missing:
        raise FileNotFoundError(
            f"MNIST files missing in {folder}: {', '.join(missing)}"
        )
    return found

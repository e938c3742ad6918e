"""Datasets: the `Dataset` base class and `NDArrayDataset` over in-memory arrays."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..backends import host_array

TransformFn = Callable[[Any], Any]


def builtin_data_dir(name: str) -> Path:
    """The folder `name` of the data shipped inside needle.data (MNIST, PTB)."""
    folder = resources.files("needle.data") / name
    if not isinstance(folder, Path):
        raise RuntimeError(
            f"the packaged {name} folder is not on the file system ({folder!r}); "
            "install needle from a directory or wheel, not a zip"
        )
    return folder


class Dataset:
    """An indexable collection of examples, with optional per-item transforms."""

    def __init__(self, transforms: Sequence[TransformFn] | None = None):
        if callable(transforms):
            raise TypeError("transforms must be a list of callables, not a single callable")
        self.transforms = list(transforms) if transforms is not None else None

    def __getitem__(self, index: Any) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def apply_transforms(self, x: Any) -> Any:
        """`x` passed through each transform in list order (unchanged when there are none)."""
        if self.transforms is not None:
            for transform in self.transforms:
                x = transform(x)
        return x


class NDArrayDataset(Dataset):
    """Parallel host arrays: `dataset[i]` is `(arrays[0][i], arrays[1][i], ...)`."""

    def __init__(self, *arrays: Any):
        if not arrays:
            raise ValueError("NDArrayDataset needs at least one array")
        hosted = tuple(_host(a) for a in arrays)
        lengths = [len(a) for a in hosted]
        if any(n != lengths[0] for n in lengths):
            raise ValueError(
                f"NDArrayDataset: arrays must have the same length, got lengths {lengths}"
            )
        super().__init__()
        self.arrays = hosted

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, index: Any) -> tuple[np.ndarray, ...]:
        return tuple(a[index] for a in self.arrays)

    def __repr__(self) -> str:
        shapes = ", ".join(str(a.shape) for a in self.arrays)
        return f"NDArrayDataset(len={len(self)}, shapes=[{shapes}])"


def _host(array: Any) -> np.ndarray:
    """A numpy view or copy of `array` (numpy, a device array, a needle Tensor or a list)."""
    if hasattr(array, "realize_cached_data") and hasattr(array, "numpy"):  # a needle Tensor
        array = array.numpy()
    out = host_array(array)
    if out.ndim == 0:
        raise ValueError("NDArrayDataset: arrays must have at least one dimension, got a scalar")
    return out

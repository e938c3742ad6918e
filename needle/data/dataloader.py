"""DataLoader: batches of a Dataset as tuples of needle Tensors."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, Iterator

import numpy as np

from ..arguments import flag
from ..autograd import Tensor
from ..backends import Device, default_device
from .dataset import Dataset, NDArrayDataset


def _check_dataset(dataset: Any) -> None:
    """TypeError unless `dataset` can be batched: a Dataset, or an object with len() that
    takes an index array (a numpy array). A Python list, tuple or dict takes no index
    array (its batch failed in numpy's words at the first one), nor does None."""
    if isinstance(dataset, Dataset):
        return
    kind = type(dataset)
    if (isinstance(dataset, (Sequence, Mapping)) or not hasattr(kind, "__getitem__")
            or not hasattr(kind, "__len__")):
        raise TypeError(f"DataLoader: dataset must be a Dataset (or an array that takes an "
                        f"index array, with a length), got {kind.__name__}; wrap arrays or "
                        f"lists in ndl.data.NDArrayDataset")


class DataLoader:
    """Iterates over a dataset in batches of index arrays, yielding tuples of Tensors.

    Each `iter(loader)` draws `np.random.permutation(len(dataset))` once when shuffling
    (otherwise the order is `np.arange`), and splits it with
    `np.array_split(order, range(batch_size, N, batch_size))`, so only the last batch may be
    smaller. A `sampler` (an iterable of indices with a length, such as
    `needle.distributed.DistributedSampler`) gives the order instead, drawn at iter() time.
    A Tensor as the dataset is batched by rows (held as an NDArrayDataset, a host copy).
    A batch is `dataset[index_array]` as constant Tensors (requires_grad=False) on
    `device`, converted to `dtype` when one is given (every array of the batch alike): each
    array it returns must have one row per index (a ValueError otherwise: a PyTorch-style
    dataset that reads one sample per index would batch wrongly). `drop_last` drops a
    last batch smaller than `batch_size` (as PyTorch's; a BatchNorm layer refuses a batch
    of 1 in training).
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        device: Device | None = None,
        dtype: Any = None,
        sampler: Any = None,
        drop_last: bool = False,
    ):
        try:
            size = operator.index(batch_size)
        except TypeError:
            raise TypeError(
                f"DataLoader: batch_size must be an integer, got {batch_size!r}"
            ) from None
        if isinstance(batch_size, bool) or size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive integer, got "
                             f"{batch_size!r}")
        if isinstance(dataset, Tensor):  # its rows, as PyTorch's DataLoader over a tensor
            device = dataset.device if device is None else device  # (there by default)
            dataset = NDArrayDataset(dataset)  # (a host copy: a Tensor takes no index array)
        _check_dataset(dataset)
        shuffle = flag("DataLoader", "shuffle", shuffle)  # (shuffle="no" is true to Python)
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler and shuffle=True exclude each other (the "
                             "sampler gives the order)")
        self.dataset = dataset
        self.batch_size = size
        self.shuffle = shuffle
        self.sampler = sampler
        self.drop_last = flag("DataLoader", "drop_last", drop_last)
        self.device = default_device() if device is None else device
        self.dtype = dtype

    def __len__(self) -> int:
        """The number of batches per pass."""
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[Tensor, ...]]:
        # draw the order now, at iter() time, not at the first next()
        if self.sampler is not None:
            order = np.fromiter(iter(self.sampler), dtype=np.intp)
        else:
            n = len(self.dataset)
            order = np.random.permutation(n) if self.shuffle else np.arange(n)
        n = len(order)
        batches = np.array_split(order, range(self.batch_size, n, self.batch_size)) if n else []
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return self._batches(batches)

    def _batches(self, batches: list[np.ndarray]) -> Iterator[tuple[Tensor, ...]]:
        for index in batches:
            yield self._to_tensors(self.dataset[index], len(index))

    def _to_tensors(self, batch: Any, rows: int) -> tuple[Tensor, ...]:
        if isinstance(batch, Mapping):
            raise TypeError(f"DataLoader: {type(self.dataset).__name__} returned a "
                            f"{type(batch).__name__} for a batch; return a tuple of arrays")
        items = batch if isinstance(batch, (tuple, list)) else (batch,)
        for j, x in enumerate(items):
            shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
            if shape[:1] != (rows,):
                raise ValueError(
                    f"DataLoader: {type(self.dataset).__name__}[index array of {rows}] gave "
                    f"item {j} of shape {shape}, not one row per index: a needle dataset "
                    f"takes an array of indices and returns a batch (self.X[index], as the "
                    f"course's datasets do), not one sample per index")
        return tuple(
            Tensor(x, device=self.device, dtype=self.dtype, requires_grad=False) for x in items
        )

    def __repr__(self) -> str:
        return (
            f"DataLoader({self.dataset!r}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, "
            + (f"sampler={self.sampler!r}, " if self.sampler is not None else "")
            + ("drop_last=True, " if self.drop_last else "")
            + f"device={self.device}, dtype={self.dtype!r}, "
            f"batches={len(self)})"
        )

"""DataLoader: batches of a Dataset as tuples of needle Tensors."""

from __future__ import annotations

import operator
from typing import Any, Iterator

import numpy as np

from ..autograd import Tensor
from ..backends import Device, default_device
from .dataset import Dataset


class DataLoader:
    """Iterates over a dataset in batches of index arrays, yielding tuples of Tensors.

    Each `iter(loader)` draws `np.random.permutation(len(dataset))` once when shuffling
    (otherwise the order is `np.arange`), and splits it with
    `np.array_split(order, range(batch_size, N, batch_size))`, so only the last batch may be
    smaller. A batch is `dataset[index_array]` as constant Tensors (requires_grad=False) on
    `device`, converted to `dtype` when one is given (every array of the batch alike).
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        device: Device | None = None,
        dtype: Any = None,
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
        self.dataset = dataset
        self.batch_size = size
        self.shuffle = bool(shuffle)
        self.device = default_device() if device is None else device
        self.dtype = dtype

    def __len__(self) -> int:
        """The number of batches per pass."""
        return -(-len(self.dataset) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[Tensor, ...]]:
        # draw the order now, at iter() time, not at the first next()
        n = len(self.dataset)
        order = np.random.permutation(n) if self.shuffle else np.arange(n)
        batches = np.array_split(order, range(self.batch_size, n, self.batch_size)) if n else []
        return self._batches(batches)

    def _batches(self, batches: list[np.ndarray]) -> Iterator[tuple[Tensor, ...]]:
        for index in batches:
            yield self._to_tensors(self.dataset[index])

    def _to_tensors(self, batch: Any) -> tuple[Tensor, ...]:
        items = batch if isinstance(batch, (tuple, list)) else (batch,)
        return tuple(
            Tensor(x, device=self.device, dtype=self.dtype, requires_grad=False) for x in items
        )

    def __repr__(self) -> str:
        return (
            f"DataLoader({self.dataset!r}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, device={self.device}, dtype={self.dtype!r}, "
            f"batches={len(self)})"
        )

"""DistributedSampler: every rank's disjoint, equal-sized shard of one shared permutation."""

from __future__ import annotations

import hashlib
from typing import Iterator

import numpy as np

from ..arguments import flag, integer


class DistributedSampler:
    """The dataset indices of rank `rank` of `num_replicas`, for `DataLoader(sampler=...)`.

    Every rank draws the same order: `np.random.permutation(n)` from numpy's global state
    (the ranks seed it alike and draw the same numbers, so it stays in step), or, with
    `seed`, from `RandomState(seed + epoch)` regardless of the global state. The order is
    padded with its own first indices (or, with `drop_last`, truncated) to a multiple of
    `num_replicas`, so every shard has the same length and no rank waits for another.
    Rank r takes order[r::num_replicas]: batch i of every rank together is batch i of a
    single process with `num_replicas` times the batch size. `shuffle=False`, `pad=False`
    shard an evaluation set exactly (shards may then differ by one index). Without `seed`,
    each iter() over `num_replicas` ranks of an initialized needle.distributed world checks,
    in one small collective, that all ranks drew the same permutation.
    """

    def __init__(self, size: int, num_replicas: int, rank: int, shuffle: bool = True,
                 seed: int | None = None, drop_last: bool = False, pad: bool = True):
        owner = "DistributedSampler"
        size = integer(owner, "size", size, 0)
        num_replicas = integer(owner, "num_replicas", num_replicas, 1)
        rank = integer(owner, "rank", rank)
        if not 0 <= rank < num_replicas:
            raise ValueError(f"DistributedSampler: rank {rank} is not in a world of "
                             f"{num_replicas}")
        seed = None if seed is None else integer(owner, "seed", seed, 0)
        self.size, self.num_replicas, self.rank, self.seed = size, num_replicas, rank, seed
        self.shuffle = flag(owner, "shuffle", shuffle)  # (a string is true to Python)
        self.drop_last = flag(owner, "drop_last", drop_last)
        self.pad = flag(owner, "pad", pad)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use epoch `epoch`'s permutation (with `seed`: RandomState(seed + epoch))."""
        epoch = integer("DistributedSampler", "epoch", epoch, 0)
        if self.seed is not None and self.seed + epoch >= 2**32:  # (numpy's RandomState)
            raise ValueError(f"DistributedSampler: seed + epoch must be < 2**32 (a numpy "
                             f"seed), found {self.seed} + {epoch}")
        self.epoch = epoch

    def total(self) -> int:
        """Indices over all ranks after padding or truncation."""
        w = self.num_replicas
        if self.drop_last:
            return self.size - self.size % w
        return -(-self.size // w) * w if self.pad else self.size

    def __len__(self) -> int:
        """The number of indices of this rank."""
        return len(range(self.rank, self.total(), self.num_replicas))

    def order(self) -> np.ndarray:
        """The shared order of all ranks (padded or truncated), drawn now."""
        n = self.size
        if not self.shuffle:
            order = np.arange(n)
        elif self.seed is not None:
            order = np.random.RandomState(self.seed + self.epoch).permutation(n)
        else:
            order = np.random.permutation(n)
        total = self.total()
        if total > n:  # pad with the first indices (again and again for tiny sets)
            order = np.resize(order, total)
        return order[:total]

    def __iter__(self) -> Iterator[int]:
        order = self.order()
        if self.shuffle and self.seed is None and self.num_replicas > 1:
            _check_same_order(order, self.num_replicas)
        return iter(order[self.rank::self.num_replicas].tolist())

    def __repr__(self) -> str:
        return (f"DistributedSampler(size={self.size}, num_replicas={self.num_replicas}, "
                f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, "
                f"epoch={self.epoch}, per_rank={len(self)})")


def _check_same_order(order: np.ndarray, num_replicas: int) -> None:
    """A ValueError on every rank of a world of `num_replicas` unless all drew `order`."""
    from ..distributed import comm

    if not comm.is_initialized() or comm.world_size() != num_replicas:
        return
    digest = hashlib.blake2b(order.tobytes(), digest_size=16).hexdigest()
    try:
        comm.check_agreement("DistributedSampler", ("permutation", digest))
    except ValueError:
        raise ValueError("DistributedSampler: the ranks drew different permutations from "
                         "numpy's global random state, so their shards overlap; seed numpy "
                         "alike on every rank (np.random.seed(s)) or pass seed=") from None

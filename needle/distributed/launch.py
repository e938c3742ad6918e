"""What a training program needs to run under `mpiexec`: rank-0 output, sharded loaders,
metrics summed over ranks, and one exit status for the whole job (`needle-train --distributed`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

from ..data import DataLoader
from ..data.sampler import DistributedSampler
from . import comm

ABORT_DELAY = 1.0  # seconds a failing rank but 0 waits before ending the job


def start(verbose: bool = False) -> None:
    """init(); every rank but 0 prints nothing (stdout and stderr go to os.devnull) unless
    `verbose`. Tracebacks of a failing rank still reach the terminal (see init())."""
    comm.init()
    if comm.rank() != 0 and not verbose:
        sys.stdout = sys.stderr = open(os.devnull, "w")  # for the rest of the process
    local = comm.ranks_on_this_host()
    if local > 1 and comm.rank() == 0 and "OMP_NUM_THREADS" not in os.environ:
        print(f"needle.distributed: {local} ranks share this host and each uses all its cores "
              f"for BLAS; set OMP_NUM_THREADS (e.g. cores / {local}) for speed",
              file=sys.stderr)


def run_job(body: Callable[[], int], verbose: bool = False) -> int:
    """`body()`'s exit status under MPI; a non-zero status (or SystemExit) on any rank ends
    every rank with it (MPI_Abort), since the others would wait in their next collective."""
    start(verbose)
    try:
        status = body()
    except SystemExit as e:  # argparse usage errors
        status = e.code if isinstance(e.code, int) else 1
    if status and comm.world_size() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        if comm.rank() != 0:  # where all ranks fail alike, rank 0's message gets out first
            time.sleep(ABORT_DELAY)
        comm.abort(status)
    return status


def check_batch_size(batch_size: int) -> str | None:
    """Why `batch_size` (the global batch) cannot be split over the ranks, or None."""
    size = comm.world_size()
    if batch_size % size:
        return (f"--batch-size {batch_size} is the global batch and must be a multiple of the "
                f"{size} ranks")
    return None


def shard_loaders(train: DataLoader, test: DataLoader) -> tuple[DataLoader, DataLoader]:
    """This rank's loaders: training batches of batch_size / world_size from the shared
    shuffled order (padded to equal shards), and an exact, unshuffled shard of the test set."""
    size, rank = comm.world_size(), comm.rank()
    train_sampler = DistributedSampler(len(train.dataset), size, rank, shuffle=train.shuffle)
    test_sampler = DistributedSampler(len(test.dataset), size, rank, shuffle=False, pad=False)
    return (DataLoader(train.dataset, train.batch_size // size, device=train.device,
                       dtype=train.dtype, sampler=train_sampler),
            DataLoader(test.dataset, test.batch_size, device=test.device, dtype=test.dtype,
                       sampler=test_sampler))


def reduce_metrics(err: float, loss: float, loader: DataLoader) -> tuple[float, float]:
    """The error rate and mean loss over every rank's shard, from this rank's (rate, mean)."""
    count = len(loader.sampler)
    parts = comm.all_gather_object((err * count, loss * count, count))
    total = sum(c for _, _, c in parts)
    return sum(e for e, _, _ in parts) / total, sum(x for _, x, _ in parts) / total

"""needle.distributed: data-parallel training over MPI (mpi4py), launched with `mpiexec`.

    import needle.distributed as dist
    dist.init()                                   # a world of one outside mpiexec
    opt = dist.distributed_optimizer(ndl.optim.Adam(model.parameters()), module=model)
    sampler = dist.DistributedSampler(len(train_set), dist.world_size(), dist.rank())
    loader = ndl.data.DataLoader(train_set, batch_size, sampler=sampler)

mpi4py is imported by `init()`, never by `import needle` or `import needle.distributed`.
"""

from .comm import (
    INSTALL_HINT,
    abort,
    all_gather_object,
    allreduce,
    barrier,
    broadcast,
    broadcast_object,
    finalize,
    init,
    is_initialized,
    rank,
    world_size,
)
from .parallel import (
    DistributedOptimizer,
    average_buffers,
    broadcast_module,
    distributed_optimizer,
)
from ..data.sampler import DistributedSampler  # host-side, beside DataLoader

__all__ = [
    "INSTALL_HINT", "init", "is_initialized", "rank", "world_size", "barrier", "finalize",
    "abort", "allreduce", "broadcast", "all_gather_object", "broadcast_object",
    "distributed_optimizer", "DistributedOptimizer", "broadcast_module", "average_buffers",
    "DistributedSampler",
]

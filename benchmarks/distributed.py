"""Data parallelism on one 2-core machine: 1 rank x 2 threads vs 2 ranks x 1 thread, and the
gradient all-reduce of `distributed_optimizer` vs a bare mpi4py Allreduce of the same bytes.

The MLPResNet of the issue (784 inputs, hidden 1024, BatchNorm1d, dropout, Adam lr 0.001
wd 0.001) trains one epoch of the built-in MNIST training images (5,000) at global batch 100:
one process with BLAS on 2 threads, then `mpiexec -n 2` with 1 thread per rank (each rank
batch 50 of a DistributedSampler shard), and one process on 1 thread as the control. Each
configuration runs in fresh processes, `--rounds` times alternating; the median is reported.

The all-reduce figures come from the 2-rank run, after its epoch, on the model's real
gradients (about 4 M float32 values): `allreduce_gradients()` (agreement check, in-place
Iallreduce of the big arrays, bucket packing and its Iallreduce, the scale by 1/2) against
bare mpi4py calls on one flat float32 array of the same size: `Allreduce(send, recv)`,
`Allreduce(IN_PLACE, buf)` (one memory pass less), and that followed by the same scale.
Medians of `--reps` timed calls, each after a barrier.

    python benchmarks/distributed.py               # about a minute
    python benchmarks/distributed.py --rounds 1 --examples 1000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()


def mpiexec() -> str:
    """The mpiexec installed with mpi4py's MPI (next to python), else the one on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        sys.exit("benchmarks/distributed.py: no mpiexec: pip install -e '.[distributed]'")
    return found


def one(args: argparse.Namespace) -> None:
    """Inside one configuration (a world of 1 or 2): time the epoch, then the all-reduce."""
    import needle as ndl
    import needle.distributed as dist
    from needle.apps.mlp_resnet import MLPResNet, run_epoch

    dist.init()
    rank, size = dist.rank(), dist.world_size()
    files = ndl.data.find_mnist_files(ndl.data.builtin_mnist_dir())
    names = ndl.data.MNIST_FILES
    train = ndl.data.MNISTDataset(files[names[0]], files[names[1]])
    if args.examples < len(train):
        train = ndl.data.NDArrayDataset(*train[np.arange(args.examples)])
    np.random.seed(rank)  # different on purpose: distributed_optimizer broadcasts rank 0's
    model = MLPResNet(784, args.hidden)
    opt = ndl.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    if size > 1:
        opt = dist.distributed_optimizer(opt, module=model)
    np.random.seed(0)
    sampler = dist.DistributedSampler(len(train), size, rank)
    loader = ndl.data.DataLoader(train, args.batch // size, sampler=sampler)
    model.train()
    dist.barrier()
    start = time.perf_counter()
    run_epoch(loader, model, ndl.nn.SoftmaxLoss(), opt, create_graph=False)
    dist.barrier()
    seconds = time.perf_counter() - start
    figures = {"ranks": size, "seconds": seconds, "samples_per_s": len(train) / seconds}
    if size > 1:
        figures.update(allreduce_times(opt, args.reps))
    if rank == 0:
        print(json.dumps(figures))


def allreduce_times(opt, reps: int) -> dict:
    """Median ms: distributed_optimizer's gradient all-reduce vs bare mpi4py calls."""
    import needle as ndl
    import needle.distributed as dist
    from needle.distributed.comm import _World

    comm, MPI = _World.comm, _World.MPI
    # the epoch's last gradients, copied: each call reads them afresh, as after a backward()
    grads = [ndl.Tensor.make_const(p.grad.numpy().copy(), device=p.device) for p in opt.params]
    count = sum(int(np.prod(g.shape)) for g in grads)
    send = np.random.randn(count).astype(np.float32)
    recv = np.empty_like(send)

    def needle_call():
        for p, g in zip(opt.params, grads):
            p.grad = g  # the same gradients each time (the call replaces p.grad by the mean)
        opt.allreduce_gradients()

    def bare():
        comm.Allreduce(send, recv)

    def bare_in_place():
        comm.Allreduce(MPI.IN_PLACE, recv)

    def bare_in_place_scaled():
        comm.Allreduce(MPI.IN_PLACE, recv)
        np.multiply(recv, 0.5, out=recv)

    out = {"values": count, "mb": 4 * count / 2**20}
    calls = [("needle_ms", needle_call), ("bare_ms", bare), ("bare_in_place_ms", bare_in_place),
             ("bare_in_place_scaled_ms", bare_in_place_scaled)]
    for name, call in calls * 2:  # twice: warm, then measured
        times = []
        for _ in range(reps):
            dist.barrier()
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        out[name] = 1e3 * statistics.median(times)
    return out


def run(ranks: int, threads: int, args: argparse.Namespace) -> dict:
    """One fresh configuration: `ranks` processes with `threads` BLAS threads each."""
    threads = str(threads)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads,
           "MKL_NUM_THREADS": threads}
    cmd = [sys.executable, str(HERE), "--one", "--hidden", str(args.hidden), "--batch",
           str(args.batch), "--examples", str(args.examples), "--reps", str(args.reps)]
    if ranks > 1:
        cmd = [mpiexec(), "-n", str(ranks), *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200,
                         stdin=subprocess.DEVNULL)  # mpiexec would forward a terminal's stdin
    if out.returncode:
        sys.exit(f"benchmarks/distributed.py: {' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=100, help="global batch")
    p.add_argument("--examples", type=int, default=5000, help="training images per epoch")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--reps", type=int, default=20, help="timed all-reduce calls")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        one(args)
        return
    # (ranks, threads); 1 x 1 is the control: how much of 1 x 2 the second thread adds
    configs = [(1, 2), (2, 1), (1, 1)]
    results: dict[tuple, list[dict]] = {c: [] for c in configs}
    for _ in range(args.rounds):
        for ranks, threads in configs:
            results[(ranks, threads)].append(run(ranks, threads, args))
    med = {k: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
           for k, rs in results.items()}
    one_rank, two, single = med[(1, 2)], med[(2, 1)], med[(1, 1)]
    print(f"MLPResNet(hidden {args.hidden}), {args.examples} MNIST images, global batch "
          f"{args.batch}, Adam; median of {args.rounds} fresh runs each")
    print(f"  1 rank  x 2 threads: {one_rank['samples_per_s']:8.0f} samples/s "
          f"({one_rank['seconds']:.2f} s/epoch)")
    speedup = two["samples_per_s"] / one_rank["samples_per_s"]
    print(f"  2 ranks x 1 thread : {two['samples_per_s']:8.0f} samples/s "
          f"({two['seconds']:.2f} s/epoch), {speedup:.2f}x")
    print(f"  1 rank  x 1 thread : {single['samples_per_s']:8.0f} samples/s "
          f"({single['seconds']:.2f} s/epoch), the control")
    print(f"gradient all-reduce per step, {two['values']:.0f} float32 values "
          f"({two['mb']:.1f} MB), median of {args.reps}:")
    print(f"  needle allreduce_gradients     {two['needle_ms']:7.2f} ms")
    for key, what in [("bare_ms", "bare Allreduce(send, recv)"),
                      ("bare_in_place_ms", "bare Allreduce(IN_PLACE, buf)"),
                      ("bare_in_place_scaled_ms", "  the same, then buf *= 1/2")]:
        print(f"  {what:31s}{two[key]:7.2f} ms  (needle overhead "
              f"{100 * (two['needle_ms'] / two[key] - 1):+.0f}%)")


if __name__ == "__main__":
    main()

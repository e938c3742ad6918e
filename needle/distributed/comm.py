"""The MPI world: init, rank, world size, barrier, and collectives on Tensors and device arrays.

mpi4py is imported by `init()` only, never at `import needle` time. Arrays travel through
mpi4py's buffer interface (no pickling): cpu arrays go straight to MPI; cuda arrays go straight
to a CUDA-aware MPI, else through one pinned host buffer; arrays of other
devices (array-api-strict) through a host copy. What that takes of the arrays (buffers,
dtypes, the staging) lives in mpi_buffers.py, the one file here that knows numpy.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shlex
import sys
from typing import Any

from ..autograd import Tensor, mark_modified
from .mpi_buffers import HostStaging, dtype_of, int64_pair, on_buffer

INSTALL_HINT = ("needle.distributed needs mpi4py and an MPI library (needle's distributed "
                "extra: mpi4py and the mpich wheel)")
# the distributed extra of pyproject.toml, for a needle whose metadata cannot be read
_EXTRA_REQUIREMENTS = ("mpi4py>=4", "mpich")
OPS = ("sum", "mean")


class _World:
    """The process-wide MPI state: set by init(), cleared by finalize()."""

    MPI: Any = None
    comm: Any = None
    cuda_aware: bool = False
    staging: HostStaging | None = None
    excepthook: Any = None  # the hook init() replaced, restored by finalize()
    pid: int = 0  # the process that called init() (a forked child's exit is not a rank's)


def install_hint() -> str:
    """INSTALL_HINT with the command that installs the extra, for how needle was installed."""
    return f"{INSTALL_HINT}: {install_command()}, then launch with `mpiexec -n 2 ...`"


def install_command(extra: str = "distributed") -> str:
    """`pip install -e 'SOURCE[extra]'` for an editable needle, else pip install of the
    extra's requirements (a wheel or index install has no source folder to point at)."""
    from importlib import metadata
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    try:
        found = metadata.distribution("needle")
        origin = json.loads(found.read_text("direct_url.json") or "{}")
        requires = found.requires or []
    except (metadata.PackageNotFoundError, ValueError, OSError):
        origin, requires = {}, []
    url = origin.get("url", "") if isinstance(origin, dict) else ""
    editable = isinstance(origin, dict) and (origin.get("dir_info") or {}).get("editable")
    if editable and url.startswith("file://"):
        source = url2pathname(urlparse(url).path)
        return f"pip install -e {shlex.quote(f'{source}[{extra}]')}"
    marker = f'extra == "{extra}"'
    wanted = [r.split(";")[0].strip() for r in requires if marker in r.replace("'", '"')]
    if not wanted and extra == "distributed":
        wanted = list(_EXTRA_REQUIREMENTS)
    return "pip install " + " ".join(shlex.quote(r) for r in wanted)


def _mpi() -> Any:
    """The mpi4py.MPI module, or a RuntimeError with the install hint."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError(f"{install_hint()} ({e})") from None
    return MPI


def init(abort_on_error: bool = True) -> None:
    """Join the MPI world (a world of one outside `mpiexec`); a second call does nothing.

    With `abort_on_error`, an uncaught exception on any rank prints its traceback and aborts
    the whole job (MPI_Abort), and so does a rank that exits (sys.exit) before finalize()
    while another rank waits in a collective, so the others do not wait forever.
    """
    if _World.comm is not None:
        return
    MPI = _mpi()
    _World.MPI, _World.comm = MPI, MPI.COMM_WORLD.Dup()
    _World.cuda_aware = _query_cuda_aware(MPI, _World.comm)
    if abort_on_error and _World.comm.Get_size() > 1:
        _World.excepthook = sys.excepthook
        sys.excepthook = _abort_on_uncaught
        _World.pid = os.getpid()
        atexit.register(_check_exit)


def _query_cuda_aware(MPI: Any, comm: Any = None) -> bool:
    """True when the MPI library reports CUDA support: MPI 4.1's `mpi_memory_alloc_kinds` info
    of the communicator names cuda (or an mpi4py built with Query_cuda_support says so);
    NEEDLE_MPI_CUDA_AWARE=0/1 overrides both."""
    forced = os.environ.get("NEEDLE_MPI_CUDA_AWARE")
    if forced in ("0", "1"):
        return forced == "1"
    query = getattr(MPI, "Query_cuda_support", None)
    try:
        if query is not None and query():
            return True
        info = comm.Get_info() if comm is not None else None
        kinds = info.Get("mpi_memory_alloc_kinds") if info is not None else None
    except Exception:  # noqa: BLE001 - a library without these answers no
        return False
    return kinds is not None and any(k.strip().split(":")[0] == "cuda"
                                     for k in kinds.split(","))


def _abort_on_uncaught(kind, value, tb) -> None:
    """sys.excepthook under MPI: the traceback (from this rank), then MPI_Abort(1)."""
    sys.stdout.flush()
    sys.stderr = sys.__stderr__  # a silenced rank (needle-train) still shows its traceback
    print(f"needle.distributed: rank {rank()} of {world_size()} failed; aborting the job",
          file=sys.stderr)
    (_World.excepthook or sys.__excepthook__)(kind, value, tb)
    sys.stderr.flush()
    abort(1)


def _check_exit() -> None:
    """At exit before finalize(): abort the job unless every rank is exiting too."""
    if _World.comm is None or os.getpid() != _World.pid:
        return
    # every collective here starts with check_agreement: a rank still in one (waiting for
    # this rank forever) disagrees; at a normal end all ranks agree and end as usual
    try:
        check_agreement("exit", ("exiting before finalize()",))
    except ValueError as e:
        sys.stdout.flush()
        print(f"needle.distributed: rank {rank()} of {world_size()} exited while another rank "
              f"waits in a collective; aborting the job ({e})", file=sys.__stderr__, flush=True)
        abort(1)


def abort(status: int = 1) -> None:
    """End every rank of the job now with `status` (MPI_Abort); nothing to do without init."""
    if _World.comm is not None:
        _World.comm.Abort(status)
    raise SystemExit(status)


def is_initialized() -> bool:
    """True between init() and finalize()."""
    return _World.comm is not None


def _comm() -> Any:
    if _World.comm is None:
        raise RuntimeError("needle.distributed is not initialized: call "
                           "needle.distributed.init() first")
    return _World.comm


def rank() -> int:
    """This process's rank, 0 .. world_size() - 1."""
    return _comm().Get_rank()


def world_size() -> int:
    """The number of processes in the job (1 outside mpiexec)."""
    return _comm().Get_size()


def ranks_on_this_host() -> int:
    """How many ranks of the job share this machine (MPI's shared-memory split)."""
    local = _comm().Split_type(_World.MPI.COMM_TYPE_SHARED)
    try:
        return local.Get_size()
    finally:
        local.Free()


def barrier() -> None:
    """Wait until every rank has called barrier() (an agreement check: a rank in another
    collective is a ValueError, not a hang)."""
    check_agreement("barrier", ("barrier",))


def finalize() -> None:
    """Leave the world: free the communicator, restore the excepthook (MPI itself finalizes
    at interpreter exit, as mpi4py arranges)."""
    if _World.comm is None:
        return
    if _World.pid == os.getpid():  # the exit check's meeting: ranks that end without
        _check_exit()  # finalize() meet it at exit, so only some ranks may call finalize()
    _World.comm.Free()
    atexit.unregister(_check_exit)
    if _World.excepthook is not None:
        sys.excepthook, _World.excepthook = _World.excepthook, None
    _World.comm, _World.staging = None, None


def all_gather_object(obj: Any) -> list[Any]:
    """[obj of rank 0, obj of rank 1, ...] on every rank: small Python values (pickled)."""
    check_agreement("all_gather_object", ("all_gather_object",))
    return _comm().allgather(obj)


def broadcast_object(obj: Any, root: int = 0) -> Any:
    """Rank `root`'s `obj` on every rank (small Python values, pickled)."""
    check_agreement("broadcast_object", ("broadcast_object", root))
    return _comm().bcast(obj, root=root)


def check_agreement(what: str, signature: tuple | dict) -> None:
    """A ValueError on every rank unless all ranks pass the same `signature`.

    One 16-byte Allreduce (MAX of h and -h, h a digest of the signature) when they agree;
    the signatures themselves are gathered only to word the error (of a dict, the entries
    that differ). Without the check a mismatched collective hangs or mixes unrelated bytes.
    """
    comm = _comm()
    if comm.Get_size() == 1:
        return
    digest = hashlib.blake2b(repr(signature).encode(), digest_size=7).digest()
    h = int.from_bytes(digest, "little")  # < 2**56: -h fits int64 too
    both = int64_pair(h, -h)
    comm.Allreduce(_World.MPI.IN_PLACE, both, op=_World.MPI.MAX)
    if both[0] != h or both[1] != -h:
        raise ValueError(f"needle.distributed.{what}: the ranks disagree "
                         f"({disagreement(comm.allgather(signature))})")


def disagreement(every: list) -> str:
    """The ranks' signatures `every` in words, by what differs: a dict's entries that
    differ, a tuple's count and first differing entry, else each whole."""
    if all(isinstance(s, dict) for s in every):  # name the entries that differ
        keys = [k for k in dict.fromkeys(k for s in every for k in s)
                if len({repr(s.get(k)) for s in every}) > 1]
        every = [", ".join(f"{k}={s.get(k)!r}" for k in keys) for s in every]
    elif all(isinstance(s, tuple) for s in every):  # (a long list of parameters: where)
        first = next((i for i in range(max(map(len, every)))
                      if len({repr(s[i]) if i < len(s) else "-" for s in every}) > 1), 0)
        every = [f"{len(s)} entries, entry {first}: "
                 f"{repr(s[first]) if first < len(s) else 'none'}" for s in every]
    return "; ".join(f"rank {r}: {s}" for r, s in enumerate(every))


def allreduce(x: Any, op: str = "sum") -> Any:
    """Sum (or mean) `x` over all ranks, in place where the array allows; returns `x`.

    `x` is a Tensor (its data is replaced when the array cannot be changed in place) or a
    device array. Every rank must pass the same shape and dtype: a disagreement raises a
    ValueError on every rank. `op="mean"` needs a floating dtype, and bool arrays cannot be
    summed (a TypeError).
    """
    if op not in OPS:
        raise ValueError(f"allreduce: op must be one of {OPS}, got {op!r}")
    arr = x._realize() if isinstance(x, Tensor) else x
    dtype = dtype_of(arr)
    check_agreement("allreduce", ("allreduce", op, tuple(arr.shape), dtype.name))
    if dtype.kind == "b":  # MPI has no sum of bools ("Invalid MPI_Op")
        raise TypeError(f"allreduce: cannot sum a bool array over the ranks, got {arr.dtype}; "
                        "convert it to an integer dtype first")
    if op == "mean" and dtype.kind not in "fc":
        raise TypeError(f"allreduce: op='mean' needs a floating dtype, got {arr.dtype}; "
                        "use op='sum'")
    out = _collective(arr, lambda buf: _comm().Allreduce(_World.MPI.IN_PLACE, buf))
    if op == "mean" and world_size() > 1:
        out = _scale(out, 1.0 / world_size())
    return _result(x, out)


def broadcast(x: Any, root: int = 0) -> Any:
    """Rank `root`'s values of `x` on every rank, in place where the array allows; returns
    `x` (a Tensor gets the new data). Shapes and dtypes must agree, as for allreduce."""
    arr = x._realize() if isinstance(x, Tensor) else x
    size = world_size()
    if not 0 <= root < size:
        raise ValueError(f"broadcast: root must lie in [0, {size}), got {root}")
    check_agreement("broadcast", ("broadcast", root, tuple(arr.shape), dtype_of(arr).name))
    out = _collective(arr, lambda buf: _comm().Bcast(buf, root=root))
    return _result(x, out)


def _result(x: Any, out: Any) -> Any:
    """`x` after a collective whose result is the array `out`."""
    if isinstance(x, Tensor):
        if out is not x._array:
            x._array = out
        mark_modified(x)  # changed in place or replaced: graphs built before see stale data
        return x
    return out


def _scale(arr: Any, factor: float) -> Any:
    """arr * factor, in place where the array allows (its dtype is kept)."""
    try:
        arr *= factor
        return arr
    except (TypeError, ValueError):  # a read-only or immutable array
        return arr * factor


def _collective(arr: Any, call) -> Any:
    """Run `call(buffer)` on a contiguous host or CUDA buffer holding `arr`; the result array
    (mpi_buffers.on_buffer, with this world's route for cuda arrays)."""
    return on_buffer(arr, call, _cuda_collective)


def _cuda_collective(arr: Any, call) -> Any:
    """A cupy array: CUDA-aware MPI on the array, or a round trip through pinned memory."""
    if _World.cuda_aware and arr.flags.c_contiguous:
        _synchronize(arr)  # MPI reads the memory now: the kernels writing it must be done
        call(arr)
        return arr
    if _World.staging is None:
        _World.staging = HostStaging()
    return _World.staging.run(arr, call)


def _synchronize(arr: Any) -> None:
    """Wait until the GPU work queued on `arr`'s device is done (cupy's Device.synchronize)."""
    arr.device.synchronize()


def mean_in_place(buf: Any) -> Any:
    """Average `buf` over the ranks, in place where the array allows, without the agreement
    check (the caller has checked every array at once); the array with the result. The
    1/N scale follows the sum at once, while the array is still in cache.

    Blocking on purpose: mpich makes no progress on a non-blocking Iallreduce between MPI
    calls, and measured on 2 ranks its in-place Iallreduce took 4.9 ms where Allreduce took
    4.2 ms for the same 2.9 M float32 values, so overlapping it with packing gained nothing.
    """
    out = _collective(buf, lambda b: _comm().Allreduce(_World.MPI.IN_PLACE, b))
    return _scale(out, 1.0 / world_size())

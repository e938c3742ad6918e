"""needle.distributed: a world of one in this process, and 2-rank jobs under `mpiexec -n 2`."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import needle as ndl
import needle.distributed as dist
from needle.distributed import comm
from needle.distributed.mpi_buffers import HostStaging

HERE = Path(__file__).resolve().parent
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None
# the mpiexec installed with mpi4py's MPI (the mpich wheel puts it next to python), else PATH's
MPIEXEC = next((str(p) for p in [Path(sys.executable).parent / "mpiexec"] if p.exists()),
               shutil.which("mpiexec"))
# one BLAS thread per process: 2 ranks of 2 threads on 2 cores (or 2 threads on a busy
# machine) run many times slower
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
needs_mpi4py = pytest.mark.skipif(not HAVE_MPI4PY, reason="mpi4py is not installed: "
                                  "pip install -e '.[distributed]'")
needs_mpiexec = pytest.mark.skipif(not (HAVE_MPI4PY and MPIEXEC), reason="needs mpi4py and "
                                   "mpiexec: pip install -e '.[distributed]'")


def mpiexec(args: list[str], timeout: float, ranks: int = 2,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `python ARGS` on `ranks` ranks; the completed process (stdout and stderr text)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **ONE_THREAD}
    # stdin from /dev/null: mpiexec forwards stdin to rank 0, and a job reading a terminal
    # from a background process group is stopped (SIGTTIN): a hang, not a failure
    return subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL)


# ----- this process: no mpiexec ----------------------------------------------------------

def test_import_needle_does_not_import_mpi4py():
    code = "import sys, needle, needle.distributed; sys.exit('mpi4py' in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_init_without_mpi4py_raises_with_the_install_hint():
    code = ("import sys; sys.modules['mpi4py'] = None\n"
            "import needle.distributed as d\n"
            "try:\n    d.init()\nexcept RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert f"{comm.install_command()}, then launch with `mpiexec" in out and "mpi4py" in out, out


class FakeDistribution:
    """importlib.metadata's view of an installed needle: its direct_url.json and requires."""

    requires = ["numpy>=2", 'mpi4py>=4; extra == "distributed"', 'mpich; extra == "distributed"',
                'torch>=2.3; extra == "torch"']

    def __init__(self, direct_url: str | None):
        self.direct_url = direct_url

    def read_text(self, name: str) -> str | None:
        return self.direct_url if name == "direct_url.json" else None


@pytest.mark.parametrize("direct_url, command", [
    ('{"url": "file:///src/my%20needle", "dir_info": {"editable": true}}',
     "pip install -e '/src/my needle[distributed]'"),
    ('{"url": "file:///src/needle", "dir_info": {}}', "pip install 'mpi4py>=4' mpich"),
    ('{"url": "file:///w/needle-0.1.0-py3-none-any.whl", "archive_info": {}}',
     "pip install 'mpi4py>=4' mpich"),
    (None, "pip install 'mpi4py>=4' mpich"),  # from an index: no direct_url.json
])
def test_install_hint_fits_how_needle_was_installed(direct_url, command, monkeypatch):
    from importlib import metadata

    monkeypatch.setattr(metadata, "distribution", lambda name: FakeDistribution(direct_url))
    assert comm.install_command() == command
    assert comm.install_hint().endswith(f": {command}, then launch with `mpiexec -n 2 ...`")


def test_calls_before_init_raise():
    if dist.is_initialized():
        pytest.skip("another test initialized the world")
    with pytest.raises(RuntimeError, match="init"):
        dist.rank()


@needs_mpi4py
def test_init_outside_mpiexec_is_a_world_of_one():
    code = ("import numpy as np, needle.distributed as d\n"
            "d.init(); d.init()\n"
            "a = np.arange(3.0); d.allreduce(a, op='mean'); d.broadcast(a); d.barrier()\n"
            "print(d.is_initialized(), d.rank(), d.world_size(), a.tolist(),"
            " d.all_gather_object('x'))\n"
            "d.finalize(); print(d.is_initialized())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, stdin=subprocess.DEVNULL).stdout.split()
    assert out == ["True", "0", "1", "[0.0,", "1.0,", "2.0]", "['x']", "False"], out


def test_a_distributed_optimizer_takes_a_closure_in_a_world_of_one():
    """PyTorch's step(closure) through the wrapper: the closure's loss, then the update."""
    code = ("import numpy as np, needle as ndl, needle.distributed as d\n"
            "d.init(); np.random.seed(0)\n"
            "m = ndl.nn.Linear(2, 1); w = m.weight.numpy().copy()\n"
            "opt = d.distributed_optimizer(ndl.optim.SGD(m.parameters(), lr=0.5), m)\n"
            "def closure():\n"
            "    opt.zero_grad(); loss = m(ndl.Tensor(np.ones((1, 2)), dtype='float32')).sum()\n"
            "    loss.backward(); return loss\n"
            "loss = opt.step(closure)\n"
            "print(type(loss).__name__, (m.weight.numpy() - w).ravel().tolist())\n"
            "d.finalize()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, stdin=subprocess.DEVNULL).stdout.split()
    assert out == ["Tensor", "[-0.5,", "-0.5]"], out


def test_a_disagreement_is_worded_by_what_differs():
    """(A distributed audit.) Tuple signatures were printed whole: every parameter's shape on
    every rank for a model with one parameter fewer."""
    from needle.distributed.comm import disagreement

    shapes = tuple((i, (20, 300), "float32") for i in range(50))
    text = disagreement([shapes, shapes[:40] + ((40, (20, 301), "float32"),) + shapes[41:]])
    assert text == ("rank 0: 50 entries, entry 40: (40, (20, 300), 'float32'); "
                    "rank 1: 50 entries, entry 40: (40, (20, 301), 'float32')")
    assert disagreement([shapes[:2], ()]) == ("rank 0: 2 entries, entry 0: "
                                              "(0, (20, 300), 'float32'); "
                                              "rank 1: 0 entries, entry 0: none")
    assert disagreement([{"lr": 0.1, "t": 2}, {"lr": 0.2, "t": 2}]) == (
        "rank 0: lr=0.1; rank 1: lr=0.2")


def test_sampler_shards_are_disjoint_equal_and_cover_the_set():
    for n, w in [(10, 2), (11, 2), (7, 3), (1, 2), (0, 2)]:
        np.random.seed(3)
        shards = []
        for r in range(w):
            np.random.seed(3)  # every rank seeded alike draws the same permutation
            shards.append(list(dist.DistributedSampler(n, w, r)))
        lengths = {len(s) for s in shards}
        assert len(lengths) == 1 and lengths.pop() == -(-n // w), (n, w, shards)
        union = [i for s in shards for i in s]
        assert set(union) == set(range(n)), (n, w)
        assert len(union) - n == (-n) % w  # only the padding repeats indices
    # unpadded: an exact partition; drop_last: truncated to equal shards
    exact = [list(dist.DistributedSampler(7, 2, r, shuffle=False, pad=False)) for r in (0, 1)]
    assert exact == [[0, 2, 4, 6], [1, 3, 5]]
    cut = [list(dist.DistributedSampler(7, 2, r, shuffle=False, drop_last=True)) for r in (0, 1)]
    assert cut == [[0, 2, 4], [1, 3, 5]]


def test_sampler_draws_the_loaders_permutation_and_set_epoch_changes_a_seeded_one():
    np.random.seed(5)
    want = np.random.permutation(9)
    np.random.seed(5)
    s = dist.DistributedSampler(9, 2, 1)
    assert list(s) == np.resize(want, 10)[1::2].tolist()  # padded with the first index
    seeded = dist.DistributedSampler(100, 2, 0, seed=1)
    first, again = list(seeded), list(seeded)
    assert first == again  # the global state does not matter with a seed
    seeded.set_epoch(1)
    other = dist.DistributedSampler(100, 2, 1, seed=1)
    other.set_epoch(1)
    assert list(seeded) != first and sorted([*seeded, *other]) == list(range(100))
    with pytest.raises(ValueError, match="rank 2"):
        dist.DistributedSampler(10, 2, 2)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(shuffle="False"), TypeError, "shuffle must be True or False"),  # (shuffled)
    (dict(shuffle=False, drop_last="False"), TypeError, "drop_last"),  # (dropped index 4)
    (dict(pad=1), TypeError, "pad must be True or False"),
    (dict(num_replicas=2.5), TypeError, "num_replicas must be an integer"),  # (was 2)
    (dict(size=5.7), TypeError, "size must be an integer"),  # (was 5)
    (dict(rank="0"), TypeError, "rank must be an integer"),  # (was Python's '<=' error)
    (dict(seed=1.5), TypeError, "seed must be an integer"),
    (dict(size=-1), ValueError, "size must be >= 0"),
    (dict(num_replicas=0), ValueError, "num_replicas must be >= 1"),
])
def test_sampler_arguments_are_checked(kwargs, error, message):
    """(An audit.) Strings, floats and ints as flags and sizes were taken silently."""
    args = dict(size=5, num_replicas=2, rank=0, **{})
    args.update(kwargs)
    with pytest.raises(error, match=message):
        dist.DistributedSampler(**args)
    ok = dist.DistributedSampler(np.int64(5), np.int64(2), np.int64(1), shuffle=np.False_)
    assert list(ok) == [1, 3, 0] and ok.shuffle is False
    with pytest.raises(TypeError, match="epoch must be an integer"):
        ok.set_epoch(1.5)
    with pytest.raises(ValueError, match="seed must be >= 0, found -1"):
        dist.DistributedSampler(10, 2, 0, seed=-1)  # (was numpy's error at the first iter)
    top = dist.DistributedSampler(10, 2, 0, seed=2**32 - 1)
    with pytest.raises(ValueError, match=r"seed \+ epoch must be < 2\*\*32"):
        top.set_epoch(1)
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        top.set_epoch(-1)


def test_dataloader_with_a_sampler_batches_its_shard():
    data = ndl.data.NDArrayDataset(np.arange(10.0).reshape(10, 1))
    sampler = dist.DistributedSampler(10, 2, 1, shuffle=False)
    loader = ndl.data.DataLoader(data, 2, sampler=sampler)
    got = [b[0].numpy().ravel().tolist() for b in loader]
    assert got == [[1.0, 3.0], [5.0, 7.0], [9.0]] and len(loader) == 3
    with pytest.raises(ValueError, match="sampler and shuffle"):
        ndl.data.DataLoader(data, 2, shuffle=True, sampler=sampler)


class FakeCudaArray:
    """What the staging path uses of a cupy array: shape, dtype, flags, get(out=), set(),
    copy(), item assignment, device.synchronize(), and the CUDA array interface marker."""

    __cuda_array_interface__ = {}  # only its presence is looked at

    def __init__(self, host: np.ndarray):
        self.host = host
        self.shape, self.dtype, self.flags = host.shape, host.dtype, host.flags
        self.device = type("Dev", (), {"synchronize": lambda self: None})()
        self.copies = []

    def get(self, out):
        out[...] = self.host
        self.copies.append("d2h")

    def set(self, host):
        self.host[...] = host
        self.copies.append("h2d")

    def copy(self):
        return FakeCudaArray(self.host.copy())

    def __setitem__(self, key, value):
        self.host[key] = value.host


def test_cuda_arrays_stage_through_one_growing_pinned_buffer(monkeypatch):
    allocations = []

    def alloc(nbytes, like):
        allocations.append(nbytes)
        return np.zeros(nbytes, dtype=np.uint8)

    staging = HostStaging(alloc)
    seen = []

    def doubling(buf):  # what a 2-rank Allreduce of equal arrays gives
        seen.append(buf)
        buf *= 2

    a = FakeCudaArray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert staging.run(a, doubling) is a
    assert np.array_equal(a.host, 2 * np.arange(6, dtype=np.float32).reshape(2, 3))
    assert a.copies == ["d2h", "h2d"] and seen[0].dtype == np.float32
    b = FakeCudaArray(np.ones(3, dtype=np.float64))  # 24 bytes: fits, no new allocation
    staging.run(b, doubling)
    c = FakeCudaArray(np.ones(100, dtype=np.int64))  # 800 bytes: the buffer grows once
    staging.run(c, doubling)
    assert allocations == [24, 800] and (b.host == 2).all() and (c.host == 2).all()
    # non-contiguous: staged through a contiguous copy, written back into the strided view
    base = np.zeros((4, 4), dtype=np.float32)
    base[:, ::2] = 1
    strided = FakeCudaArray(base[:, ::2])
    staging.run(strided, doubling)
    assert (base[:, ::2] == 2).all() and (base[:, 1::2] == 0).all()
    # comm routes cuda arrays: CUDA-aware MPI gets the array itself, else the staging
    monkeypatch.setattr(comm._World, "staging", staging)
    monkeypatch.setattr(comm._World, "cuda_aware", True)
    direct = []
    d = FakeCudaArray(np.ones(2, dtype=np.float32))
    assert comm._collective(d, direct.append) is d and direct == [d] and d.copies == []
    monkeypatch.setattr(comm._World, "cuda_aware", False)
    comm._collective(d, doubling)
    assert d.copies == ["d2h", "h2d"] and (d.host == 2).all()


def test_cuda_awareness_from_mpi_memory_alloc_kinds_or_the_environment(monkeypatch):
    class Info:
        def __init__(self, kinds):
            self.kinds = kinds

        def Get(self, key):  # noqa: N802 - mpi4py's name
            return self.kinds if key == "mpi_memory_alloc_kinds" else None

    class Comm:
        def __init__(self, kinds):
            self.kinds = kinds

        def Get_info(self):  # noqa: N802
            return Info(self.kinds)

    class NoQuery:
        pass

    class Yes:
        @staticmethod
        def Query_cuda_support():  # noqa: N802
            return True

    monkeypatch.delenv("NEEDLE_MPI_CUDA_AWARE", raising=False)
    assert comm._query_cuda_aware(NoQuery, Comm("mpi,system")) is False  # the mpich wheel's
    assert comm._query_cuda_aware(NoQuery, Comm("mpi,system,cuda:device")) is True
    assert comm._query_cuda_aware(NoQuery, Comm(None)) is False
    assert comm._query_cuda_aware(Yes, Comm(None)) is True
    monkeypatch.setenv("NEEDLE_MPI_CUDA_AWARE", "0")
    assert comm._query_cuda_aware(Yes, Comm("cuda")) is False


@needs_mpi4py
def test_needle_train_distributed_outside_mpiexec_is_the_plain_run(tmp_path):
    recipe = ["--epochs", "1", "--hidden-dim", "16", "--batch-size", "500", "--quiet"]
    for name, extra in (("plain", []), ("world1", ["--distributed"])):
        subprocess.run([sys.executable, "-m", "needle.apps.train", *recipe, *extra,
                        "--checkpoint", str(tmp_path / f"{name}.npz")],
                       check=True, capture_output=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    plain, world1 = ndl.load(tmp_path / "plain.npz"), ndl.load(tmp_path / "world1.npz")
    assert plain["model"].keys() == world1["model"].keys()
    for key, value in plain["model"].items():
        assert np.array_equal(value.numpy(), world1["model"][key].numpy()), key


# ----- two ranks -------------------------------------------------------------------------

def _ok_lines(out: subprocess.CompletedProcess) -> list[str]:
    """The `rank R ok ...` reports (mpiexec may join two ranks' lines into one)."""
    assert out.returncode == 0, out.stdout + out.stderr
    return [m.strip() for m in re.findall(r"rank \d ok .*?(?=rank \d |\n|$)", out.stdout)]


@needs_mpiexec
def test_two_ranks_allreduce_and_broadcast_and_refuse_mismatches():
    lines = _ok_lines(mpiexec([str(HERE / "mpi_cases.py"), "collectives"], timeout=120))
    for r in (0, 1):
        assert f"rank {r} ok values" in lines
        for name in ("shape", "dtype", "op", "parameters", "module", "buffers", "device"):
            assert any(line.startswith(f"rank {r} ok {name} mismatch") for line in lines), lines


@needs_mpiexec
def test_distributed_optimizer_refuses_optimizers_that_differ_between_ranks():
    lines = _ok_lines(mpiexec([str(HERE / "mpi_cases.py"), "optimizers"], timeout=120))
    for r in (0, 1):
        for name in ("optimizer", "lr", "t", "steps"):
            assert any(line.startswith(f"rank {r} ok {name} mismatch") for line in lines), lines
        assert f"rank {r} ok same state" in lines, lines


@needs_mpiexec
def test_a_sampler_over_ranks_seeded_differently_is_refused():
    lines = _ok_lines(mpiexec([str(HERE / "mpi_cases.py"), "sampler"], timeout=120))
    assert sorted(line.split(":")[0] for line in lines) == [
        "rank 0 ok different seeds", "rank 0 ok seeded", "rank 1 ok different seeds",
        "rank 1 ok seeded"], lines


@needs_mpiexec
def test_two_ranks_match_one_process_on_the_global_batch_with_sgd_and_adam():
    lines = _ok_lines(mpiexec([str(HERE / "mpi_cases.py"), "parity"], timeout=120))
    assert sorted(line.split(" relative")[0] for line in lines) == [
        "rank 0 ok adam", "rank 0 ok sgd", "rank 1 ok adam", "rank 1 ok sgd"], lines


@needs_mpiexec
def test_a_compiled_step_replays_the_averaging_of_the_gradients():
    lines = _ok_lines(mpiexec([str(HERE / "mpi_cases.py"), "compiled"], timeout=120))
    assert sorted(lines) == ["rank 0 ok compiled", "rank 1 ok compiled"], lines


@needs_mpiexec
def test_jax_gradients_small_and_big_are_averaged():
    if not ndl.jax().enabled():
        pytest.skip(ndl.jax().unavailable_reason())
    lines = _ok_lines(mpiexec([str(HERE / "mpi_cases.py"), "jax"], timeout=120))
    assert sorted(lines) == ["rank 0 ok jax", "rank 1 ok jax"], lines


@needs_mpiexec
def test_clip_grad_norm_clips_the_averaged_gradients():
    lines = _ok_lines(mpiexec([str(HERE / "mpi_cases.py"), "clip"], timeout=120))
    assert sorted(line.split(" clip")[0] for line in lines) == ["rank 0 ok", "rank 1 ok"], lines


@needs_mpiexec
def test_gradients_that_share_memory_are_averaged_once():
    lines = _ok_lines(mpiexec([str(HERE / "mpi_cases.py"), "shared"], timeout=120))
    assert sorted(lines) == ["rank 0 ok shared gradients", "rank 1 ok shared gradients"], lines


@needs_mpiexec
def test_a_failing_rank_ends_the_job_and_leaves_the_last_checkpoint(tmp_path):
    ck = tmp_path / "run.npz"
    args = [str(HERE / "mpi_cases.py"), "fault", "--epochs", "3", "--hidden-dim", "16",
            "--batch-size", "500", "--checkpoint", str(ck), "--quiet", "--distributed"]
    start = time.perf_counter()
    out = mpiexec(args, timeout=60)  # a hang fails here
    elapsed = time.perf_counter() - start
    assert out.returncode != 0, out.stdout + out.stderr
    assert "injected failure on rank 1" in out.stderr and "aborting the job" in out.stderr
    assert elapsed < 30, elapsed
    saved = ndl.load(ck)  # intact: written atomically by rank 0 after epoch 1
    assert saved["epoch"] == 1 and saved["config"]["hidden_dim"] == 16
    assert not [p for p in tmp_path.iterdir() if p != ck]  # no temporary file left behind


@needs_mpiexec
@pytest.mark.parametrize("mode", ["exit0", "exit3", "barrier"])
def test_a_rank_that_exits_early_ends_the_job(mode):
    out = mpiexec([str(HERE / "mpi_cases.py"), "exit", mode], timeout=60)  # a hang fails here
    assert out.returncode != 0 and "rank 1 of 2 exited while another rank waits" in out.stderr, (
        out.stdout + out.stderr)


@needs_mpiexec
@pytest.mark.parametrize("mode", ["end", "finalize"])
def test_ranks_that_end_at_different_times_end_cleanly(mode):
    lines = _ok_lines(mpiexec([str(HERE / "mpi_cases.py"), "exit", mode], timeout=60))
    assert sorted(lines) == [f"rank 0 ok {mode}", f"rank 1 ok {mode}"], lines


@needs_mpiexec
def test_needle_train_clips_over_two_ranks(tmp_path):
    """--clip with --distributed was refused (each rank clipped its own gradients before the
    averaging); clip_grad_norm_ now clips the averaged gradients (the "clip" case)."""
    out = mpiexec(["-m", "needle.apps.train", "--epochs", "1", "--hidden-dim", "16",
                   "--batch-size", "500", "--quiet", "--distributed", "--clip", "0.5",
                   "--checkpoint", str(tmp_path / "ck.npz")], timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "ck.npz").is_file()


@needs_mpiexec
def test_a_resumed_two_rank_run_is_the_uninterrupted_one(tmp_path):
    train = ["-m", "needle.apps.train", "--epochs", "2", "--hidden-dim", "16", "--batch-size",
             "500", "--quiet", "--distributed"]
    whole, part = tmp_path / "whole.npz", tmp_path / "part.npz"
    log = tmp_path / "log.csv"  # rank 0 alone writes the training-curve log
    for args in (["--checkpoint", str(whole), "--log-csv", str(log)],
                 ["--checkpoint", str(part), "--stop-after", "1"], ["--resume", str(part)]):
        out = mpiexec([*train, *args], timeout=120, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
    rows = log.read_text().splitlines()
    assert rows[0].startswith("epoch,") and [r.split(",")[0] for r in rows[1:]] == ["1", "2"]
    a, b = ndl.load(whole), ndl.load(part)
    assert a["epoch"] == b["epoch"] == 2
    for key, value in a["model"].items():  # rank 1's shard follows the restored random state
        assert np.array_equal(value.numpy(), b["model"][key].numpy()), key


# the main job's recipe (MLPResNet hidden 256, Adam lr 0.001, shifts of 2) cut to 5 epochs:
# shorter or faster recipes (2-4 epochs, lr 0.01, hidden 32-128) differ by 0.5-0.8 points
# between seeds of one process already, so they cannot show agreement to 0.3
ACCURACY_RECIPE = ["--epochs", "5"]


def _accuracy(text: str) -> float:
    return float(re.search(r"test accuracy ([0-9.]+)%", text).group(1))


@pytest.mark.slow
@needs_mpiexec
def test_needle_train_distributed_reaches_the_single_process_accuracy(tmp_path):
    train = [sys.executable, "-m", "needle.apps.train", *ACCURACY_RECIPE, "--quiet"]
    single = subprocess.run(train, capture_output=True, text=True, timeout=300, check=True,
                            stdin=subprocess.DEVNULL, env={**os.environ, **ONE_THREAD})
    out = mpiexec(["-m", "needle.apps.train", *ACCURACY_RECIPE, "--distributed"],
                  timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 MPI ranks" in out.stdout
    assert out.stdout.count("final: test accuracy") == 1  # rank 0 alone prints
    a, b = _accuracy(single.stdout), _accuracy(out.stdout)
    assert abs(a - b) <= 0.3, (a, b)


@needs_mpiexec
def test_needle_train_distributed_refuses_what_it_cannot_split(tmp_path):
    out = mpiexec(["-m", "needle.apps.train", "--batch-size", "99", "--distributed"],
                  timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "multiple of the 2 ranks" in out.stderr, out.stderr
    out = mpiexec(["-m", "needle.apps.train", "--model", "lstm", "--distributed"],
                  timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "image models" in out.stderr, out.stderr

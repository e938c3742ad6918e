"""Programs that tests/test_distributed.py runs under `mpiexec -n 2`: `python mpi_cases.py CASE`.

Each case prints `rank R ok ...` lines on success; anything else (an assertion, a hang caught
by the test's timeout, a non-zero exit) fails the test.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import needle as ndl
import needle.distributed as dist


def collectives() -> None:
    """allreduce/broadcast on float32, float64, int64 of sizes 0, 1, 10**6; then mismatches."""
    r, w = dist.rank(), dist.world_size()
    assert w == 2, w
    for dtype in ("float32", "float64", "int64"):
        for n in (0, 1, 10**6):
            a = (np.arange(n) % 7 + 10 * r).astype(dtype)
            expected = sum((np.arange(n) % 7 + 10 * k).astype(dtype) for k in range(w))
            out = dist.allreduce(a)
            assert out is a and out.dtype == dtype and np.array_equal(a, expected), (dtype, n)
            if dtype != "int64":
                m = (np.arange(n) % 5 + r).astype(dtype)
                dist.allreduce(m, op="mean")
                assert np.array_equal(m, (np.arange(n) % 5 + 0.5).astype(dtype)), (dtype, n)
            b = np.full(n, r + 3, dtype=dtype)
            out = dist.broadcast(b, root=1)
            assert out is b and np.array_equal(b, np.full(n, 4, dtype=dtype)), (dtype, n)
    # Tensors on cpu and strict; a non-contiguous array is reduced and written back
    for device in (ndl.cpu(), ndl.strict()):
        t = ndl.Tensor(np.full((2, 3), float(r + 1)), device=device, dtype="float32")
        assert dist.allreduce(t, op="mean") is t
        assert np.array_equal(t.numpy(), np.full((2, 3), 1.5, dtype="float32")), device
    strided = np.zeros((4, 4))
    strided[:, ::2] = r + 1
    dist.allreduce(strided[:, ::2])
    assert (strided[:, ::2] == 3).all() and (strided[:, 1::2] == 0).all()
    for dtype, op in (("bool", "sum"), ("int64", "mean")):  # bool: mpi4py's "Invalid MPI_Op"
        try:
            dist.allreduce(np.ones(3, dtype=dtype), op=op)
        except TypeError as e:
            assert f"got {dtype}" in str(e), e
        else:
            raise AssertionError(f"no TypeError for allreduce of {dtype} with op={op}")
    flags = np.array([r == 0, True])
    assert dist.broadcast(flags).tolist() == [True, True]  # bool arrays still broadcast
    print(f"rank {r} ok values")
    for name, call in [
        ("shape", lambda: dist.allreduce(np.zeros(3 + r, dtype="float32"))),
        ("dtype", lambda: dist.allreduce(np.zeros(3, dtype="float32" if r else "float64"))),
        ("op", lambda: dist.allreduce(np.zeros(3)) if r else dist.broadcast(np.zeros(3))),
        # a model with one more layer on rank 1: its extra broadcast hung rank 1 before
        ("parameters", lambda: dist.distributed_optimizer(ndl.optim.SGD(
            ndl.nn.Sequential(*[ndl.nn.Linear(4, 4) for _ in range(1 + r)]).parameters()))),
        ("module", lambda: dist.broadcast_module(
            ndl.nn.Sequential(*[ndl.nn.Linear(4, 4) for _ in range(1 + r)]))),
        # one more BatchNorm on rank 1: its extra buffers' allreduce hung rank 1 before
        ("buffers", lambda: dist.average_buffers(
            ndl.nn.Sequential(*[ndl.nn.BatchNorm1d(4) for _ in range(1 + r)]))),
        # a parameter on strict on rank 0, on cpu on rank 1: MPI's "message truncated" before
        ("device", lambda: _mixed_devices(r).allreduce_gradients()),
    ]:
        try:
            call()
        except ValueError as e:
            assert "ranks disagree" in str(e) and "rank 0" in str(e) and "rank 1" in str(e), e
            assert name != "buffers" or "average_buffers" in str(e), e
            print(f"rank {r} ok {name} mismatch: {e}")
        else:
            raise AssertionError(f"no error for a {name} mismatch")
    dist.barrier()  # the world still works after the errors


def optimizers() -> None:
    """distributed_optimizer refuses optimizers that differ between the ranks, naming what."""
    r = dist.rank()

    def trained(make, steps: int, skip_first: bool = False):
        model = ndl.nn.Sequential(ndl.nn.Linear(3, 2), ndl.nn.Linear(2, 2))
        opt = make(model.parameters())
        for k in range(steps):  # local steps, as a checkpoint loaded on one rank would give
            opt.reset_grad()
            model(ndl.Tensor(np.ones((2, 3)), dtype="float32")).sum().backward()
            if skip_first and k == 0:
                model.parameters()[0].grad = None
            opt.step()
        return opt

    adam = ndl.optim.Adam
    for name, make, steps, skip in [
        ("optimizer", adam if r else ndl.optim.SGD, 0, False),
        ("lr", lambda ps: adam(ps, lr=0.01 * (r + 1)), 0, False),
        ("t", adam, 2 * r, False),  # rank 1 alone resumed: t, steps and state differ
        ("steps", adam, 2, r == 1),  # the same t and state, not the same counts
    ]:
        opt = trained(make, steps, skip)
        try:
            dist.distributed_optimizer(opt)
        except ValueError as e:
            assert "ranks disagree" in str(e) and f"{name}=" in str(e), e
            assert name != "steps" or "t=" not in str(e), e  # only what differs is named
            print(f"rank {r} ok {name} mismatch: {e}")
        else:
            raise AssertionError(f"no error for a {name} mismatch")
    dist.distributed_optimizer(trained(adam, 2))  # the same state on every rank: accepted
    print(f"rank {r} ok same state")


def sampler() -> None:
    """A sampler without seed= over ranks seeded differently is a ValueError at iter();
    seeded alike, or with seed=, the shards partition the set."""
    r, w = dist.rank(), dist.world_size()
    np.random.seed(100 + r)
    try:
        list(dist.DistributedSampler(10, w, r))
    except ValueError as e:
        assert "seed" in str(e) and "permutation" in str(e), e
        print(f"rank {r} ok different seeds: {e}")
    else:
        raise AssertionError("no error for ranks seeded differently")
    for seed, global_seed in ((None, 3), (7, 100 + r)):
        np.random.seed(global_seed)
        shards = dist.all_gather_object(list(dist.DistributedSampler(10, w, r, seed=seed)))
        assert sorted(i for shard in shards for i in shard) == list(range(10)), shards
    print(f"rank {r} ok seeded")


def _mixed_devices(r: int):
    """A distributed SGD over two small layers, the second on strict on rank 0 only."""
    layers = [ndl.nn.Linear(4, 3), ndl.nn.Linear(4, 3, device=ndl.strict() if r == 0 else None)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = dist.distributed_optimizer(ndl.optim.SGD(params, lr=0.1))
    for p in params:
        p.grad = ndl.Tensor(np.ones(p.shape), device=p.device, dtype="float32")
    return opt


def _mlp(seed: int) -> ndl.nn.Module:
    """No BatchNorm, no dropout; the 300 x 200 weight is above the optimizer's flat_max_size,
    so it travels on its own while the others share one flat bucket."""
    np.random.seed(seed)
    nn = ndl.nn
    return nn.Sequential(nn.Linear(20, 300), nn.ReLU(), nn.Linear(300, 200), nn.Tanh(),
                         nn.Linear(200, 10))


def _train(model, opt, batches) -> list[np.ndarray]:
    loss_fn = ndl.nn.SoftmaxLoss()
    for x, y in batches:
        opt.reset_grad()
        loss_fn(model(ndl.Tensor(x, dtype="float32")), ndl.Tensor(y)).backward()
        opt.step()
    return [p.numpy() for p in model.parameters()]


def parity() -> None:
    """20 SGD and 20 Adam steps: 2 ranks on batch b each == one process on batch 2b."""
    r, w = dist.rank(), dist.world_size()
    rng = np.random.RandomState(7)
    data = [(rng.randn(16, 20), rng.randint(0, 10, 16)) for _ in range(20)]
    for name, make in [("sgd", lambda ps: ndl.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                         weight_decay=1e-3)),
                       # no weight decay for Adam: where wd p cancels the gradient to ~eps,
                       # Adam's normalised step turns float32 rounding of the sum into
                       # differences of order lr (seen: 1e-3), in either summation order
                       ("adam", lambda ps: ndl.optim.Adam(ps, lr=0.001))]:
        model = _mlp(seed=r)  # a different start on every rank: broadcast must fix it
        opt = dist.distributed_optimizer(make(model.parameters()), module=model)
        shard = [(x[r::w], y[r::w]) for x, y in data]
        got = _train(model, opt, shard)
        single = _mlp(seed=0)
        want = _train(single, make(single.parameters()), data)
        # relative in the 2-norm, parameter by parameter; the largest single element's
        # difference relative to the parameter's largest magnitude is printed too
        worst = max(float(np.linalg.norm(g - e) / np.linalg.norm(e)) for g, e in zip(got, want))
        elementwise = max(float(np.abs(g - e).max() / np.abs(e).max()) for g, e in zip(got, want))
        print(f"rank {r} {name}: norm-relative {worst:.2e}, elementwise {elementwise:.2e}")
        assert worst <= 1e-6, (name, worst)
        moved = max(float(np.abs(e - p.numpy()).max()) for e, p in zip(want, _mlp(0).parameters()))
        assert moved > 5e-3, (name, moved)  # the steps changed the weights
        print(f"rank {r} ok {name} relative difference {worst:.2e}")


def jax() -> None:
    """SGD on jax (immutable arrays): small gradients (a flat array) and a big one (its own),
    2 ranks on batch b each == one process on batch 2b."""
    r, w = dist.rank(), dist.world_size()
    device, nn = ndl.jax(), ndl.nn
    rng = np.random.RandomState(5)
    data = [(rng.randn(8, 6), rng.randint(0, 4, 8)) for _ in range(3)]
    results = []
    for shard, world in (([(x[r::w], y[r::w]) for x, y in data], True), (data, False)):
        np.random.seed(r if world else 0)
        model = nn.Sequential(nn.Linear(6, 200, device=device), nn.ReLU(),
                              nn.Linear(200, 200, device=device), nn.Linear(200, 4, device=device))
        opt = ndl.optim.SGD(model.parameters(), lr=0.1)
        if world:
            opt = dist.distributed_optimizer(opt, module=model)
        for x, y in shard:
            opt.reset_grad()
            ndl.nn.SoftmaxLoss()(model(ndl.Tensor(x, device=device, dtype="float32")),
                                 ndl.Tensor(y, device=device)).backward()
            opt.step()
        results.append([p.numpy() for p in model.parameters()])
    worst = max(float(np.linalg.norm(g - e) / np.linalg.norm(e)) for g, e in zip(*results))
    assert worst <= 1e-6, worst
    print(f"rank {r} ok jax")


def shared() -> None:
    """Gradients that share memory (one array for two parameters, overlapping views) are
    averaged once each, big and small alike."""
    r = dist.rank()
    n = ndl.optim.Optimizer.flat_max_size + 1
    params = [ndl.nn.Parameter(np.zeros(n, dtype="float32")) for _ in range(4)]
    params += [ndl.nn.Parameter(np.zeros(3, dtype="float32")) for _ in range(2)]
    opt = dist.distributed_optimizer(ndl.optim.SGD(params, lr=1.0))
    base = np.full(2 * n, 2.0 * (r + 1), dtype="float32")  # mean over the ranks: 3
    one = ndl.Tensor.make_const(np.full(n, 2.0 * (r + 1), dtype="float32"))
    params[0].grad = params[1].grad = one  # the same Tensor
    params[2].grad = ndl.Tensor.make_const(base[:n])  # views of one array that overlap
    params[3].grad = ndl.Tensor.make_const(base[1:n + 1])
    small = ndl.Tensor.make_const(np.full(3, 2.0 * (r + 1), dtype="float32"))
    params[4].grad = params[5].grad = small
    opt.allreduce_gradients()
    for k, p in enumerate(params):
        assert np.array_equal(p.grad.numpy(), np.full(p.shape, 3.0, dtype="float32")), k
    opt.allreduce_gradients()  # again, on the means themselves: they stay
    assert all((p.grad.numpy() == 3).all() for p in params)
    print(f"rank {r} ok shared gradients")


def compiled() -> None:
    """A compiled step with a distributed optimizer: bit-equal to the same eager steps (the
    gradients' averaging over the ranks is replayed with the optimizer's step)."""
    r, w = dist.rank(), dist.world_size()
    rng = np.random.RandomState(3)
    data = [(rng.randn(8, 20)[r::w], rng.randint(0, 10, 8)[r::w]) for _ in range(6)]
    loss_fn = ndl.nn.SoftmaxLoss()
    results = []
    for compile_it in (False, True):
        model = _mlp(seed=r)
        opt = dist.distributed_optimizer(ndl.optim.Adam(model.parameters(), lr=0.01),
                                         module=model)

        def step(x, y, model=model, opt=opt):
            opt.reset_grad()
            loss = loss_fn(model(x), y)
            loss.backward(create_graph=False)
            opt.step()
            return loss

        run = ndl.compile(step) if compile_it else step
        losses = [run(ndl.Tensor(x, dtype="float32", requires_grad=False),
                      ndl.Tensor(y, requires_grad=False)).numpy() for x, y in data]
        results.append(losses + [p.numpy() for p in model.parameters()])
    assert all(np.array_equal(a, b) for a, b in zip(*results))
    print(f"rank {r} ok compiled")


def exits() -> None:
    """Rank 1 leaves early (`exit0`, `exit3`: sys.exit in training; `barrier`: while rank 0
    waits in barrier()), or both end normally at different times without finalize() (`end`),
    or with rank 0 alone calling finalize() (`finalize`: that rank hung in the exit check)."""
    r, mode = dist.rank(), sys.argv[2]
    model = ndl.nn.Linear(4, 2)
    opt = dist.distributed_optimizer(ndl.optim.SGD(model.parameters(), lr=0.1), module=model)
    if mode == "barrier":
        if r == 1:
            sys.exit(0)
        dist.barrier()
    for i in range(4):
        opt.reset_grad()
        model(ndl.Tensor(np.ones((3, 4)), dtype="float32")).sum().backward()
        if r == 1 and mode in ("exit0", "exit3") and i == 2:
            sys.exit(int(mode[-1]))
        opt.step()
    print(f"rank {r} ok {mode}", flush=True)
    if r == 1:
        sys.exit(0)  # at the end, as a script that ends with sys.exit(main())
    if mode == "finalize":
        dist.finalize()
    time.sleep(1)  # rank 1 has long left: its exit did not end this rank


def clip() -> None:
    """clip_grad_norm_ before opt.step() clips the gradients averaged over the ranks: the same
    numbers as allreduce_gradients() first, and as one process on the global batch; compiled
    as eager."""
    r, w = dist.rank(), dist.world_size()
    rng = np.random.RandomState(0)
    data = [(rng.randn(8, 20) * 5, rng.randint(0, 10, 8)) for _ in range(5)]
    loss_fn = ndl.nn.SoftmaxLoss()
    results = {}
    for how in ("idiom", "explicit", "compiled", "single"):
        model = _mlp(seed=r if how != "single" else 0)
        opt = ndl.optim.SGD(model.parameters(), lr=0.5)
        if how != "single":
            opt = dist.distributed_optimizer(opt, module=model)

        def step(x, y, model=model, opt=opt, how=how):
            opt.reset_grad()
            loss_fn(model(x), y).backward()
            if how == "explicit":
                opt.allreduce_gradients()
            norm = ndl.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
            return norm

        run = ndl.compile(step) if how == "compiled" else step
        batches = data if how == "single" else [(x[r::w], y[r::w]) for x, y in data]
        norms = [float(run(ndl.Tensor(x, dtype="float32", requires_grad=False),
                           ndl.Tensor(y, requires_grad=False)).numpy()) for x, y in batches]
        assert min(norms) > 0.1, norms  # every step clipped
        results[how] = norms + [p.numpy() for p in model.parameters()]
    for how in ("explicit", "compiled"):
        assert all(np.array_equal(a, b) for a, b in zip(results["idiom"], results[how])), how
    got, want = results["idiom"], results["single"]
    worst = max(float(np.linalg.norm(g - e) / np.linalg.norm(e)) for g, e in zip(got, want))
    assert worst <= 1e-6, worst
    # two live wrappers over one model (one re-made after a resume): averaged once, not twice
    model = _mlp(seed=r)
    counted = dist.comm._World.comm

    def allreduces(opt) -> int:
        """The Allreduce calls of one clipped step of `opt`."""
        calls = []

        class Counting:  # the communicator, counting its Allreduce calls
            def __getattr__(self, name):
                if name == "Allreduce":
                    calls.append(name)
                return getattr(counted, name)
        dist.comm._World.comm = Counting()
        try:
            x, y = data[0]
            opt.reset_grad()
            loss_fn(model(ndl.Tensor(x[r::w], dtype="float32")), ndl.Tensor(y[r::w])).backward()
            ndl.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
        finally:
            dist.comm._World.comm = counted
        return len(calls)
    first = dist.distributed_optimizer(ndl.optim.SGD(model.parameters(), lr=0.5), module=model)
    alone = allreduces(first)
    second = dist.distributed_optimizer(ndl.optim.SGD(model.parameters(), lr=0.5), module=model)
    assert allreduces(second) == alone and first is not None, alone
    print(f"rank {r} ok clip {worst:.1e}")


def fault() -> None:
    """needle-train --distributed whose rank 1 raises after step 5 of epoch 2."""
    from needle.apps import train

    calls = {"n": 0}
    step = ndl.optim.Optimizer.step

    def failing_step(self):
        calls["n"] += 1
        if dist.rank() == 1 and calls["n"] == steps_per_epoch + 5:
            raise RuntimeError("injected failure on rank 1")
        step(self)

    argv = sys.argv[2:]
    steps_per_epoch = -(-5000 // int(argv[argv.index("--batch-size") + 1]))
    ndl.optim.Optimizer.step = failing_step
    sys.exit(train.main(argv))


if __name__ == "__main__":
    case = sys.argv[1]
    if case != "fault":
        dist.init()
    {"collectives": collectives, "parity": parity, "shared": shared, "compiled": compiled,
     "fault": fault, "jax": jax, "exit": exits,
     "clip": clip, "optimizers": optimizers,
     "sampler": sampler}[case]()

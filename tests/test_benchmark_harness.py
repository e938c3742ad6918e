"""The benchmarks' shared timing helpers (benchmarks/harness.py): their logic, not timings."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from harness import interleaved_ms  # noqa: E402


def test_interleaved_rounds_take_turns_and_drop_a_failing_step():
    """Every step warms up, then the rounds take turns (each step `per_round` times, each
    call closed by its sync); a step that raises is dropped with its error and the others go
    on: a GPU table keeps its other columns."""
    calls: list[str] = []
    count = {"c": 0}

    def failing_on_third():
        count["c"] += 1
        calls.append("c")
        if count["c"] == 3:
            raise RuntimeError("boom")

    steps = {"a": (lambda: calls.append("a"), None),
             "b": (lambda: calls.append("b"), lambda: calls.append("sync b")),
             "c": (failing_on_third, None)}
    ms, errors = interleaved_ms(steps, rounds=3, per_round=2, warmup=1)
    b_twice = ["b", "sync b", "b", "sync b"]
    assert calls == (["a", "b", "sync b", "c"]  # the warm-up
                     + ["a", "a", *b_twice, "c", "c"]  # round 1: the third call of c raises
                     + ["a", "a", *b_twice] * 2)  # rounds 2 and 3 without c
    assert errors == {"c": "RuntimeError: boom"} and set(ms) == {"a", "b"}
    assert all(v >= 0 for v in ms.values())


def test_a_step_failing_in_its_warm_up_is_dropped_before_the_rounds():
    def broken():
        raise ValueError("no GPU")

    ms, errors = interleaved_ms({"ok": (lambda: None, None), "broken": (broken, None)},
                                rounds=2, per_round=1, warmup=1)
    assert list(ms) == ["ok"] and errors == {"broken": "ValueError: no GPU"}


def test_the_host_overhead_steps_run_on_the_cpu(monkeypatch):
    """benchmarks/host_overhead.py's steps (the GPU table's models made tiny) each run: its
    sizes are gpu.py's module settings, restored here."""
    import gpu
    import host_overhead

    for name in ("E", "HIDDEN", "DIM_HEAD", "T", "IMAGE"):
        monkeypatch.setattr(gpu, name, getattr(gpu, name))
    host_overhead.small_models()
    assert (gpu.E, gpu.T, gpu.IMAGE) == (8, 4, 8)
    columns = ["needle cpu", "needle cpu compiled"]
    try:
        import torch  # noqa: F401

        columns += ["needle torch:cpu", "pytorch cpu"]
    except ImportError:
        pass
    for row in host_overhead.ROWS:
        for column in columns:
            step = host_overhead.make_step(row, column)
            step()
            step()  # (a compiled step replays from its second call)


def test_kernel_times_profiles_a_step_and_reports_its_ops(monkeypatch):
    """benchmarks/kernel_times.py on the cpu (its --cpu mode: op host times where a GPU gives
    kernel times), gpu.py's transformer made tiny: both frameworks' steps are profiled, every
    op's time and calls a step are positive, and the report's header sums them."""
    pytest.importorskip("torch", reason="kernel_times.py profiles with torch.profiler")
    import gpu
    import host_overhead
    import kernel_times

    for name in ("E", "HIDDEN", "DIM_HEAD", "T", "IMAGE"):
        monkeypatch.setattr(gpu, name, getattr(gpu, name))
    host_overhead.small_models()
    for framework in ("needle torch:cpu", "pytorch cpu"):
        step = kernel_times.cpu_step("transformer_b16", framework)
        ms, times = kernel_times.profile(step, lambda: None, cpu=True, steps=1)
        assert ms > 0 and any("mm" in key for key in times), framework
        assert all(us > 0 and calls > 0 for us, calls in times.values())
        header = kernel_times.report("transformer_b16", framework, ms, times, cpu=True)
        total = sum(us for us, _ in times.values()) / 1e3
        assert header.splitlines()[0].endswith(f"{total:.3f} ms of host time a step in "
                                               f"{sum(c for _, c in times.values()):.0f} ops")


def test_host_profile_groups_a_steps_own_time(monkeypatch):
    """benchmarks/host_profile.py on the cpu, gpu.py's transformer made tiny: the groups
    share out the profile's whole own time, needle's graph and numpy's calls among them,
    matmul_portable runs 48 times a step (16 products forward, 32 adjoints), and the report
    lists the groups, most first."""
    import gpu
    import host_overhead
    import host_profile

    for name in ("E", "HIDDEN", "DIM_HEAD", "T", "IMAGE"):
        monkeypatch.setattr(gpu, name, getattr(gpu, name))
    host_overhead.small_models()
    device, sync = host_profile.device_and_sync("cpu")
    step = gpu.needle_step("transformer", None, 2, device)
    step()
    stats = host_profile.profile(step, sync, steps=2)
    total, groups, functions = host_profile.grouped(stats, steps=2)
    own = sum(row[2] for row in stats.stats.values()) / 2  # (cc, nc, own, cumulative, ..)
    assert total == pytest.approx(own) and total > 0
    assert groups["needle/autograd/graph.py"] > 0
    assert any(name.startswith("needle/backends/") for name in groups)
    calls = {where.rsplit("(", 1)[1]: c for _, c, where in functions if "linalg.py" in where}
    assert calls["matmul_portable)"] == 48  # by name: "path:line(function)", any line
    text = host_profile.report("transformer_b16", "cpu", 1.0, total, groups, functions, top=5)
    lines = text.splitlines()
    assert lines[0].startswith("===== cpu transformer_b16: 1.00 ms/step unprofiled")
    shares = [float(line.split("%")[0]) for line in lines[1:6]]
    assert shares == sorted(shares, reverse=True) and len(lines) == 12
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        host_profile.device_and_sync("gpu")


def test_best_of_times_whole_runs_each_closed_by_a_sync():
    """harness.best_of: `runs` runs of `calls` calls, one sync after each run, the best run's
    seconds a call (a sleep of 2 ms a call reads at least 2 ms)."""
    import time

    from harness import best_of

    events = []
    per_call = best_of(lambda: events.append("call") or time.sleep(0.002), 3, 2,
                       lambda: events.append("sync"))
    assert events == ["call"] * 3 + ["sync"] + ["call"] * 3 + ["sync"]
    assert 0.002 <= per_call < 1.0


def test_cuda_wrappers_times_each_wrapper_with_numpy_in_cupys_place(capsys):
    """benchmarks/cuda_wrappers.py runs every cuda wrapper on numpy stand-ins (no GPU), prints
    one line each and their total a step, and gives the modules their device_of back."""
    import cuda_wrappers

    from needle.backends import affine_norm, sums

    before = (affine_norm.device_of, sums.device_of)
    totals = cuda_wrappers.main(["--calls", "5"])
    lines = capsys.readouterr().out.splitlines()
    steps = {step for step, *_ in cuda_wrappers.cases()}
    assert set(totals) == steps and all(t > 0 for t in totals.values())
    launches = [line for line in lines if "DirectLaunch of" in line]
    assert len(lines) == 2 + len(cuda_wrappers.cases()) + 2 * len(steps) + 1 + len(launches)
    for step, total in totals.items():
        assert f"{total:.1f}  a {step} step in all" in "\n".join(lines)
    assert len(launches) == 2 and all(float(line.split()[0]) > 0 for line in launches)
    assert (affine_norm.device_of, sums.device_of) == before


@pytest.mark.parametrize("kind", ["mlp", "resnet9"])
def test_the_pytorch_twins_have_the_needle_models_parameters(kind):
    """benchmarks/torch_models.py builds what needle's MLPResNet and ResNet9 are: the same
    number of parameter arrays of the same sizes (layouts differ: needle's Linear is (in, out),
    its Conv (k, k, in, out)), so the benchmarks race like against like."""
    pytest.importorskip("torch")
    import torch_models

    import needle as ndl
    from needle.apps.mlp_resnet import MLPResNet
    from needle.apps.models import ResNet9

    if kind == "mlp":
        ours, theirs = MLPResNet(784, 32, device=ndl.cpu()), torch_models.mlp_resnet(32)
    else:
        ours, theirs = ResNet9(device=ndl.cpu()), torch_models.resnet9()
    sizes = sorted(math.prod(p.shape) for p in ours.parameters())
    assert sizes == sorted(p.numel() for p in theirs.parameters()) and len(sizes) > 10


def test_gpu_py_cupy_launches_column_turns_direct_launches_off_during_its_step_only():
    """benchmarks/gpu.py --cupy-launches: the A/B column's step runs with launch.DIRECT off
    and gives the setting back after it, also when the step raises."""
    import gpu

    from needle.backends import launch

    seen = []

    def step():
        seen.append(launch.DIRECT)
        if len(seen) == 2:
            raise RuntimeError("boom")

    before = launch.DIRECT
    run = gpu.with_cupy_launches(step)
    run()
    with pytest.raises(RuntimeError):
        run()
    assert seen == [False, False] and launch.DIRECT is before


def test_affinity_probe_tells_waiting_from_working_and_pins_the_process():
    """benchmarks/affinity.py: a step that sleeps shows wall time but almost no thread CPU
    time, a busy step about as much of each, every call is closed by its sync; `pin` leaves
    the process on the one CPU it names."""
    import os
    import time

    import affinity

    syncs = []
    wall, busy = affinity.timed(lambda: time.sleep(0.02), lambda: syncs.append(1), steps=3)
    assert syncs == [1, 1, 1] and wall >= 19 and busy < 5

    def spin():
        end = time.thread_time() + 0.01
        while time.thread_time() < end:
            pass
    wall, busy = affinity.timed(spin, lambda: None, steps=3)
    assert busy >= 9.5 and wall >= 0.9 * busy  # (two clocks: not to the microsecond)
    before = os.sched_getaffinity(0)
    try:
        cpu = min(before)
        affinity.pin(cpu)
        assert os.sched_getaffinity(0) == {cpu}
    finally:
        os.sched_setaffinity(0, before)

"""What the benchmarks share: resident memory (Linux /proc; ru_maxrss elsewhere), timed steps,
and rounds of fresh processes per framework."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Mapping


def rss_mb() -> float:
    """The resident set size now, in MB (without /proc: the peak so far, ru_maxrss)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return _ru_maxrss_mb()


def _ru_maxrss_mb() -> float:
    """ru_maxrss in MB: kilobytes on Linux, bytes on macOS."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def reset_peak_rss() -> None:
    """Start the kernel's high-water mark (VmHWM) afresh at the current RSS."""
    try:
        with open(f"/proc/{os.getpid()}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """VmHWM: unlike ru_maxrss, it is not inherited from the parent across fork and exec."""
    try:
        with open(f"/proc/{os.getpid()}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return _ru_maxrss_mb()


def best_of(f: Callable[[], Any], calls: int, runs: int,
            sync: Callable[[], Any] = lambda: None) -> float:
    """The best of `runs` runs of `calls` calls of `f`, each run closed by `sync()` (a GPU's
    synchronisation): seconds a call."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            f()
        sync()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def timed_steps(step: Callable[[], Any], steps: int, *, warmup: int = 2,
                sync: Callable[[], Any] | None = None) -> dict:
    """Median ms of `steps` calls after `warmup` calls, each closed by `sync()` when given (a
    GPU's synchronisation), and the peak memory of them all (peak RSS minus the RSS before
    the first call)."""
    reset_peak_rss()
    before = rss_mb()
    for _ in range(warmup):
        step()
    if sync is not None:
        sync()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - start)
    return {"ms": 1e3 * statistics.median(times), "peak_mb": peak_rss_mb() - before}


def interleaved_ms(steps: Mapping[str, tuple[Callable[[], Any], Callable[[], Any] | None]],
                   rounds: int, per_round: int, *, warmup: int = 2,
                   ) -> tuple[dict[str, float], dict[str, str]]:
    """Median ms per step of each named (step, sync), timed in `rounds` rounds that take turns:
    each round times `per_round` calls of every step in turn, each closed by its sync. A slow
    stretch of a shared host then falls on all of them alike instead of on whichever ran
    during it. A step that raises is dropped: (medians, name -> its error)."""
    errors: dict[str, str] = {}
    times: dict[str, list[float]] = {name: [] for name in steps}

    def call(name: str, count: int, timed: bool) -> None:
        step, sync = steps[name]
        try:
            for _ in range(count):
                start = time.perf_counter()
                step()
                if sync is not None:
                    sync()
                if timed:
                    times[name].append(time.perf_counter() - start)
        except Exception as e:  # a failure is the step's entry, not the end of the table
            errors[name] = f"{type(e).__name__}: {e}"

    for name in steps:
        call(name, warmup, timed=False)
    for _ in range(rounds):
        for name in steps:
            if name not in errors:
                call(name, per_round, timed=True)
    return ({name: 1e3 * statistics.median(t) for name, t in times.items()
             if name not in errors}, errors)


def fresh_process_rounds(script: str, names: list[str], rounds: int,
                         args: list[str]) -> dict[str, list[dict]]:
    """Run `script --one NAME *args` in a fresh process per name, `rounds` times alternating;
    each prints one JSON line of figures, collected per name."""
    results: dict[str, list[dict]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            cmd = [sys.executable, script, "--one", name, *args]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            results[name].append(json.loads(out.strip().splitlines()[-1]))
    return results

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
from typing import Any, Callable


def rss_mb() -> float:
    """The resident set size now, in MB."""
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


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
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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

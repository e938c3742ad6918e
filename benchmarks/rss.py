"""Resident memory of this process, for the benchmarks (Linux /proc; ru_maxrss elsewhere)."""

from __future__ import annotations

import os
import resource


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

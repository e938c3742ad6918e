"""Where a needle step's host time goes: cProfile's own time of benchmarks/gpu.py's eager steps,
grouped by file (needle's modules, the array library's, builtins), then the functions with
the most own time and their calls per step.

On a GPU needle's eager steps are bound by the host (the GPU waits for the Python that
launches its kernels), so this is the map of what to cut there. The README's deterministic
profile of cupy's steps (seventh session, H100) came from this script's first version.
cProfile slows Python calls more than C calls, so read shares, not milliseconds; the
unprofiled step time is printed first.

    python benchmarks/host_profile.py resnet9_b1024,transformer_b256       (cuda, a GPU)
    python benchmarks/host_profile.py transformer_b16 --device torch:cuda --top 30
    python benchmarks/host_profile.py transformer_b16 --device cpu --tiny  (no GPU)
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu  # noqa: E402
from harness import best_of  # noqa: E402

import needle as ndl  # noqa: E402

DEVICES = ("cuda", "torch:cuda", "cpu", "torch:cpu")


def device_and_sync(name: str) -> tuple[ndl.Device, Callable[[], None]]:
    """needle's device `name` and a function that waits for its work."""
    if name == "cuda":
        return ndl.cuda(), gpu.sync_of("needle cuda")
    if name == "torch:cuda":
        return ndl.torch("cuda"), gpu.sync_of("needle torch:cuda")
    if name == "cpu":
        return ndl.cpu(), lambda: None
    if name == "torch:cpu":
        return ndl.torch("cpu"), lambda: None
    raise ValueError(f"unknown device {name!r}: one of {', '.join(DEVICES)}")


def step_ms(step: Callable[[], object], sync: Callable[[], None], steps: int) -> float:
    """The best of three runs of `steps` steps, ms a step, each run closed by `sync`."""
    return best_of(step, steps, 3, sync) * 1e3


def profile(step: Callable[[], object], sync: Callable[[], None], steps: int) -> pstats.Stats:
    """cProfile's statistics of `steps` steps (and the closing sync)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    sync()
    profiler.disable()
    return pstats.Stats(profiler)


def group_of(filename: str, function: str) -> str:
    """The group a profiled function counts in: needle's module (backends included), the
    array library's file, or the builtin itself."""
    if filename == "~":
        return f"builtin {function}"
    path = filename.replace("\\", "/")
    if "/needle/" in path:
        return "needle/" + path.rsplit("/needle/", 1)[1]
    if "/backends/" in path and "site-packages/" not in path:  # (an editable install's)
        return "needle/backends/" + path.rsplit("/backends/", 1)[1]
    if "site-packages/" in path:
        package, _, rest = path.rsplit("site-packages/", 1)[1].partition("/")
        return f"{package}/{rest.rsplit('/', 1)[-1]}" if rest else package
    return "other " + path.rsplit("/", 1)[-1]


def grouped(stats: pstats.Stats, steps: int
            ) -> tuple[float, collections.Counter, list[tuple[float, float, str]]]:
    """(own time a step in s, own time a step per group, [(own time a step, calls a step,
    function)] most first)."""
    groups: collections.Counter = collections.Counter()
    functions = []
    for (filename, line, function), (_, calls, own, _, _) in stats.stats.items():
        groups[group_of(filename, function)] += own / steps
        where = filename.replace("\\", "/").rsplit("site-packages/", 1)[-1]
        functions.append((own / steps, calls / steps, f"{where}:{line}({function})"))
    functions.sort(reverse=True)
    return sum(groups.values()), groups, functions


def report(row: str, device: str, ms: float, total: float, groups: collections.Counter,
           functions: list[tuple[float, float, str]], top: int) -> str:
    """The header, the groups and the `top` functions, one per line."""
    lines = [f"===== {device} {row}: {ms:.2f} ms/step unprofiled; profiled "
             f"{total * 1e3:.2f} ms/step of own time"]
    lines += [f"  {own / total * 100:5.1f}%  {own * 1e3:7.3f} ms  {name}"
              for name, own in groups.most_common(top)]
    lines.append("  --- functions: % of own time, calls a step")
    lines += [f"  {own / total * 100:5.1f}%  {calls:7.1f}  {where}"
              for own, calls, where in functions[:top]]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", help="comma-separated steps of benchmarks/gpu.py: "
                                f"{', '.join(gpu.STEPS)}")
    p.add_argument("--device", default="cuda", choices=DEVICES)
    p.add_argument("--steps", type=int, default=10, help="profiled steps (after 5 warm-up)")
    p.add_argument("--top", type=int, default=40, help="groups and functions shown")
    p.add_argument("--tiny", action="store_true",
                   help="benchmarks/host_overhead.py's tiny models (host time only)")
    args = p.parse_args()
    if args.tiny:
        import host_overhead

        host_overhead.small_models()
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in gpu.STEPS]
    if unknown:
        p.error(f"unknown steps {', '.join(unknown)}: benchmarks/gpu.py has {', '.join(gpu.STEPS)}")
    device, sync = device_and_sync(args.device)
    for row in rows:
        kind, size, batch = gpu.STEPS[row]
        step = gpu.needle_step(kind, size, batch, device)
        for _ in range(5):
            step()
        sync()
        ms = step_ms(step, sync, args.steps)
        total, groups, functions = grouped(profile(step, sync, args.steps), args.steps)
        print(report(row, args.device, ms, total, groups, functions, args.top), flush=True)


if __name__ == "__main__":
    main()

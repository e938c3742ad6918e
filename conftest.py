"""Test configuration: every computing test takes the `device` fixture, run on every device.

An unavailable device is skipped with its reason, summarised in one line per device at the end
(other skips are listed as usual); `--device cpu,strict` (or a repeated `--device`) narrows the
run to the named devices, and `--device torch:cuda` / `torch:mps` adds PyTorch's GPUs. Tests
marked `slow` run by default; `-m "not slow"` leaves them out.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Generator

import pytest

from needle import backends

# jax takes 75% of a GPU's memory at start in every process that uses it: with pytest-xdist's
# workers (and the Python subprocesses some tests start) on one GPU, the others then run out
# of memory (on an H100 without this: 171 cuda tests failed, 2026-11-27). The suite's
# processes let jax allocate as it goes, unless whoever runs it chose otherwise.
#: whether the environment named jax's preallocation itself (then it is left as named)
JAX_PREALLOCATE_NAMED = "XLA_PYTHON_CLIENT_PREALLOCATE" in os.environ
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# user_properties entry of a test skipped because its device is unavailable
DEVICE_SKIP = "needle_unavailable_device"

# the devices every run tries (unavailable ones are skipped): each kind of the device table
# with its default placement; and those only --device names: the kinds' other placements
DEVICE_NAMES = tuple(backends.DEVICES)
EXTRA_DEVICE_NAMES = tuple(f"{name}:{place}" for name, kind in backends.DEVICES.items()
                           for place in kind.places[1:])


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--device", action="append", default=None, metavar="NAME",
        help=f"run device-parametrized tests only on these devices, of "
             f"{DEVICE_NAMES + EXTRA_DEVICE_NAMES} (comma-separated or repeated)",
    )


def selected_devices(config: pytest.Config) -> tuple[str, ...]:
    """The device names chosen with --device (all of DEVICE_NAMES by default)."""
    raw = config.getoption("--device")
    if not raw:
        return DEVICE_NAMES
    names = tuple(n.strip() for item in raw for n in item.split(",") if n.strip())
    unknown = sorted(set(names) - set(DEVICE_NAMES + EXTRA_DEVICE_NAMES))
    if unknown:
        raise pytest.UsageError(f"--device: unknown device(s) {unknown}; choose from "
                                f"{DEVICE_NAMES + EXTRA_DEVICE_NAMES}")
    return tuple(dict.fromkeys(names))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", selected_devices(metafunc.config), indirect=True)


def make_device(name: str):
    """The Device a test name stands for: "torch:cuda" is `backends.torch("cuda")`."""
    kind, _, where = name.partition(":")
    factory = backends.DEVICES[kind].factory
    return factory(where) if where else factory()


@pytest.fixture
def device(request: pytest.FixtureRequest):
    """A needle Device; skipped, with the reason, where it is unavailable."""
    dev = make_device(request.param)
    if not dev.enabled():
        request.node.user_properties.append((DEVICE_SKIP, request.param))
        pytest.skip(dev.unavailable_reason())
    if dev.kind == "jax" and dev._xp is None:
        # the suite checks float64 everywhere (gradients by central differences), so it
        # opts in to jax's 64-bit types as a user would; tests/test_torch_and_jax_devices.py
        # checks the 32-bit default in a fresh process
        from needle.backends.jax_device import import_jax

        import_jax().config.update("jax_enable_x64", True)
    yield dev
    dev._pending = []  # a check a test left deferred (a GPU's) never fails the next test


@pytest.fixture
def gpu():
    """cuda(0) for the tests of cuda's own kernels (they run without --device); skipped,
    with the reason, where cupy or a GPU is missing."""
    dev = backends.cuda()
    if not dev.enabled():
        pytest.skip(dev.unavailable_reason())
    return dev


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter) -> Generator[None]:
    """One line per unavailable device instead of one per test (after pytest's own summary)."""
    stats = terminalreporter.stats
    if "skipped" not in stats:
        return (yield)
    skipped = stats["skipped"]
    devices = Counter()  # (device, reason) -> tests
    others = []
    for report in skipped:
        name = dict(getattr(report, "user_properties", ())).get(DEVICE_SKIP)
        if name is None:
            others.append(report)
        else:
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
            devices[name, reason] += 1
    stats["skipped"] = others  # pytest's short summary lists the other skips as usual
    try:
        return (yield)
    finally:
        stats["skipped"] = skipped  # the final counts include every skip
        if devices and "s" in terminalreporter.reportchars and not terminalreporter.no_summary:
            for (name, reason), n in devices.items():
                terminalreporter.write_line(f"{name}: {n} test{'s' * (n != 1)} skipped: "
                                            f"{reason}")

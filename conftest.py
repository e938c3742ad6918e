"""Test configuration: every computing test takes the `device` fixture, run on every device.

An unavailable device is skipped with its reason, summarised in one line per device at the end
(other skips are listed as usual); `--device cpu,strict` (or a repeated `--device`) narrows the
run to the named devices. Tests marked `slow` run by default; `-m "not slow"` leaves them out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator

import pytest

# user_properties entry of a test skipped because its device is unavailable
DEVICE_SKIP = "needle_unavailable_device"

DEVICE_NAMES = ("cpu", "cuda", "strict")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--device", action="append", default=None, metavar="NAME",
        help=f"run device-parametrized tests only on these devices, of {DEVICE_NAMES} "
             "(comma-separated or repeated)",
    )


def selected_devices(config: pytest.Config) -> tuple[str, ...]:
    """The device names chosen with --device (all by default)."""
    raw = config.getoption("--device")
    if not raw:
        return DEVICE_NAMES
    names = tuple(n.strip() for item in raw for n in item.split(",") if n.strip())
    unknown = sorted(set(names) - set(DEVICE_NAMES))
    if unknown:
        raise pytest.UsageError(f"--device: unknown device(s) {unknown}; choose from "
                                f"{DEVICE_NAMES}")
    return names


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    chosen = selected_devices(config)
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("device") if callspec else None
        (drop if name is not None and name not in chosen else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(params=DEVICE_NAMES)
def device(request: pytest.FixtureRequest):
    """A needle Device; skipped, with the reason, where it is unavailable."""
    from needle import backends

    dev = getattr(backends, request.param)()
    if not dev.enabled():
        request.node.user_properties.append((DEVICE_SKIP, request.param))
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

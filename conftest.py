"""Test configuration: every computing test takes the `device` fixture, run on every device.

An unavailable device is skipped with its reason (shown in pytest's summary);
`--device cpu,strict` (or a repeated `--device`) narrows the run to the named devices.
"""

from __future__ import annotations

import pytest

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
        pytest.skip(dev.unavailable_reason())
    return dev

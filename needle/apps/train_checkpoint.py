"""needle-train's checkpoint format: a dict written by `ndl.save` after every epoch with

    model       the model's state_dict
    optimizer   the optimizer's state_dict
    rng         numpy's global MT19937 state (keys, pos, has_gauss, cached_gaussian) and,
                under "device", the device generator's state where the device has its own
    config      every setting (train_config.SETTINGS) and where the run computed and found
                its data (PLACES: device, data_dir)
    epoch       epochs done
    seconds     training time of those epochs

Reading checks every field (a usage error naming the file otherwise) and fills in what older
checkpoints lack: `model` (written before --model: mlp) and `clip` (before --clip: 0.0).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

import needle as ndl
from needle.apps import checks
from needle.apps.train_config import SETTINGS

FIELDS = {"model": dict, "optimizer": dict, "rng": dict, "config": dict, "epoch": int,
          "seconds": float}
# settings added after the first checkpoints were written, and the value older runs had
ADDED_SETTINGS = {"model": "mlp", "clip": 0.0}


def read(parser: argparse.ArgumentParser, path: Path) -> dict[str, Any]:
    """The checkpoint at `path`, checked to be one that needle-train wrote."""
    try:
        ck = ndl.load(path)
    except (OSError, ValueError) as e:
        parser.error(f"--resume: cannot read the checkpoint {path}: {e}")
    if not isinstance(ck, dict):
        parser.error(f"--resume: {path} is not a needle-train checkpoint")
    if isinstance(ck.get("config"), dict):
        for key, value in ADDED_SETTINGS.items():
            ck["config"].setdefault(key, value)
    bad = [k for k, kind in FIELDS.items() if type(ck.get(k)) is not kind]
    if not bad:
        expected = {**{k: (type(v),) for k, v in SETTINGS.items()}, "device": (str,),
                    "data_dir": (str, type(None))}
        bad = [f"config[{k!r}]" for k, types in expected.items()
               if type(ck["config"].get(k, ...)) not in types] or checks.checkpoint_fields(ck)
    if bad:
        parser.error(f"--resume: {path} is not a needle-train checkpoint of this version "
                     f"(missing or malformed: {', '.join(bad)})")
    return ck


def restore(parser: argparse.ArgumentParser, path: Path, ck: dict[str, Any],
            model: ndl.nn.Module, opt: ndl.optim.Optimizer, device: ndl.Device,
            device_name: str) -> None:
    """Load the checkpoint `ck` (read from `path`) into a fresh model and optimizer, and set
    the random state (the device generator's only where `device_name` is the device the
    checkpoint ran on); a model it does not fit is a usage error."""
    try:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        set_rng_state(ck["rng"], device if ck["config"]["device"] == device_name else None)
    except (ValueError, TypeError, KeyError) as e:
        parser.error(f"--resume: {path} does not fit this model: {e}")


def write(path: Path, model: ndl.nn.Module, opt: ndl.optim.Optimizer, epoch: int,
          device: ndl.Device, config: dict[str, Any], seconds: float) -> None:
    """Save the run after `epoch` to `path` (atomically: `ndl.save`); OSError if it cannot."""
    ndl.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
              "rng": rng_state(device), "config": config, "seconds": seconds}, path)


def rng_state(device: ndl.Device) -> dict:
    """numpy's global state and, where it has its own, the device's training generator's."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"keys": keys, "pos": int(pos), "has_gauss": int(has_gauss),
             "cached_gaussian": float(cached)}
    device_state = device.rng_state()
    if device_state is not None:
        state["device"] = device_state
    return state


def set_rng_state(state: dict, device: ndl.Device | None) -> None:
    """Set numpy's global state and, where stored, the generator's of `device`, the device
    the state came from (None for another: a generator's state fits its own kind alone, and
    the new device's generator starts from the run's seed, which needle-train sets)."""
    np.random.set_state(("MT19937", np.asarray(state["keys"], dtype=np.uint32),
                         int(state["pos"]), int(state["has_gauss"]),
                         float(state["cached_gaussian"])))
    if "device" in state and device is not None:
        device.set_rng_state(state["device"])

"""Checkpoints: nested dicts/lists of Tensors, arrays and scalars in one pickle-free `.npz`.

Every array is a member of the zip (named by its path in the structure, e.g.
"model/modules.0.weight.npy"); a JSON manifest, stored as the uint8 member "__manifest__",
records the structure and the type of every leaf. `np.load(path, allow_pickle=False)` reads
the file. Writes are atomic: a temporary file in the same directory, then `os.replace`.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from typing import Any

import numpy as np

from .device import Device

MANIFEST = "__manifest__"
FORMAT = "needle-checkpoint"
VERSION = 1


def save(obj: Any, path: str | os.PathLike) -> None:
    """Write `obj` (nested dicts/lists/tuples of Tensors, numpy arrays, Python scalars,
    strings and None) to `path` as an `.npz`, atomically and bit-exactly."""
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(obj, "", arrays)
    manifest = json.dumps({"format": FORMAT, "version": VERSION, "tree": tree})
    arrays[MANIFEST] = np.frombuffer(manifest.encode("utf-8"), dtype=np.uint8)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED,
                                 allowZip64=True) as zf:
                for key, array in arrays.items():
                    with zf.open(key + ".npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, array, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(path: str | os.PathLike, device: Device | None = None) -> Any:
    """Read a checkpoint written by `save`; Tensors are restored on `device` (default cpu)."""
    from . import cpu

    device = cpu() if device is None else device
    path = os.fspath(path)
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("a single array, not an .npz archive")
        with npz:
            arrays = {key: npz[key] for key in npz.files}
    except FileNotFoundError:
        raise
    except Exception as e:  # truncated or corrupt: BadZipFile, ValueError, OSError, EOFError
        raise ValueError(f"load: {path!r} is not a readable needle checkpoint ({e})") from e
    if MANIFEST not in arrays:
        raise ValueError(f"load: {path!r} has no {MANIFEST!r} member: not a needle checkpoint")
    try:
        manifest = json.loads(arrays.pop(MANIFEST).tobytes().decode("utf-8"))
        if manifest.get("format") != FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}, expected {FORMAT!r}")
        return _decode(manifest["tree"], arrays, device)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"load: {path!r} has a corrupt manifest ({e!r})") from e


def _key(name: str, arrays: dict) -> str:
    """A member name for `name`, unique within the archive."""
    base = name or "value"
    key, n = base, 1
    while key in arrays or key == MANIFEST:
        n += 1
        key = f"{base}#{n}"
    return key


def _child(name: str, key: Any) -> str:
    return f"{name}/{key}" if name else str(key)


def _encode(obj: Any, name: str, arrays: dict[str, np.ndarray]) -> dict:
    """The manifest node for `obj`; its arrays are added to `arrays`."""
    from ..autograd import Tensor

    if isinstance(obj, Tensor):
        key = _key(name, arrays)
        arrays[key] = obj.numpy()
        return {"type": "tensor", "key": key, "requires_grad": bool(obj.requires_grad)}
    if isinstance(obj, (np.ndarray, np.generic)):
        if obj.dtype.hasobject:
            raise TypeError(f"save: {name or 'the object'} is an object array, which needs "
                            "pickle; expected a numeric, bool or string array")
        key = _key(name, arrays)
        arrays[key] = np.asarray(obj)
        return {"type": "ndarray" if isinstance(obj, np.ndarray) else "numpy_scalar",
                "key": key}
    if obj is None:
        return {"type": "none"}
    if isinstance(obj, (bool, int, float, str)):
        return {"type": type(obj).__name__, "value": obj}
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise TypeError(f"save: dict keys must be str or int, found {k!r} "
                                f"({type(k).__name__}) in {name or 'the object'}")
            items.append([k, _encode(v, _child(name, k), arrays)])
        return {"type": "dict", "items": items}
    if isinstance(obj, (list, tuple)):
        return {"type": type(obj).__name__,
                "items": [_encode(v, _child(name, i), arrays) for i, v in enumerate(obj)]}
    raise TypeError(f"save: cannot save {type(obj).__name__} at {name or 'the top level'!r}; "
                    "expected Tensors, numpy arrays, Python scalars, strings, None, "
                    "and dicts/lists/tuples of them")


def _decode(node: dict, arrays: dict[str, np.ndarray], device: Device) -> Any:
    """The object a manifest node describes."""
    from ..autograd import Tensor

    kind = node["type"]
    if kind == "tensor":
        data = device.from_numpy(arrays[node["key"]])
        return Tensor.make_const(data, requires_grad=node["requires_grad"], device=device)
    if kind == "ndarray":
        return arrays[node["key"]]
    if kind == "numpy_scalar":
        return arrays[node["key"]][()]
    if kind == "none":
        return None
    if kind in ("bool", "int", "float", "str"):
        value = node["value"]
        return float(value) if kind == "float" else value
    if kind == "dict":
        return {k: _decode(v, arrays, device) for k, v in node["items"]}
    if kind == "list":
        return [_decode(v, arrays, device) for v in node["items"]]
    if kind == "tuple":
        return tuple(_decode(v, arrays, device) for v in node["items"])
    raise ValueError(f"unknown node type {kind!r}")

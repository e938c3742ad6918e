"""ndl.save / ndl.load: nested dicts/lists of Tensors, arrays and scalars in one `.npz`;
ndl.save_safetensors / ndl.load_safetensors: flat weights in the safetensors format.

The structure becomes a JSON manifest (a tree of typed nodes) and every array a member of
the archive, named by its path in the structure (e.g. "model/modules.0.weight"; a path no
zip name can hold, with a NUL, a lone surrogate or over 64 KiB, gets a readable stand-in:
the manifest holds the keys, so every str key loads back as it was). Writing
and reading the archive of host arrays is `needle/archive.py`'s job; this file knows
Tensors and containers. Files are pickle-free: `np.load(path, allow_pickle=False)` reads
them. Structures nest at most `MAX_DEPTH` containers deep, on save and on load.
"""

from __future__ import annotations

import json
import os
from typing import Any, BinaryIO

from .archive import (
    MANIFEST,
    host_kind,
    member_name_fits,
    member_stand_in,
    read_archive,
    where,
    write_archive,
)
from .autograd import Tensor
from .backends import Device, cpu, host_array
from .nn.module import Parameter
from .safetensors_format import read_safetensors, write_safetensors

FORMAT = "needle-checkpoint"
VERSION = 1
#: the deepest nesting of containers save writes and load reads (a state_dict uses 2 to 4)
MAX_DEPTH = 100


class _FileError(ValueError):
    """A load problem with its own message (not "corrupt manifest"); load adds the path."""


def save(obj: Any, path: str | os.PathLike | BinaryIO) -> None:
    """Write `obj` (nested dicts/lists/tuples of Tensors, numpy arrays, Python scalars,
    strings and None) to `path` as an `.npz`, atomically and bit-exactly, or to an open
    binary file object such as io.BytesIO, at its position (a Parameter loads
    as a Parameter; other subclasses as their base: a namedtuple or torch.Size as a tuple,
    an IntEnum as an int)."""
    arrays: dict[str, Any] = {}
    tree = _Encoder(arrays).encode(obj, "", 0)
    manifest = json.dumps({"format": FORMAT, "version": VERSION, "tree": tree})
    write_archive(path, arrays, manifest.encode("utf-8"))


def load(path: str | os.PathLike | BinaryIO, device: Device | None = None) -> Any:
    """Read a checkpoint written by `save` from a path or a seekable binary file object
    holding one checkpoint; Tensors are restored on `device` (default cpu)."""
    device = cpu() if device is None else device
    raw, arrays = read_archive(path)
    path = where(path)
    try:
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except RecursionError:
            raise _FileError(f"nests deeper than {MAX_DEPTH} levels, the most needle "
                             "writes") from None
        _check_header(manifest)
        return _decode(manifest["tree"], arrays, device, "", 0)
    except _FileError as e:
        raise ValueError(f"load: {path} {e}") from None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"load: {path} has a corrupt manifest ({e!r})") from e


def save_safetensors(module_or_state_dict: Any, path: str | os.PathLike,
                     metadata: dict[str, str] | None = None) -> None:
    """Write a module's `state_dict()` (or a dict of Tensors and numpy arrays) to `path` in
    the safetensors format, atomically; `safetensors.torch.load_file` reads it."""
    state = module_or_state_dict
    if callable(getattr(state, "state_dict", None)):
        state = state.state_dict()
    if not isinstance(state, dict):
        raise TypeError(f"save_safetensors: expected a Module or a dict of Tensors, got "
                        f"{type(state).__name__}")
    arrays = {}
    for name, value in state.items():
        if isinstance(value, Tensor):
            arrays[name] = value.numpy()
        elif host_kind(value, f"save_safetensors: {name!r}") is not None:
            arrays[name] = value
        else:
            raise TypeError(f"save_safetensors: {name!r} is a {type(value).__name__}; "
                            "expected Tensors or numpy arrays")
    write_safetensors(path, arrays, metadata)


def load_safetensors(path: str | os.PathLike, device: Device | None = None) -> dict[str, Tensor]:
    """The tensors of a safetensors file by name, on `device` (default cpu), for
    `load_state_dict`; BF16 becomes float32 (exactly). Nothing in the file is executed."""
    device = cpu() if device is None else device
    arrays, _ = read_safetensors(path)
    out = {}
    for name, array in arrays.items():
        try:
            out[name] = _tensor(array, False, device, name)
        except _FileError as e:
            raise ValueError(f"load_safetensors: {os.fspath(path)!r} {e}") from None
    return out


def _check_header(manifest: Any) -> None:
    """The manifest's format and version must be ones this needle reads."""
    if manifest.get("format") != FORMAT:
        raise ValueError(f"format {manifest.get('format')!r}, expected {FORMAT!r}")
    version = manifest.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"version {version!r}, expected an int >= 1")
    if version > VERSION:
        raise _FileError(f"is {FORMAT} version {version}, newer than this needle reads "
                         f"(version {VERSION}); upgrade needle to load it")


def _child(name: str, key: Any) -> str:
    return f"{name}/{key}" if name else str(key)


def _where(name: str) -> str:
    """`name` for an error message, shortened when a deep path makes it long."""
    name = name or "the top level"
    return repr(name if len(name) <= 80 else name[:77] + "...")


# each leaf kind and its exact value, whatever a subclass overrides (str(x), int(x))
_SCALARS = ((bool, bool), (int, int.__int__), (float, float.__float__), (str, str.__str__))


class _Encoder:
    """Builds the manifest tree of one object, collecting its arrays by member name."""

    def __init__(self, arrays: dict[str, Any]):
        self.arrays = arrays
        self.open: dict[int, str] = {}  # containers being encoded (id -> path): cycles

    def key(self, name: str) -> str:
        """A member name for `name`, unique within the archive: `name` itself where a zip
        member can be named so, else a readable stand-in (the manifest holds the keys, so
        every str key round-trips: NUL, lone surrogates, paths over 64 KiB)."""
        base = name or "value"
        if not member_name_fits(base):
            base = member_stand_in(base)
        key, n = base, 1
        while key in self.arrays or key == MANIFEST or not member_name_fits(key):
            n += 1
            key = f"{base}#{n}"
        return key

    def encode(self, obj: Any, name: str, depth: int) -> dict:
        """The manifest node for `obj` (`depth` containers deep); its arrays go to `arrays`."""
        if isinstance(obj, Tensor):
            key = self.key(name)
            self.arrays[key] = obj.numpy()
            node = {"type": "tensor", "key": key, "requires_grad": bool(obj.requires_grad)}
            if isinstance(obj, Parameter):
                node["parameter"] = True  # absent (older files, plain Tensors): a Tensor
            return node
        kind = host_kind(obj, f"save: {_where(name)}")
        if kind is not None:
            key = self.key(name)
            self.arrays[key] = obj
            return {"type": kind, "key": key}
        if obj is None:
            return {"type": "none"}
        for base, plain in _SCALARS:  # a subclass (an IntEnum) is saved as its base
            if isinstance(obj, base):
                return {"type": base.__name__, "value": plain(obj)}
        if isinstance(obj, (dict, list, tuple)):
            return self.container(obj, name, depth + 1)
        raise TypeError(f"save: cannot save {type(obj).__name__} at {_where(name)}; "
                        "expected Tensors, numpy arrays, Python scalars, strings, None, "
                        "and dicts/lists/tuples of them")

    def container(self, obj: dict | list | tuple, name: str, depth: int) -> dict:
        """The node of a dict, list or tuple at `depth`."""
        if id(obj) in self.open:
            raise ValueError(f"save: the {type(obj).__name__} at {_where(name)} contains "
                             f"itself (it is also at {_where(self.open[id(obj)])})")
        if depth > MAX_DEPTH:
            raise ValueError(f"save: containers nest deeper than {MAX_DEPTH} levels at "
                             f"{_where(name)}")
        self.open[id(obj)] = name
        try:
            if isinstance(obj, dict):
                items = []
                for k, v in obj.items():
                    if isinstance(k, bool) or not isinstance(k, (str, int)):
                        raise TypeError(f"save: dict keys must be str or int, found {k!r} "
                                        f"({type(k).__name__}) in {_where(name)}")
                    items.append([k, self.encode(v, _child(name, k), depth)])
                return {"type": "dict", "items": items}
            return {"type": "list" if isinstance(obj, list) else "tuple",  # (a namedtuple)
                    "items": [self.encode(v, _child(name, i), depth) for i, v in enumerate(obj)]}
        finally:
            del self.open[id(obj)]


def _field(node: dict, field: str, kinds: type | tuple[type, ...], name: str) -> Any:
    """`node[field]`, which the manifest must give as one of `kinds` (bool is no int)."""
    value = node[field]
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if type(value) not in kinds:
        wanted = " or ".join(("an " if k.__name__[0] in "aeiou" else "a ") + k.__name__
                             for k in kinds)
        raise _FileError(f"has a corrupt manifest: {field!r} of the {node['type']} at "
                         f"{_where(name)} must be {wanted}, found {_short(value)}")
    return value


# the JSON types of each leaf node's "value" (an int-valued float may come back as an int)
_VALUE_KINDS: dict[str, tuple[type, ...]] = {"bool": (bool,), "int": (int,),
                                             "float": (float, int), "str": (str,)}


def _decode(node: dict, arrays: dict[str, Any], device: Device, name: str, depth: int) -> Any:
    """The object a manifest node at `name`, `depth` containers deep, describes."""
    kind = node["type"]
    if kind == "tensor":
        key = _field(node, "key", str, name)
        requires_grad = _field(node, "requires_grad", bool, name)
        parameter = "parameter" in node and _field(node, "parameter", bool, name)
        return _tensor(arrays[key], requires_grad, device, name,
                       Parameter if parameter else Tensor)
    if kind == "ndarray":
        return arrays[_field(node, "key", str, name)]
    if kind == "numpy_scalar":
        array = arrays[_field(node, "key", str, name)]
        if array.ndim != 0:
            raise _FileError(f"has a corrupt manifest: the numpy scalar at {_where(name)} is "
                             f"an array of shape {array.shape}")
        return array[()]
    if kind == "none":
        return None
    if kind in _VALUE_KINDS:
        value = _field(node, "value", _VALUE_KINDS[kind], name)
        return float(value) if kind == "float" else value
    if kind not in ("dict", "list", "tuple"):
        raise ValueError(f"unknown node type {kind!r}")
    depth += 1
    if depth > MAX_DEPTH:
        raise _FileError(f"nests deeper than {MAX_DEPTH} levels (at {_where(name)}), the most "
                         "needle writes")
    items = _field(node, "items", list, name)
    if kind == "dict":
        out = {}
        for item in items:
            if type(item) is not list or len(item) != 2 or type(item[0]) not in (str, int):
                raise _FileError(f"has a corrupt manifest: the dict at {_where(name)} holds "
                                 f"{_short(item)}, not a [str or int key, node] pair")
            out[item[0]] = _decode(item[1], arrays, device, _child(name, item[0]), depth)
        return out
    items = [_decode(v, arrays, device, _child(name, i), depth) for i, v in enumerate(items)]
    return items if kind == "list" else tuple(items)


def _short(value: Any) -> str:
    """repr(value), cut to 60 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _tensor(array: Any, requires_grad: bool, device: Device, name: str,
            cls: type[Tensor] = Tensor) -> Tensor:
    """A Tensor (or a `cls`: Parameter) on `device` holding a copy of the host `array`."""
    try:
        device.dtype(array.dtype)
    except TypeError:
        raise _FileError(f"holds a {array.dtype} tensor at {_where(name)}, a dtype {device} "
                         "does not support; load it on another device") from None
    data = device.from_numpy(host_array(array))  # (native byte order: '>f4' as float32)
    return cls.make_const(data, requires_grad=requires_grad, device=device)

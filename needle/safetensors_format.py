"""The safetensors file format, read and written with numpy alone (no `safetensors` package).

A file is: 8 bytes, the little-endian length N of a JSON header; the header, N bytes of UTF-8
(padded with spaces); then the raw little-endian, C-order bytes of every tensor. The header
maps each name to `{"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}` (offsets
into the bytes after the header), plus an optional `"__metadata__"` of str -> str. The tensors
must tile the data exactly: no gaps, no overlaps, nothing after the last one (what the
reference implementation checks). Nothing in a file is executed: it is JSON and bytes.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Any, BinaryIO

import numpy as np

from .archive import write_atomically

#: safetensors dtype codes and the numpy dtypes they are (BF16 is read as float32)
DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype("<u1"), "I8": np.dtype("<i1"),
    "U16": np.dtype("<u2"), "I16": np.dtype("<i2"), "F16": np.dtype("<f2"),
    "U32": np.dtype("<u4"), "I32": np.dtype("<i4"), "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"), "I64": np.dtype("<i8"), "F64": np.dtype("<f8"),
}
CODES: dict[str, str] = {dtype.name: code for code, dtype in DTYPES.items()}
BF16_BYTES = 2
#: the largest header read (the reference implementation's limit)
MAX_HEADER_BYTES = 100_000_000
METADATA = "__metadata__"
#: the most dimensions a numpy (>= 2) array has
MAX_NDIM = 64
#: the most bytes a numpy array may span, counting only its nonzero dimensions
MAX_ARRAY_BYTES = int(np.iinfo(np.intp).max)


def write_safetensors(path: str | os.PathLike, arrays: dict[str, np.ndarray],
                      metadata: dict[str, str] | None = None) -> None:
    """Write the host `arrays` (by name) and `metadata` to `path`, atomically."""
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise TypeError("save_safetensors: metadata must be a dict of str to str")
    header: dict[str, Any] = {METADATA: metadata} if metadata else {}
    items = []
    for name, array in arrays.items():
        if not isinstance(name, str) or name == METADATA:
            raise ValueError(f"save_safetensors: tensor name {name!r} is not allowed (names "
                             f"are strings other than {METADATA!r})")
        code = CODES.get(array.dtype.name)
        if code is None:
            raise TypeError(f"save_safetensors: {name!r} is {array.dtype}, which safetensors "
                            f"cannot hold; it holds {', '.join(sorted(CODES))}")
        items.append((name, code, array))
    # widest items first: with a header padded to 8 bytes every tensor starts aligned
    items.sort(key=lambda item: (-DTYPES[item[1]].itemsize, item[0]))
    offset = 0
    for name, code, array in items:
        nbytes = array.size * array.dtype.itemsize
        header[name] = {"dtype": code, "shape": list(array.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)

    def write(f: BinaryIO) -> None:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, code, array in items:
            data = np.ascontiguousarray(array, dtype=DTYPES[code])  # little-endian, C order
            f.write(memoryview(data.reshape(-1)).cast("B"))

    write_atomically(path, write)


def read_safetensors(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """({name: host array}, metadata) of a safetensors file, checked before any data is read.

    ValueError naming the file for anything malformed; BF16 tensors come back as float32
    (exactly: bfloat16 is the top half of a float32).
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        entries, metadata, start = _read_header(f, size, path)
        arrays = {}
        for name, (code, shape, begin, end) in entries.items():
            f.seek(start + begin)
            data = f.read(end - begin)
            if len(data) != end - begin:  # the file shrank while being read
                raise ValueError(f"load_safetensors: {path!r} ends inside {name!r}")
            try:
                arrays[name] = _array(data, code, shape)
            except ValueError as e:  # numpy's own refusal, should the checks above miss one
                raise ValueError(f"load_safetensors: {path!r} is not a valid safetensors "
                                 f"file: {name!r} ({code}, shape {shape}) cannot be read "
                                 f"({e})") from None
    return arrays, metadata


def _read_header(f: BinaryIO, size: int, path: str) -> tuple[dict, dict[str, str], int]:
    """The checked entries {name: (code, shape, begin, end)}, metadata and data start."""
    def bad(why: str) -> ValueError:
        return ValueError(f"load_safetensors: {path!r} is not a valid safetensors file: {why}")

    prefix = f.read(8)
    if len(prefix) != 8:
        raise bad(f"{size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", prefix)
    if n > min(MAX_HEADER_BYTES, size - 8):
        raise bad(f"a header of {n} bytes in a file of {size} (the limit is "
                  f"{MAX_HEADER_BYTES})")
    try:
        header = json.loads(f.read(n).decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise bad(f"the header cannot be read as JSON ({e})") from None
    if not isinstance(header, dict):
        raise bad(f"the header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop(METADATA, None)  # absent or null: none (as the reference reads)
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, dict) or not all(isinstance(v, str)
                                                   for v in metadata.values()):
        raise bad(f"{METADATA} must map strings to strings, found "
                  f"{_short(metadata)}")
    entries = {}
    for name, entry in header.items():
        entries[name] = _entry(name, entry, bad)
    end = 0
    for name, (_, _, begin, stop) in sorted(entries.items(), key=lambda kv: kv[1][2:]):
        if begin != end:
            raise bad(f"{name!r} starts at byte {begin} of the data, expected {end} (the "
                      "tensors must follow each other without gaps or overlaps)")
        end = stop
    if 8 + n + end != size:
        raise bad(f"the tensors take {end} bytes after the header, the file has "
                  f"{size - 8 - n}")
    return entries, metadata, 8 + n


def _entry(name: str, entry: Any, bad) -> tuple[str, tuple[int, ...], int, int]:
    """One header entry, checked: (code, shape, begin, end)."""
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise bad(f"the entry of {name!r} must have exactly dtype, shape and data_offsets")
    code, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if code not in DTYPES and code != "BF16":
        raise bad(f"{name!r} has dtype {code!r}; needle reads "
                  f"{', '.join(sorted([*DTYPES, 'BF16']))}")
    if not isinstance(shape, list) or not all(_count(d) for d in shape):
        raise bad(f"{name!r} has shape {_short(shape)}, expected a list of non-negative ints")
    if len(shape) > MAX_NDIM:
        raise bad(f"{name!r} has {len(shape)} dimensions, more than the {MAX_NDIM} an array "
                  "can have")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_count, offsets))
            and offsets[0] <= offsets[1]):
        raise bad(f"{name!r} has data_offsets {_short(offsets)}, expected [begin, end] with "
                  "0 <= begin <= end")
    itemsize = BF16_BYTES if code == "BF16" else DTYPES[code].itemsize
    nbytes = math.prod(shape) * itemsize
    if offsets[1] - offsets[0] != nbytes:
        raise bad(f"{name!r} ({code}, shape {tuple(shape)}) needs {nbytes} bytes, its "
                  f"data_offsets {offsets} span {offsets[1] - offsets[0]}")
    # numpy sizes an array by its nonzero dimensions, even an empty one (BF16 is read as
    # float32): [2**40, 2**40, 0] spans no bytes, yet no array has that shape
    held = math.prod(d for d in shape if d) * (4 if code == "BF16" else itemsize)
    if held > MAX_ARRAY_BYTES:
        raise bad(f"{name!r} ({code}) has shape {_short(shape)}: no array holds so many "
                  f"elements (its nonzero dimensions span {held} bytes, more than "
                  f"{MAX_ARRAY_BYTES})")
    return code, tuple(shape), offsets[0], offsets[1]


def _short(value: Any) -> str:
    """repr(value), cut to 80 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        seen = set()
        twice = next(k for k in keys if k in seen or seen.add(k))
        raise ValueError(f"the key {twice!r} appears twice")
    return dict(pairs)


def _array(data: bytes, code: str, shape: tuple[int, ...]) -> np.ndarray:
    """The bytes of one tensor as a native-endian numpy array of `shape`."""
    if code == "BOOL":  # any nonzero byte is True (numpy bools must be 0 or 1)
        return (np.frombuffer(data, dtype=np.uint8) != 0).reshape(shape)
    if code == "BF16":
        bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    array = np.frombuffer(data, dtype=DTYPES[code]).reshape(shape)
    return array.astype(array.dtype.newbyteorder("="), copy=False)

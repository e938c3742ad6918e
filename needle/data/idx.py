"""Reading IDX files (MNIST's format), gzip-compressed or not, with errors that name the file."""

from __future__ import annotations

import errno
import gzip
import math
import os
import zlib
from pathlib import Path

import numpy as np

GZIP_MAGIC = b"\x1f\x8b"
# IDX magic numbers: two zero bytes, a type code (0x08: unsigned byte), the number of dimensions
IDX_UBYTE = 0x08


def read_file_bytes(path: str | os.PathLike, what: str) -> bytes:
    """The contents of `path`, gunzipped when it starts with the gzip magic bytes 1f 8b."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"{what} file not found", str(path)) from None
    if raw[:2] != GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except EOFError as e:
        raise ValueError(
            f"{path}: truncated gzip stream: expected a complete gzip file, found {len(raw)} "
            f"compressed bytes that end early ({e})"
        ) from None
    except (OSError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"{path}: corrupt gzip stream ({e})") from None


def read_idx_ubyte(path: str | os.PathLike, magic: int, what: str) -> np.ndarray:
    """The uint8 array stored in an IDX file whose magic number must equal `magic`."""
    data = read_file_bytes(path, what)
    return parse_idx_ubyte(data, magic, what, Path(path))


def parse_idx_ubyte(data: bytes, magic: int, what: str, path: Path) -> np.ndarray:
    """Parse IDX bytes (already gunzipped) read from `path`; every check names the file."""
    ndim = magic & 0xFF
    header_len = 4 + 4 * ndim
    if len(data) < 4:
        raise ValueError(
            f"{path}: truncated {what} file: expected a {header_len}-byte IDX header, "
            f"found only {len(data)} bytes"
        )
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        raise ValueError(
            f"{path}: not an IDX {what} file: expected magic number 0x{magic:08x}, "
            f"found 0x{found:08x}"
        )
    if len(data) < header_len:
        raise ValueError(
            f"{path}: truncated {what} file: expected a {header_len}-byte IDX header, "
            f"found only {len(data)} bytes"
        )
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = math.prod(dims)
    found_len = len(data) - header_len
    if found_len < expected:
        raise ValueError(
            f"{path}: truncated {what} file: the header says shape {dims}, so "
            f"{expected} data bytes are expected, found {found_len}"
        )
    if found_len > expected:
        raise ValueError(
            f"{path}: malformed {what} file: the header says shape {dims}, so "
            f"{expected} data bytes are expected, found {found_len} (trailing data)"
        )
    return np.frombuffer(data, dtype=np.uint8, count=expected, offset=header_len).reshape(dims)

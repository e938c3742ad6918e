"""Host-array archives for checkpoints: named numpy arrays in one pickle-free `.npz`.

This file knows numpy and files, nothing above them: `needle/serialization.py` turns
Tensors and nested containers into the flat `{member name: numpy array}` map and the JSON
manifest written here. Every array is a zip member `NAME.npy`; the manifest is the uint8
member `__manifest__`, so `np.load(path, allow_pickle=False)` reads the file. Members are
stored, never compressed; reading refuses compressed members and sizes beyond the file's.

Writes are atomic: a temporary file `.NAME.XXXXXXXX.tmp` beside the target, then
`os.replace`; a symlink is written through, as open() would (the file it names is replaced).
The temporary file is created with mode 0o666, so the kernel applies the umask (and any
default ACL) exactly as for any other new file: nothing reads the umask.
After a successful write, temporary files of earlier saves of the same target that were
killed before their `os.replace` are removed; one that another process is still writing
(it holds a lock on it) is left alone.
"""

from __future__ import annotations

import errno
import io
import math
import os
import re
import secrets
import types
import zipfile
from typing import Any, BinaryIO, Callable

import numpy as np

try:  # advisory locks mark temporary files that a live save is still writing (POSIX)
    import fcntl
except ImportError:  # pragma: no cover - Windows: an open file cannot be deleted anyway
    fcntl = None

MANIFEST = "__manifest__"
#: the longest zip member name, in bytes of UTF-8 (its length field has 16 bits)
_MAX_NAME_BYTES = 0xFFFF

# tempfile.mkstemp's alphabet and length, so temporary files of older needles match too
_TMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
_TMP_LEN = 8


def host_kind(obj: Any, where: str) -> str | None:
    """"ndarray" or "numpy_scalar" for host numpy values, None for anything else; an ndarray
    subclass (masked array, matrix) is a TypeError naming `where`, as a file would lose it."""
    if isinstance(obj, np.ndarray):
        if type(obj) not in (np.ndarray, np.memmap):  # (a memmap holds nothing more)
            raise TypeError(f"{where} is a numpy {type(obj).__name__}, an ndarray subclass "
                            "whose extras (a mask, the type) the file would lose; pass "
                            "np.asarray(x), or x.filled(value) for a masked array")
        return "ndarray"
    if isinstance(obj, np.generic):
        return "numpy_scalar"
    return None


def member_name_fits(key: str) -> bool:
    """Whether the member `KEY.npy` is stored and read back under exactly that name: zip
    names are UTF-8 (no lone surrogates), at most 65,535 bytes (a 16-bit length field), and
    zipfile cuts them at a NUL (and turns a Windows `\\` into `/`)."""
    name = key + ".npy"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return size <= _MAX_NAME_BYTES and zipfile.ZipInfo(name).filename == name


def member_stand_in(key: str) -> str:
    """A readable member name for a `key` that does not fit one (`member_name_fits`): its
    first 100 characters, NUL, lone surrogates and the platform's path separators other than
    `/` shown as `?`, and `...` where it was cut. The manifest keeps the key itself."""
    seps = {c for c in (os.sep, os.altsep) if c and c != "/"}
    text = "".join("?" if c == "\0" or "\ud800" <= c <= "\udfff" or c in seps else c
                   for c in key[:100])
    return text + "..." if len(key) > 100 else text


def is_file(target: Any) -> bool:
    """Whether `target` is an open file object (io.BytesIO, open(..., "wb")), not a path."""
    return hasattr(target, "write") or hasattr(target, "read")


def _can(f: Any, what: str) -> bool:
    """Whether file object `f` is writable or readable (`what`): as it says, or, where it
    says False only as io's default, whether its class writes or reads in Python of its own
    (an io.RawIOBase subclass that defines just `write`)."""
    name = "write" if what == "writable" else "read"
    method = getattr(f, what, None)
    if method is None:
        return hasattr(f, name)
    try:
        if method():
            return True
    except (OSError, ValueError):  # (a closed file)
        return False
    if getattr(type(f), what, None) is not getattr(io.IOBase, what):
        return False  # (the class answers for itself)
    return isinstance(getattr(type(f), name, None), types.FunctionType)


def where(target: Any) -> str:
    """`target` (a path or a file object) as load's and save's messages name it."""
    if is_file(target):
        name = getattr(target, "name", None)
        return f"the {type(target).__name__}" + (f" {name!r}" if isinstance(name, str) else "")
    return repr(os.fspath(target))


def write_archive(path: Any, arrays: dict[str, Any], manifest: bytes) -> None:
    """Write `arrays` (numpy arrays or scalars by member name) and `manifest` to `path`
    (atomically), or to an open binary file object at its position.

    Every member name must fit a zip name (`member_name_fits`): one that does not is a
    ValueError before anything is written."""
    members = {}
    for key in arrays:
        if not member_name_fits(key):
            raise ValueError(f"save: member name {member_stand_in(key)!r} cannot be a zip "
                             "member name (NUL, a lone surrogate or over 64 KiB of UTF-8)")
    for key, array in arrays.items():
        array = np.asarray(array)
        if array.dtype.hasobject:
            raise TypeError(f"save: {key!r} is an object array, which needs pickle; expected "
                            "a numeric, bool or string array")
        members[key] = array
    members[MANIFEST] = np.frombuffer(manifest, dtype=np.uint8)

    def write(f: BinaryIO) -> None:
        with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED,
                             allowZip64=True) as zf:
            for key, array in members.items():
                with zf.open(key + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, array, allow_pickle=False)

    if is_file(path):
        if not _can(path, "writable") or isinstance(path, io.TextIOBase):
            raise TypeError(f"save: {where(path)} is no binary file open for writing "
                            "(open it with \"wb\")")
        write(path)
    else:
        write_atomically(path, write)


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(f)` on a temporary file beside `path`, then rename it to `path`: readers
    see the old file or the whole new one, and a failed write leaves the old file as it was."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "save: is a directory; name a file", path)
    # a symlink is written through, as open() would: the file it names is replaced
    directory, name = os.path.split(os.path.realpath(path))
    fd, tmp = _create_temporary(directory, name)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            # while still locked: no cleanup can take it first
            os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _remove_stale_temporaries(directory, name)


def read_archive(path: Any) -> tuple[bytes, dict[str, np.ndarray]]:
    """(manifest bytes, {member name: array}) of an archive written by `write_archive`, from
    a path or a seekable binary file object holding one archive (zipfile reads it from its
    end: of two saved into one stream, the last).

    A missing file raises FileNotFoundError; anything unreadable a ValueError naming it.
    needle writes stored (uncompressed) members only, so a compressed member is refused
    (it could inflate without bound), and no member may declare more bytes than the file
    holds: reading allocates at most the file's size.
    """
    if is_file(path):
        if isinstance(path, io.TextIOBase):
            raise TypeError(f"load: {where(path)} is open in text mode; open it with \"rb\"")
        if not _can(path, "readable"):
            raise TypeError(f"load: {where(path)} is no file open for reading (open it with "
                            "\"rb\")")
        try:
            size = path.seek(0, os.SEEK_END)
        except (AttributeError, OSError, ValueError):  # (UnsupportedOperation is both)
            raise TypeError(f"load: {where(path)} is no seekable binary file (a zip archive "
                            "is read from its end)") from None
        arrays = _read_file(path, where(path), size)
    else:
        path = os.fspath(path)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            raise
        except OSError as e:
            raise ValueError(f"load: {path!r} is not a readable needle checkpoint ({e})") from e
        with f:
            arrays = _read_file(f, repr(path), os.fstat(f.fileno()).st_size)
    path = where(path)
    if MANIFEST not in arrays:
        raise ValueError(f"load: {path} has no {MANIFEST!r} member: not a needle checkpoint")
    manifest = arrays.pop(MANIFEST)
    if manifest.dtype != np.uint8 or manifest.ndim != 1:
        raise ValueError(f"load: {path} has a corrupt manifest (a {manifest.dtype} array of "
                         f"shape {manifest.shape}, expected uint8 bytes)")
    return manifest.tobytes(), arrays


def _read_file(f: BinaryIO, path: str, size: int) -> dict[str, np.ndarray]:
    """The members of the archive in file `f` (`size` bytes), named `path` in errors."""
    f.seek(0)
    head = f.read(32)
    f.seek(0)
    try:
        with zipfile.ZipFile(f) as zf:
            arrays = _read_members(zf, size)
    except zipfile.BadZipFile as e:
        if not head.startswith(b"PK"):
            raise ValueError(f"load: {path} is not a needle checkpoint: it is "
                             f"{_what_it_is(head)}, not a zip (.npz) archive") from None
        raise ValueError(f"load: {path} is not a readable needle checkpoint ({e})") from e
    except _ArchiveError as e:
        raise ValueError(f"load: {path} {e}") from None
    except Exception as e:  # truncated or corrupt: ValueError, OSError, EOFError, ...
        raise ValueError(f"load: {path} is not a readable needle checkpoint ({e})") from e
    return arrays


class _ArchiveError(ValueError):
    """A member needle would not have written; read_archive prefixes the path."""


def _what_it_is(head: bytes) -> str:
    """What a file starting with `head` holds, in words, for a file that is no zip archive."""
    if head.startswith(b"\x93NUMPY"):
        return "a single numpy array (.npy)"
    if head[:1] == b"\x80":
        return "a Python pickle"
    if head.startswith(b"\x1f\x8b"):
        return "gzip-compressed data"
    if not head:
        return "empty"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:  # a character cut at the end of `head` is fine
        if e.start < len(head) - 3:
            return f"binary data starting with {head[:8]!r}"
        text = head[:e.start].decode("utf-8")
    if not all(c.isprintable() or c in "\t\r\n" for c in text):
        return f"binary data starting with {head[:8]!r}"
    return f"text starting with {text.splitlines()[0][:20]!r}" if text.strip() else "blank text"


def _read_members(zf: zipfile.ZipFile, file_size: int) -> dict[str, np.ndarray]:
    """Every member of `zf` as an array by name (without ".npy"), checked before reading."""
    infos, total = zf.infolist(), 0
    for info in infos:
        name = info.filename
        if info.compress_type != zipfile.ZIP_STORED:
            method = {zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2",
                      zipfile.ZIP_LZMA: "lzma"}.get(info.compress_type, info.compress_type)
            raise _ArchiveError(f"has a compressed member {name!r} ({method}): needle writes "
                                "stored (uncompressed) members only and does not inflate "
                                "others, which may expand without bound")
        if info.flag_bits & 0x1:
            raise _ArchiveError(f"has an encrypted member {name!r}: not a needle checkpoint")
        if not name.endswith(".npy"):
            raise _ArchiveError(f"has a member {name!r} that is not a .npy array: not a "
                                "needle checkpoint")
        total += info.file_size
        if info.compress_size != info.file_size or total > file_size:
            raise _ArchiveError(f"is corrupt: its members declare {total} bytes by {name!r} "
                                f"(this one {info.file_size} stored as "
                                f"{info.compress_size}), more than the file's {file_size}")
    return {info.filename[:-4]: _read_member(zf, info) for info in infos}


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """The array of one stored .npy member, whose header must agree with its declared size."""
    fmt = np.lib.format
    with zf.open(info) as member:
        version = fmt.read_magic(member)
        readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
        if version not in readers:
            raise _ArchiveError(f"has a member {info.filename!r} in .npy version {version}, "
                                "which needle does not write")
        shape, _, dtype = readers[version](member)
        if dtype.hasobject:
            raise _ArchiveError(f"has an object array {info.filename!r}, which needs pickle: "
                                "not a needle checkpoint")
        size = member.tell() + math.prod(shape) * dtype.itemsize
        if size != info.file_size:
            raise _ArchiveError(f"is corrupt: its member {info.filename!r} holds a {dtype} "
                                f"array of shape {shape} ({size} bytes with the header), "
                                f"but declares {info.file_size} bytes")
    with zf.open(info) as member:
        array = fmt.read_array(member, allow_pickle=False)
        member.read(1)  # at the end: zipfile checks the CRC-32 here
    return array


def _create_temporary(directory: str, name: str) -> tuple[int, str]:
    """A new file `.NAME.XXXXXXXX.tmp` in `directory`, open for writing and locked: (fd, path)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        suffix = "".join(secrets.choice(_TMP_CHARS) for _ in range(_TMP_LEN))
        tmp = os.path.join(directory, f".{name}.{suffix}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)  # the umask applies, as for open()
        except FileExistsError:
            continue
        except FileNotFoundError:
            raise FileNotFoundError(f"save: the folder {directory!r} for {name!r} does not "
                                    "exist") from None
        if fcntl is None or _lock_and_check(fd, tmp):
            return fd, tmp
        os.close(fd)  # another save's cleanup took it between creation and lock: retry
    raise FileExistsError(f"save: no free temporary file name for {name!r} in {directory!r}")


def _lock_and_check(fd: int, path: str) -> bool:
    """Lock `fd` ("in use": cleanups skip it); True when `path` is still that file."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _remove_stale_temporaries(directory: str, name: str) -> None:
    """Delete `.NAME.XXXXXXXX.tmp` files left by killed saves of `name` (never others)."""
    pattern = re.compile(rf"\.{re.escape(name)}\.[{_TMP_CHARS}]{{{_TMP_LEN}}}\.tmp")
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for entry in entries:
        if pattern.fullmatch(entry):
            _remove_if_unlocked(os.path.join(directory, entry))


def _remove_if_unlocked(path: str) -> None:
    """Unlink `path` unless a live save holds its lock; errors leave it in place."""
    try:
        if fcntl is None:
            os.unlink(path)
            return
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while a save writes it
            os.unlink(path)
        finally:
            os.close(fd)
    except OSError:
        pass

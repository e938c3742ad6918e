"""Host-array archives for checkpoints: named numpy arrays in one pickle-free `.npz`.

This file knows numpy and files, nothing above them: `needle/serialization.py` turns
Tensors and nested containers into the flat `{member name: numpy array}` map and the JSON
manifest written here. Every array is a zip member `NAME.npy`; the manifest is the uint8
member `__manifest__`, so `np.load(path, allow_pickle=False)` reads the file.

Writes are atomic: a temporary file `.NAME.XXXXXXXX.tmp` beside the target, then
`os.replace`. The temporary file is created with mode 0o666, so the kernel applies the
umask (and any default ACL) exactly as for any other new file: nothing reads the umask.
After a successful write, temporary files of earlier saves of the same target that were
killed before their `os.replace` are removed; one that another process is still writing
(it holds a lock on it) is left alone.
"""

from __future__ import annotations

import os
import re
import secrets
import zipfile
from typing import Any, BinaryIO, Callable

import numpy as np

try:  # advisory locks mark temporary files that a live save is still writing (POSIX)
    import fcntl
except ImportError:  # pragma: no cover - Windows: an open file cannot be deleted anyway
    fcntl = None

MANIFEST = "__manifest__"

# tempfile.mkstemp's alphabet and length, so temporary files of older needles match too
_TMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
_TMP_LEN = 8


def host_kind(obj: Any) -> str | None:
    """"ndarray" or "numpy_scalar" for host numpy values, None for anything else."""
    if isinstance(obj, np.ndarray):
        return "ndarray"
    if isinstance(obj, np.generic):
        return "numpy_scalar"
    return None


def write_archive(path: str | os.PathLike, arrays: dict[str, Any], manifest: bytes) -> None:
    """Write `arrays` (numpy arrays or scalars by member name) and `manifest` to `path`."""
    members = {}
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

    write_atomically(path, write)


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(f)` on a temporary file beside `path`, then rename it to `path`: readers
    see the old file or the whole new one, and a failed write leaves the old file as it was."""
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = _create_temporary(directory, name)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)  # while still locked: no cleanup can take it first
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _remove_stale_temporaries(directory, name)


def read_archive(path: str | os.PathLike) -> tuple[bytes, dict[str, np.ndarray]]:
    """(manifest bytes, {member name: array}) of an archive written by `write_archive`.

    A missing file raises FileNotFoundError; anything unreadable a ValueError naming it.
    """
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
    manifest = arrays.pop(MANIFEST)
    if manifest.dtype != np.uint8 or manifest.ndim != 1:
        raise ValueError(f"load: {path!r} has a corrupt manifest (a {manifest.dtype} array of "
                         f"shape {manifest.shape}, expected uint8 bytes)")
    return manifest.tobytes(), arrays


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

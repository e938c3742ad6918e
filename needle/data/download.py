"""CIFAR-10 that downloads itself: fetch, verify and unpack the python version into a cache.

`cifar10_folder(root, download=True)` returns a `cifar-10-batches-py` folder, fetching
`cifar-10-python.tar.gz` from its home page the first time. Nothing is trusted before it is
whole and verified:

- the archive is streamed into a temporary file `.NAME.XXXXXXXX.part` beside its final name,
  its length checked against the server's Content-Length and its md5 (and sha256 where one is
  known) against the published value, and only then renamed (atomically) to its name;
- it is unpacked into a temporary folder, member by member: only the files the data set has
  (`data_batch_1` .. `data_batch_5`, `test_batch`, `batches.meta`, `readme.html`), each a
  regular file of at most `MAX_MEMBER_BYTES`; a member that is a link or device, or whose path
  is absolute or climbs out with `..`, rejects the whole archive; the finished folder is then
  renamed to `cifar-10-batches-py`, so that folder exists only complete;
- a lock file serializes processes sharing the cache (e.g. the ranks of `mpiexec`), and the
  leftovers of killed runs (`*.part`, `*.tmp`) are removed by the next one.

An existing `cifar-10-batches-py` folder with the six batch files is used as it is; an archive
placed in the folder by hand is checked and unpacked. Without network access the error says
where to put the files by hand, in one line.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import os
import shutil
import socket
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

try:  # serializes processes sharing one cache folder (POSIX)
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock
    fcntl = None

HOME_PAGE = "https://www.cs.toronto.edu/~kriz/cifar.html"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
#: the published md5 of the archive (the value torchvision checks)
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
#: no sha256 is pinned: none was computed from a verified download (no network here)
CIFAR10_SHA256: str | None = None
ARCHIVE = "cifar-10-python.tar.gz"
FOLDER = "cifar-10-batches-py"
BATCHES = (*(f"data_batch_{k}" for k in range(1, 6)), "test_batch")
#: the members unpacked (the six batches are required, the other two kept where present)
MEMBERS = (*BATCHES, "batches.meta", "readme.html")
#: the largest member accepted: a real batch is 31 MB (10,000 rows of 3,072 bytes + labels)
MAX_MEMBER_BYTES = 64 << 20
CHUNK = 1 << 20
TIMEOUT = 60.0  # seconds for the connection and for each read


class DownloadError(RuntimeError):
    """The archive could not be fetched, or what arrived is not the published file."""


def default_cache_dir() -> Path:
    """Where downloads go by default: $XDG_CACHE_HOME/needle, else ~/.cache/needle."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "needle"


def is_complete(folder: Path) -> bool:
    """True when `folder` holds the six CIFAR-10 batch files."""
    return all((folder / name).is_file() for name in BATCHES)


def cifar10_folder(root: str | os.PathLike | None = None, download: bool = False, *,
                   url: str | None = None, md5: str | None = None, sha256: str | None = None,
                   progress: bool = True, timeout: float = TIMEOUT) -> Path:
    """The CIFAR-10 batch folder in `root` (default: `default_cache_dir()`), downloaded and
    unpacked first when missing and `download` is set.

    `root` may be the batch folder itself or the folder holding `cifar-10-batches-py`.
    `url`, `md5` and `sha256` default to the official archive's (CIFAR10_URL, CIFAR10_MD5).
    """
    root = default_cache_dir() if root is None else Path(root)
    if is_complete(root):
        return root
    if is_complete(root / FOLDER):
        return root / FOLDER
    if not download:
        raise FileNotFoundError(
            f"CIFAR-10 is not in {root}: pass download=True (needle-train --download) to "
            f"fetch it, or put {ARCHIVE} from {HOME_PAGE} there")
    return download_cifar10(root, url=url, md5=md5, sha256=sha256, progress=progress,
                            timeout=timeout)


def download_cifar10(root: str | os.PathLike | None = None, *, url: str | None = None,
                     md5: str | None = None, sha256: str | None = None, progress: bool = True,
                     timeout: float = TIMEOUT) -> Path:
    """`root/cifar-10-batches-py`, fetched, verified and unpacked unless already there."""
    root = default_cache_dir() if root is None else Path(root)
    url = CIFAR10_URL if url is None else url
    md5 = CIFAR10_MD5 if md5 is None else md5
    sha256 = CIFAR10_SHA256 if sha256 is None else sha256
    if not md5 and not sha256:
        raise ValueError(f"download_cifar10: give md5 or sha256 of {url}: an archive that "
                         "cannot be verified is not unpacked")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(f"cannot create the CIFAR-10 cache folder {root}: {e.strerror}") from None
    target = root / FOLDER
    with _locked(root):
        if is_complete(target):  # another process finished it while this one waited
            return target
        _remove_leftovers(root)
        if target.exists():
            raise FileExistsError(f"{target} exists but lacks some of {', '.join(BATCHES)}: "
                                  "remove it, and it is downloaded again")
        archive = root / ARCHIVE
        by_hand = archive.is_file()  # put there by the user (or by a run killed mid-unpack)
        if by_hand and not _matches(archive, md5, sha256):
            raise DownloadError(f"{archive} is not the published archive (its checksum "
                                "differs): delete it, and the next run downloads it again")
        if not by_hand:
            fetch(url, archive, md5=md5, sha256=sha256, progress=progress, timeout=timeout)
        try:
            unpack(archive, root)
        finally:  # the unpacked folder is the cache; a copy of the user's own is kept
            if not by_hand:
                archive.unlink()
    return target


def fetch(url: str, dest: Path, *, md5: str | None = None, sha256: str | None = None,
          progress: bool = True, timeout: float = TIMEOUT) -> None:
    """Download `url` to `dest` through a temporary file, renamed there only once its length
    and checksums are right; DownloadError (one line) on any failure, leaving nothing."""
    from tqdm import tqdm

    try:
        response = urllib.request.urlopen(url, timeout=timeout)
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        raise DownloadError(_offline_message(url, dest, e, timeout)) from None
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    hashes = {name: hashlib.new(name) for name, want in (("md5", md5), ("sha256", sha256))
              if want}
    try:
        with response, os.fdopen(fd, "wb") as out:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            received = 0
            with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                      desc=dest.name, disable=None if progress else True, leave=False,
                      file=sys.stderr) as bar:  # None: shown on terminals only
                while True:
                    try:
                        chunk = response.read(CHUNK)
                    except (OSError, http.client.HTTPException) as e:
                        raise DownloadError(
                            f"download of {url} broke off after {received} bytes "
                            f"({type(e).__name__}: {e}); run again to retry") from None
                    if not chunk:
                        break
                    out.write(chunk)
                    for h in hashes.values():
                        h.update(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
            if total is not None and received != total:
                raise DownloadError(f"download of {url} broke off after {received} of {total} "
                                    "bytes; run again to retry")
            for name, h in hashes.items():
                want = md5 if name == "md5" else sha256
                if h.hexdigest() != want.lower():
                    raise DownloadError(
                        f"{url}: {name} {h.hexdigest()} of the {received} bytes received is "
                        f"not the published {want}: the download is corrupt or not the "
                        "expected archive (nothing was kept)")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, dest)
    except BaseException:  # a failure or Ctrl-C: the partial file must not survive
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _offline_message(url: str, dest: Path, error: BaseException, timeout: float) -> str:
    """One line: why the download failed and where to put the files by hand."""
    if isinstance(error, urllib.error.HTTPError):
        reason = f"the server answered HTTP {error.code} {error.reason}"
    else:
        reason = getattr(error, "reason", None) or error
        if isinstance(reason, (socket.timeout, TimeoutError)):
            reason = f"no answer in {timeout:g} s"
    return (f"could not download {url} ({reason}); without network access, fetch "
            f"{dest.name} from {HOME_PAGE} elsewhere and put it in {dest.parent} (it is "
            f"checked and unpacked on the next run), or unpack it so that "
            f"{dest.parent / FOLDER} holds {BATCHES[0]} .. {BATCHES[-1]}")


def _matches(path: Path, md5: str | None, sha256: str | None) -> bool:
    """True when the file's checksums are the expected ones."""
    hashes = {name: hashlib.new(name) for name, want in (("md5", md5), ("sha256", sha256))
              if want}
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            for h in hashes.values():
                h.update(chunk)
    want = {"md5": md5, "sha256": sha256}
    return all(h.hexdigest() == want[name].lower() for name, h in hashes.items())


def unpack(archive: Path, root: Path) -> Path:
    """Unpack the data set's members of `archive` into `root/cifar-10-batches-py`, through a
    temporary folder renamed at the end; ValueError naming the member for anything unsafe."""
    staging = Path(tempfile.mkdtemp(prefix=f".{FOLDER}.", suffix=".tmp", dir=root))
    try:
        _unpack_members(archive, staging)
        os.rename(staging, root / FOLDER)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return root / FOLDER


def _unpack_members(archive: Path, staging: Path) -> None:
    found: set[str] = set()
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            for member in tar:
                name = _member_name(archive, member)
                if name is None:
                    continue
                if name in found:
                    raise ValueError(f"{archive}: member {member.name!r} appears twice")
                if member.size > MAX_MEMBER_BYTES:
                    raise ValueError(f"{archive}: member {member.name!r} is {member.size} "
                                     f"bytes, more than the {MAX_MEMBER_BYTES} a CIFAR-10 "
                                     "file can be")
                _copy_member(tar, member, staging / name, archive)
                found.add(name)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise ValueError(f"{archive}: not a readable .tar.gz ({type(e).__name__}: {e})") from None
    missing = [name for name in BATCHES if name not in found]
    if missing:
        raise ValueError(f"{archive}: not the CIFAR-10 python archive: no "
                         f"{', '.join(f'{FOLDER}/{m}' for m in missing)}")


def _member_name(archive: Path, member: tarfile.TarInfo) -> str | None:
    """The file name of a wanted member, None for one to skip; ValueError for unsafe ones."""
    path = PurePosixPath(member.name)
    if path.is_absolute() or ".." in path.parts or "\\" in member.name:
        raise ValueError(f"{archive}: refusing the member {member.name!r}: its path leaves "
                         "the folder it is unpacked into")
    if not (member.isfile() or member.isdir()):
        kind = "link" if member.issym() or member.islnk() else "special file"
        raise ValueError(f"{archive}: refusing the member {member.name!r}: a {kind}, and "
                         "CIFAR-10 holds only regular files")
    parts = tuple(p for p in path.parts if p != ".")
    if member.isdir() or len(parts) != 2 or parts[0] != FOLDER or parts[1] not in MEMBERS:
        return None  # folders are made by us; anything else is not part of the data set
    return parts[1]


def _copy_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path,
                 archive: Path) -> None:
    """Write one regular member to a new file `dest`, checking its length."""
    source = tar.extractfile(member)
    written = 0
    with source, dest.open("xb") as out:
        while chunk := source.read(CHUNK):
            written += len(chunk)
            if written > member.size:
                break
            out.write(chunk)
    if written != member.size:
        raise ValueError(f"{archive}: member {member.name!r} holds {written} bytes, its header "
                         f"says {member.size}")


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on `root/.cifar-10.lock` (no lock where fcntl is missing)."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    with open(root / ".cifar-10.lock", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _remove_leftovers(root: Path) -> None:
    """Delete the temporary files and folders of runs killed mid-way (the lock is held)."""
    for entry in root.iterdir():
        name = entry.name
        if name.startswith(f".{ARCHIVE}.") and name.endswith(".part"):
            with contextlib.suppress(OSError):
                entry.unlink()
        elif name.startswith(f".{FOLDER}.") and name.endswith(".tmp") and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)

"""CIFAR-10 that downloads itself (needle/data/download.py), against a local HTTP server.

Every test serves archives it builds itself from 127.0.0.1: the download URL and checksum
are parameters, so nothing here touches the network.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import os
import pickle
import socket
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest

from needle.apps import train
from needle.data import CIFAR10Dataset
from needle.data import download as dl

BATCHES = [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]
PER_BATCH = 3


# ----- helpers independent of the code under test -----------------------------------------
def batch_bytes(seed: int) -> tuple[bytes, np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (PER_BATCH, 3072), dtype=np.uint8)
    labels = rng.integers(0, 10, PER_BATCH).tolist()
    batch = {b"batch_label": b"b", b"labels": labels, b"data": data,
             b"filenames": [b"x.png"] * PER_BATCH}
    return pickle.dumps(batch, protocol=2), data, labels


def make_tarball(extra: list[tuple[tarfile.TarInfo, bytes | None]] = (),
                 skip: tuple[str, ...] = ()) -> bytes:
    """A .tar.gz in the layout of cifar-10-python.tar.gz (plus `extra` members)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        folder = tarfile.TarInfo("cifar-10-batches-py")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        members = [(name, batch_bytes(i)[0]) for i, name in enumerate(BATCHES)]
        members += [("batches.meta", pickle.dumps({b"label_names": [b"airplane"]})),
                    ("readme.html", b"<html></html>")]
        for name, payload in members:
            if name in skip:
                continue
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        for info, payload in extra:
            tar.addfile(info, None if payload is None else io.BytesIO(payload))
    return buf.getvalue()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


class Server:
    """An http.server in a thread serving `routes`: path -> bytes, or (bytes, claimed
    Content-Length) to send fewer bytes than promised and hang up (an interrupted download)."""

    def __init__(self):
        self.routes: dict[str, bytes | tuple[bytes, int]] = {}
        self.hits: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.hits.append(self.path)
                body = server.routes.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                body, length = body if isinstance(body, tuple) else (body, len(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/gzip")
                self.send_header("Content-Length", str(length))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def good() -> bytes:
    return make_tarball()


@pytest.fixture
def server(good):
    s = Server()
    s.routes["/cifar.tar.gz"] = good
    yield s
    s.close()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: connecting is refused (as offline)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/cifar-10-python.tar.gz"


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name != ".cifar-10.lock")


# ----- a good download, reused ----------------------------------------------------------
def test_download_verifies_unpacks_and_is_reused(server, good, tmp_path):
    root = tmp_path / "cache"
    folder = dl.download_cifar10(root, url=server.url("/cifar.tar.gz"), md5=md5(good),
                                 progress=False)
    assert folder == root / "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == sorted(BATCHES + ["batches.meta",
                                                                         "readme.html"])
    assert leftovers(root) == ["cifar-10-batches-py"]  # the archive is not kept
    assert server.hits == ["/cifar.tar.gz"]
    ds = CIFAR10Dataset(folder, train=False)
    _, data, labels = batch_bytes(BATCHES.index("test_batch"))
    np.testing.assert_array_equal(ds.X.reshape(PER_BATCH, 3072) * 255, data)
    assert ds.y.tolist() == labels
    # the next time: nothing is fetched
    assert dl.download_cifar10(root, url=server.url("/cifar.tar.gz"), md5=md5(good),
                               progress=False) == folder
    assert dl.cifar10_folder(root, download=True, url=server.url("/missing")) == folder
    assert server.hits == ["/cifar.tar.gz"]


def test_sha256_is_checked_too(server, good, tmp_path):
    with pytest.raises(dl.DownloadError, match="sha256"):
        dl.download_cifar10(tmp_path, url=server.url("/cifar.tar.gz"), md5=md5(good),
                            sha256="0" * 64, progress=False)
    assert leftovers(tmp_path) == []
    folder = dl.download_cifar10(tmp_path, url=server.url("/cifar.tar.gz"), md5=md5(good),
                                 sha256=hashlib.sha256(good).hexdigest(), progress=False)
    assert dl.is_complete(folder)


def test_dataset_download_flag_uses_the_cache_dir(server, good, tmp_path, monkeypatch):
    monkeypatch.setattr(dl, "CIFAR10_URL", server.url("/cifar.tar.gz"))
    monkeypatch.setattr(dl, "CIFAR10_MD5", md5(good))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    ds = CIFAR10Dataset(None, train=True, download=True)
    assert len(ds) == 5 * PER_BATCH
    assert ds.base_folder == tmp_path / "xdg" / "needle" / "cifar-10-batches-py"
    test = CIFAR10Dataset(tmp_path / "xdg" / "needle", train=False, download=True)
    assert len(test) == PER_BATCH and server.hits == ["/cifar.tar.gz"]


def test_without_download_a_missing_cache_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="pass download=True"):
        CIFAR10Dataset(None, train=True)


def test_default_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert dl.default_cache_dir() == tmp_path / "needle"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert dl.default_cache_dir() == tmp_path / "home" / ".cache" / "needle"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: absolute only
    assert dl.default_cache_dir() == tmp_path / "home" / ".cache" / "needle"


# ----- failed downloads leave nothing a later run would trust -----------------------------
def test_corrupted_download_is_refused_and_not_kept(server, good, tmp_path):
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF  # same length, one byte flipped
    server.routes["/bad.tar.gz"] = bytes(bad)
    with pytest.raises(dl.DownloadError, match=f"md5 {md5(bytes(bad))} .* not the published "
                                               f"{md5(good)}"):
        dl.download_cifar10(tmp_path, url=server.url("/bad.tar.gz"), md5=md5(good),
                            progress=False)
    assert leftovers(tmp_path) == []
    # the next run starts over and succeeds
    assert dl.is_complete(dl.download_cifar10(tmp_path, url=server.url("/cifar.tar.gz"),
                                              md5=md5(good), progress=False))


def test_truncated_download_is_refused_and_not_kept(server, good, tmp_path):
    # the server promises the whole archive and hangs up half-way
    server.routes["/cut.tar.gz"] = (good[: len(good) // 2], len(good))
    with pytest.raises(dl.DownloadError, match="broke off"):
        dl.download_cifar10(tmp_path, url=server.url("/cut.tar.gz"), md5=md5(good),
                            progress=False)
    assert leftovers(tmp_path) == []
    # a short file served as a whole one fails its checksum
    server.routes["/short.tar.gz"] = good[: len(good) // 2]
    with pytest.raises(dl.DownloadError, match="md5"):
        dl.download_cifar10(tmp_path, url=server.url("/short.tar.gz"), md5=md5(good),
                            progress=False)
    assert leftovers(tmp_path) == []


def test_interrupted_download_removes_its_partial_file(good, tmp_path, monkeypatch):
    class Response:
        headers = {"Content-Length": str(len(good))}

        def __init__(self):
            self.calls = 0

        def read(self, n):
            self.calls += 1
            if self.calls > 1:
                raise KeyboardInterrupt  # Ctrl-C in the middle of the transfer
            return good[:100]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(dl.urllib.request, "urlopen", lambda url, timeout: Response())
    with pytest.raises(KeyboardInterrupt):
        dl.download_cifar10(tmp_path, url="https://example.invalid/c.tar.gz", md5=md5(good),
                            progress=False)
    assert leftovers(tmp_path) == []


def test_leftovers_of_killed_runs_are_removed(server, good, tmp_path):
    (tmp_path / ".cifar-10-python.tar.gz.abcd1234.part").write_bytes(good[:10])
    (tmp_path / ".cifar-10-batches-py.xyz.tmp").mkdir()
    (tmp_path / ".cifar-10-batches-py.xyz.tmp" / "data_batch_1").write_bytes(b"x")
    dl.download_cifar10(tmp_path, url=server.url("/cifar.tar.gz"), md5=md5(good),
                        progress=False)
    assert leftovers(tmp_path) == ["cifar-10-batches-py"]


def test_an_incomplete_folder_is_not_trusted(server, good, tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="lacks some of"):
        dl.download_cifar10(tmp_path, url=server.url("/cifar.tar.gz"), md5=md5(good),
                            progress=False)


# ----- unsafe or wrong archives ------------------------------------------------------------
def _member(name: str, payload: bytes = b"evil", kind: bytes = tarfile.REGTYPE,
            link: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    if kind == tarfile.REGTYPE:
        info.size = len(payload)
        return info, payload
    return info, None


@pytest.mark.parametrize("extra, message", [
    ([_member("cifar-10-batches-py/../../evil.txt")], "its path leaves the folder"),
    ([_member("../evil.txt")], "its path leaves the folder"),
    ([_member("/tmp/evil.txt")], "its path leaves the folder"),
    ([_member("cifar-10-batches-py/link", kind=tarfile.SYMTYPE, link="/etc/passwd")],
     "a link"),
    ([_member("cifar-10-batches-py/hard", kind=tarfile.LNKTYPE,
              link="cifar-10-batches-py/test_batch")], "a link"),
    ([_member("cifar-10-batches-py/test_batch", b"again")], "appears twice"),
])
def test_unsafe_members_reject_the_archive(server, tmp_path, extra, message):
    archive = make_tarball(extra)
    server.routes["/evil.tar.gz"] = archive
    root = tmp_path / "a" / "b"
    with pytest.raises(ValueError, match=message):
        dl.download_cifar10(root, url=server.url("/evil.tar.gz"), md5=md5(archive),
                            progress=False)
    assert leftovers(root) == []  # no folder, no archive, no staging folder
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "a" / "evil.txt").exists()


def test_an_archive_without_the_batches_is_refused(server, tmp_path):
    archive = make_tarball(skip=("data_batch_3",))
    server.routes["/short.tar.gz"] = archive
    with pytest.raises(ValueError, match="no cifar-10-batches-py/data_batch_3"):
        dl.download_cifar10(tmp_path, url=server.url("/short.tar.gz"), md5=md5(archive),
                            progress=False)
    assert leftovers(tmp_path) == []


def test_oversized_members_are_refused(server, good, tmp_path, monkeypatch):
    monkeypatch.setattr(dl, "MAX_MEMBER_BYTES", 1000)  # the test batches are ~9 kB
    with pytest.raises(ValueError, match="more than the 1000"):
        dl.download_cifar10(tmp_path, url=server.url("/cifar.tar.gz"), md5=md5(good),
                            progress=False)
    assert leftovers(tmp_path) == []


def test_unknown_members_are_skipped(server, tmp_path):
    archive = make_tarball([_member("cifar-10-batches-py/notes.txt", b"hi"),
                            _member("other/readme", b"hi")])
    server.routes["/more.tar.gz"] = archive
    folder = dl.download_cifar10(tmp_path, url=server.url("/more.tar.gz"), md5=md5(archive),
                                 progress=False)
    assert not (folder / "notes.txt").exists() and not (tmp_path / "other").exists()


def test_a_garbage_archive_with_the_right_checksum_is_refused(server, tmp_path):
    server.routes["/junk.tar.gz"] = b"not a tarball at all" * 10
    with pytest.raises(ValueError, match="not a readable .tar.gz"):
        dl.download_cifar10(tmp_path, url=server.url("/junk.tar.gz"),
                            md5=md5(b"not a tarball at all" * 10), progress=False)
    assert leftovers(tmp_path) == []


def test_a_checksum_is_required(server, tmp_path):
    with pytest.raises(ValueError, match="give md5 or sha256"):
        dl.download_cifar10(tmp_path, url=server.url("/cifar.tar.gz"), md5="",
                            progress=False)


# ----- no network ------------------------------------------------------------------------
def test_offline_is_one_line_saying_where_to_put_the_files(tmp_path):
    url = closed_port_url()
    with pytest.raises(dl.DownloadError) as info:
        dl.download_cifar10(tmp_path, url=url, progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"could not download {url} (")
    assert f"put it in {tmp_path} " in message and "cifar-10-python.tar.gz" in message
    assert leftovers(tmp_path) == []


def test_http_errors_are_named(server, tmp_path):
    with pytest.raises(dl.DownloadError, match="the server answered HTTP 404"):
        dl.download_cifar10(tmp_path, url=server.url("/nothing.tar.gz"), md5="0" * 32,
                            progress=False)


def test_an_archive_put_there_by_hand_is_checked_and_unpacked_offline(good, tmp_path):
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(good)
    folder = dl.download_cifar10(tmp_path, url=closed_port_url(), md5=md5(good),
                                 progress=False)
    assert dl.is_complete(folder)
    assert (tmp_path / "cifar-10-python.tar.gz").read_bytes() == good  # the user's, kept


def test_a_bad_archive_put_there_by_hand_is_reported_not_deleted(good, tmp_path):
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(good[:-1])
    with pytest.raises(dl.DownloadError, match="delete it"):
        dl.download_cifar10(tmp_path, url=closed_port_url(), md5=md5(good), progress=False)
    assert leftovers(tmp_path) == ["cifar-10-python.tar.gz"]


# ----- needle-train --download ---------------------------------------------------------------
def test_needle_train_downloads_into_data_dir(server, good, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(dl, "CIFAR10_URL", server.url("/cifar.tar.gz"))
    monkeypatch.setattr(dl, "CIFAR10_MD5", md5(good))
    root = tmp_path / "data"
    argv = ["--model", "resnet9", "--download", "--data-dir", str(root), "--epochs", "1",
            "--batch-size", "5", "--augment", "0"]
    assert train.main(argv) == 0
    out = capsys.readouterr().out
    assert "ResNet9 on CIFAR-10, 15 training / 3 test images" in out
    assert dl.is_complete(root / "cifar-10-batches-py")
    assert train.main([*argv, "--quiet"]) == 0  # the cache is reused
    assert server.hits == ["/cifar.tar.gz"]


def test_needle_train_download_defaults_to_the_cache(server, good, tmp_path, monkeypatch,
                                                     capsys):
    monkeypatch.setattr(dl, "CIFAR10_URL", server.url("/cifar.tar.gz"))
    monkeypatch.setattr(dl, "CIFAR10_MD5", md5(good))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert train.main(["--model", "resnet9", "--download", "--epochs", "1", "--batch-size",
                       "5", "--quiet"]) == 0
    assert dl.is_complete(tmp_path / "needle" / "cifar-10-batches-py")


def test_needle_train_offline_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    url = closed_port_url()
    monkeypatch.setattr(dl, "CIFAR10_URL", url)
    with pytest.raises(SystemExit) as info:
        train.main(["--model", "resnet9", "--download", "--data-dir", str(tmp_path),
                    "--quiet"])
    assert info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith(f"needle-train: error: --download: could not download {url}")
    assert f"put it in {tmp_path} " in err[-1]


def test_download_is_for_cifar_only(capsys):
    with pytest.raises(SystemExit) as info:
        train.main(["--model", "mlp", "--download", "--quiet"])
    assert info.value.code == 2
    assert "--download fetches CIFAR-10 for --model resnet9; MNIST is built in" in (
        capsys.readouterr().err)


@pytest.mark.skipif(os.environ.get("NEEDLE_REAL_DOWNLOAD") != "1",
                    reason="the real 170 MB download runs only with NEEDLE_REAL_DOWNLOAD=1")
def test_real_download(tmp_path):  # pragma: no cover - needs the network
    folder = dl.download_cifar10(tmp_path)
    assert len(CIFAR10Dataset(folder, train=True)) == 50_000

"""needle.data.CIFAR10Dataset on small batch files written in the exact CIFAR-10 python format."""

from __future__ import annotations

import codecs
import os
import pickle
import struct
import sys

import numpy as np
import pytest

import needle as ndl
from needle.data import CIFAR10Dataset, DataLoader, transforms

TRAIN_SIZES = (3, 4, 3, 4, 3)  # images in data_batch_1 .. data_batch_5
TEST_SIZE = 4


# ----- helpers independent of the code under test -----------------------------------------
def batch_dict(data, labels, name=b"batch"):
    """A dict shaped like a real CIFAR-10 batch (bytes keys, list labels, uint8 rows)."""
    return {
        b"batch_label": name,
        b"labels": list(labels),
        b"data": data,
        b"filenames": [b"img_%d.png" % i for i in range(len(labels))],
    }


def write_batch(path, data, labels, protocol=2):
    with open(path, "wb") as f:
        pickle.dump(batch_dict(data, labels), f, protocol=protocol)


def write_object(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def ref_image(row):
    """One CIFAR row as nested [channel][r][c] lists: 1024 red, then green, then blue, row-major."""
    return [[[int(row[ch * 1024 + r * 32 + c]) for c in range(32)] for r in range(32)]
            for ch in range(3)]


@pytest.fixture
def cifar(tmp_path):
    """A cifar-10-batches-py folder with 17 training and 4 test images of random pixels."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    train = []
    for k, n in enumerate(TRAIN_SIZES, start=1):
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n).tolist()
        write_batch(folder / f"data_batch_{k}", data, labels)
        train.append((data, labels))
    data = rng.integers(0, 256, size=(TEST_SIZE, 3072), dtype=np.uint8)
    labels = [9, 0, 3, 9]
    write_batch(folder / "test_batch", data, labels)
    return folder, train, (data, labels)


# ----- reading -----------------------------------------------------------------------------
def test_train_split_reads_the_five_batches_in_order(cifar):
    folder, train, _ = cifar
    ds = CIFAR10Dataset(folder, train=True)
    assert isinstance(ds, ndl.data.Dataset)
    assert len(ds) == sum(TRAIN_SIZES) == 17
    assert ds.X.shape == (17, 3, 32, 32) and ds.X.dtype == np.float32
    assert ds.y.shape == (17,) and ds.y.dtype == np.int64
    assert ds.X.min() >= 0.0 and ds.X.max() <= 1.0
    rows = [row for data, _ in train for row in data]
    assert ds.y.tolist() == [label for _, labels in train for label in labels]
    expected = np.array([ref_image(row) for row in rows], dtype=np.float32) / np.float32(255)
    np.testing.assert_array_equal(ds.X, expected)
    assert ds.files == [folder / f"data_batch_{k}" for k in range(1, 6)]


def test_test_split_reads_test_batch_only(cifar):
    folder, _, (data, labels) = cifar
    (folder / "data_batch_1").write_bytes(b"not read for the test split")
    ds = CIFAR10Dataset(folder, train=False)
    assert len(ds) == TEST_SIZE and ds.files == [folder / "test_batch"]
    assert ds.y.tolist() == labels
    expected = np.array([ref_image(row) for row in data], dtype=np.float32) / np.float32(255)
    np.testing.assert_array_equal(ds.X, expected)


def test_train_split_does_not_read_test_batch(cifar):
    folder, _, _ = cifar
    (folder / "test_batch").unlink()
    assert len(CIFAR10Dataset(folder, train=True)) == 17


def test_pixel_placement(tmp_path):
    data = np.zeros((2, 3072), dtype=np.uint8)
    data[1, 0 * 1024 + 2 * 32 + 5] = 255  # red, row 2, column 5
    data[1, 1 * 1024 + 7 * 32 + 0] = 128  # green, row 7, column 0
    data[1, 2 * 1024 + 31 * 32 + 30] = 1  # blue, row 31, column 30
    data[0, 0] = 51  # red, row 0, column 0
    write_batch(tmp_path / "test_batch", data, [4, 2])
    X = CIFAR10Dataset(tmp_path, train=False).X
    assert X[1, 0, 2, 5] == 1.0
    assert X[1, 1, 7, 0] == np.float32(128) / np.float32(255)
    assert X[1, 2, 31, 30] == np.float32(1) / np.float32(255)
    assert X[0, 0, 0, 0] == np.float32(0.2)
    assert np.count_nonzero(X) == 4


def test_batches_in_the_python2_layout_of_the_real_files_load(tmp_path):
    """Real batches hold Python 2 strs (BINSTRING) and name numpy.core.multiarray._reconstruct."""

    class Py2Pickler(pickle._Pickler):
        dispatch = pickle._Pickler.dispatch.copy()

        def save_str2(self, obj):
            if len(obj) < 256:
                self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
            else:
                self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
            self.memoize(obj)

        dispatch[bytes] = save_str2

    data = np.arange(2 * 3072).reshape(2, 3072).astype(np.uint8)
    with open(tmp_path / "test_batch", "wb") as f:
        Py2Pickler(f, protocol=2).dump(batch_dict(data, [1, 8]))
    raw = (tmp_path / "test_batch").read_bytes()
    assert b"_codecs" not in raw and b"numpy._core.multiarray" in raw
    (tmp_path / "test_batch").write_bytes(
        raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    ds = CIFAR10Dataset(tmp_path, train=False)
    assert ds.y.tolist() == [1, 8]
    np.testing.assert_array_equal(ds.X * 255, data.reshape(2, 3, 32, 32).astype(np.float32))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("layout", ["uint8", "int64", "fortran"])
def test_batches_of_every_pickle_protocol_load(tmp_path, protocol, layout):
    # protocol 5 pickles arrays through numpy._core.numeric._frombuffer
    data = np.arange(2 * 3072).reshape(2, 3072) % 256
    if layout == "uint8":
        data = data.astype(np.uint8)
    elif layout == "fortran":
        data = np.asfortranarray(data.astype(np.uint8))
    write_batch(tmp_path / "test_batch", data, [1, 8], protocol=protocol)
    ds = CIFAR10Dataset(tmp_path, train=False)
    assert ds.y.tolist() == [1, 8]
    np.testing.assert_array_equal(ds.X * 255, data.reshape(2, 3, 32, 32).astype(np.float32))


# ----- items, batches, transforms ----------------------------------------------------------
def test_item_and_batch_indexing(cifar):
    folder, train, _ = cifar
    ds = CIFAR10Dataset(folder, train=True, p=0.25)
    assert ds.p == 0.25
    x, y = ds[3]  # first image of data_batch_2
    assert isinstance(x, np.ndarray) and x.shape == (3, 32, 32) and x.dtype == np.float32
    assert y == train[1][1][0]
    np.testing.assert_array_equal(x * 255, np.array(ref_image(train[1][0][0]), np.float32))
    xb, yb = ds[np.array([16, 0, 3])]
    assert xb.shape == (3, 3, 32, 32)
    assert yb.tolist() == [train[4][1][-1], train[0][1][0], train[1][1][0]]
    np.testing.assert_array_equal(xb[2], x)
    xs, ys = ds[1:3]
    assert xs.shape == (2, 3, 32, 32) and ys.tolist() == train[0][1][1:3]
    assert ds[-1][1] == train[4][1][-1]


def test_transforms_see_hwc_images_and_are_undone(cifar):
    folder, _, _ = cifar
    plain = CIFAR10Dataset(folder, train=False)
    seen = []

    def record(img):
        seen.append(img.copy())
        return img

    steps = [record, transforms.RandomFlipHorizontal(p=1.0)]
    flip = CIFAR10Dataset(folder, train=False, transforms=steps)
    x, _ = flip[2]
    assert seen[0].shape == (32, 32, 3)
    np.testing.assert_array_equal(seen[0][:, :, 0], plain.X[2, 0])  # HWC channel 0 is red
    np.testing.assert_array_equal(x, plain.X[2][:, :, ::-1])  # the W axis is flipped
    seen.clear()
    xb, yb = flip[np.array([3, 0])]
    assert xb.shape == (2, 3, 32, 32) and yb.tolist() == [9, 9]
    np.testing.assert_array_equal(xb, plain.X[[3, 0]][:, :, :, ::-1])
    np.testing.assert_array_equal(np.stack(seen), plain.X[[3, 0]].transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(flip.X, plain.X)  # the stored images are untouched


def test_transform_channel_order(cifar):
    folder, _, _ = cifar
    plain = CIFAR10Dataset(folder, train=False)
    bgr = CIFAR10Dataset(folder, train=False, transforms=[lambda img: img[:, :, ::-1]])
    x, _ = bgr[1]
    np.testing.assert_array_equal(x, plain.X[1, ::-1])
    assert bgr[np.array([], dtype=np.int64)][0].shape == (0, 3, 32, 32)


def test_dataloader_batches(cifar):
    folder, train, _ = cifar
    loader = DataLoader(CIFAR10Dataset(folder, train=True), batch_size=5)
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(5, 3, 32, 32)] * 3 + [(2, 3, 32, 32)]
    labels = np.concatenate([b[1].numpy() for b in batches])
    assert labels.tolist() == [label for _, ls in train for label in ls]


def test_repr(cifar):
    folder, _, _ = cifar
    text = repr(CIFAR10Dataset(folder, train=False))
    assert text == f"CIFAR10Dataset({str(folder)!r}, train=False, len=4, transforms=None)"


# ----- missing and broken files ------------------------------------------------------------
def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        CIFAR10Dataset(tmp_path / "nowhere", train=True)


def test_missing_batch_is_named(cifar):
    folder, _, _ = cifar
    (folder / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError) as err:
        CIFAR10Dataset(folder, train=True)
    msg = str(err.value)
    assert str(folder / "data_batch_3") in msg and "data_batch_1" not in msg
    assert len(CIFAR10Dataset(folder, train=False)) == TEST_SIZE


def test_parent_folder_gets_a_hint(cifar):
    folder, _, _ = cifar
    with pytest.raises(FileNotFoundError, match="pass .*cifar-10-batches-py instead"):
        CIFAR10Dataset(folder.parent, train=False)


@pytest.mark.parametrize("keep", [0, 1, 100, 0.5, -1])
def test_truncated_batch(cifar, keep):
    folder, _, _ = cifar
    path = folder / "data_batch_2"
    raw = path.read_bytes()
    cut = int(len(raw) * keep) if isinstance(keep, float) else keep % len(raw)
    path.write_bytes(raw[:cut])
    with pytest.raises(ValueError, match="truncated") as err:
        CIFAR10Dataset(folder, train=True)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("data, found", [
    (np.zeros((3, 3071), np.uint8), "shape (3, 3071)"),
    (np.zeros(3 * 3072, np.uint8), "shape (9216,)"),
    (np.zeros((3, 3, 1024), np.uint8), "shape (3, 3, 1024)"),
    (np.zeros((3, 3072), np.float32), "float32"),
    (np.full((3, 3072), 256, np.int16), "0..255"),
    ([[0] * 3072] * 3, "list"),
])
def test_wrong_data_is_refused(tmp_path, data, found):
    write_batch(tmp_path / "test_batch", data, [0, 1, 2])
    with pytest.raises(ValueError) as err:
        CIFAR10Dataset(tmp_path, train=False)
    assert str(tmp_path / "test_batch") in str(err.value) and found in str(err.value)


def test_wider_integer_data_in_range_is_accepted(tmp_path):
    write_batch(tmp_path / "test_batch", np.full((1, 3072), 255, np.int64), [5])
    assert CIFAR10Dataset(tmp_path, train=False).X.min() == 1.0


@pytest.mark.parametrize("labels, found", [
    ([0, 1], "has 2 entries"),
    ([0, 1, 2, 3], "has 4 entries"),
    ([0, 10, 1], "0..10"),
    ([-1, 0, 1], "-1..1"),
    ([b"cat", b"dog", b"cow"], "|S3"),
])
def test_wrong_labels_are_refused(tmp_path, labels, found):
    write_batch(tmp_path / "test_batch", np.zeros((3, 3072), np.uint8), labels)
    with pytest.raises(ValueError) as err:
        CIFAR10Dataset(tmp_path, train=False)
    assert str(tmp_path / "test_batch") in str(err.value) and found in str(err.value)


@pytest.mark.parametrize("obj, found", [
    ([1, 2, 3], "found list"),
    ({b"data": np.zeros((1, 3072), np.uint8)}, "b'labels'"),
    ({"data": np.zeros((1, 3072), np.uint8), "labels": [0]}, "b'data'"),
])
def test_not_a_batch(tmp_path, obj, found):
    write_object(tmp_path / "test_batch", obj)
    with pytest.raises(ValueError) as err:
        CIFAR10Dataset(tmp_path, train=False)
    assert str(tmp_path / "test_batch") in str(err.value) and found in str(err.value)


# ----- pickles that would run code ---------------------------------------------------------
class Call:
    """Pickles as a call of `fn(*args)`, the way a malicious batch would."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


MARKER = "_needle_test_cifar10_pwned"


@pytest.mark.parametrize("fn, args, name", [
    (exec, (f"import sys; sys.modules[{MARKER!r}] = sys",), "__builtin__.exec"),
    (print, ("pwned",), "__builtin__.print"),  # protocol 2 names builtins so
    (os.getcwd, (), "getcwd"),
    (np.save, ("pwned.npy", np.zeros(1)), "numpy.save"),
])
def test_pickle_calling_code_is_refused(cifar, capsys, monkeypatch, fn, args, name):
    folder, _, _ = cifar
    monkeypatch.chdir(folder)  # where np.save would write if it were called
    path = folder / "data_batch_4"
    write_object(path, batch_dict(Call(fn, *args), [0]))
    with pytest.raises(ValueError, match="refusing") as err:
        CIFAR10Dataset(folder, train=True)
    assert str(path) in str(err.value) and name in str(err.value)
    assert MARKER not in sys.modules
    assert "pwned" not in capsys.readouterr().out
    assert not (folder / "pwned.npy").exists()


@pytest.mark.parametrize("raw, name", [
    (b"\x80\x02cnumpy\nfrombuffer\nq\x00.", "numpy.frombuffer"),
    (b"\x80\x02cbuiltins\ngetattr\nq\x00.", "builtins.getattr"),
    (b"\x80\x02cnumpy.core.multiarray\n_frombuffer\nq\x00.", "numpy.core.multiarray._frombuffer"),
    # protocol 4 looks names up by dotted path: an attribute of an allowed class is refused
    (b"\x80\x04\x8c\x05numpy\x8c\x0endarray.tofile\x93.", "numpy.ndarray.tofile"),
])
def test_globals_outside_the_allowed_set_are_refused(tmp_path, raw, name):
    (tmp_path / "test_batch").write_bytes(raw)
    with pytest.raises(ValueError, match="refusing") as err:
        CIFAR10Dataset(tmp_path, train=False)
    assert str(tmp_path / "test_batch") in str(err.value) and name in str(err.value)


def test_allowed_globals_are_only_used_as_numpy_and_bytes_need_them(tmp_path):
    write_object(tmp_path / "test_batch", batch_dict(Call(codecs.encode, "abc", "rot13"), [0]))
    with pytest.raises(ValueError, match="corrupt CIFAR-10 batch") as err:
        CIFAR10Dataset(tmp_path, train=False)
    assert "rot13" in str(err.value) and str(tmp_path / "test_batch") in str(err.value)


def test_reconstruct_builds_plain_ndarrays_only(tmp_path):
    # _reconstruct(numpy.dtype, (0,), b"b"): an allowed global called on another allowed class
    raw = b"\x80\x02cnumpy._core.multiarray\n_reconstruct\ncnumpy\ndtype\nK\x00\x85U\x01b\x87R."
    (tmp_path / "test_batch").write_bytes(raw)
    with pytest.raises(ValueError, match="only numpy.ndarray allowed") as err:
        CIFAR10Dataset(tmp_path, train=False)
    assert str(tmp_path / "test_batch") in str(err.value)


@pytest.mark.parametrize("fn, args", [
    (np.ndarray, ((10**14,), "b")),  # called directly, the global would allocate 91 TiB
    (np.ndarray((0,)).__reduce__()[0], (np.ndarray, (10**14,), b"b")),  # numpy passes (0,)
    (np.ndarray((0,)).__reduce_ex__(5)[0], (b"", np.dtype(np.uint8), (10**14,), "C")),
])
def test_an_array_larger_than_its_bytes_is_refused_without_allocating(tmp_path, fn, args):
    import tracemalloc

    write_object(tmp_path / "test_batch", batch_dict(Call(fn, *args), [0]))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="corrupt CIFAR-10 batch") as err:
            CIFAR10Dataset(tmp_path, train=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(tmp_path / "test_batch") in str(err.value) and peak < 1 << 20

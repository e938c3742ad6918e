"""needle.data: MNIST reading (real files and broken ones), Dataset, DataLoader, transforms."""

from __future__ import annotations

import gzip
import hashlib
import struct

import numpy as np
import pytest

import needle as ndl
from needle.data import (
    MNIST_FILES,
    DataLoader,
    Dataset,
    MNISTDataset,
    NDArrayDataset,
    builtin_mnist_dir,
    find_mnist_files,
    parse_mnist,
    transforms,
)

# from needle/data/mnist/README.md
SHA256 = {
    "train-images-idx3-ubyte.gz":
        "2c9c1df9c96791cbe2db901ec6fa96714107f0c7f3b861c7fc7a635ac38b37b6",
    "train-labels-idx1-ubyte.gz":
        "c5d05298659f6a5aab997bfcb12d64f2317fa4210820002feb1a2f0a66139f3a",
    "t10k-images-idx3-ubyte.gz":
        "8be8d0bbf1280248939ffa7126e45f0af5476d9b7e23398415c58ac9976591df",
    "t10k-labels-idx1-ubyte.gz":
        "dea1acd74f516a7fe5404d4f2afa815fd3da07dceb42585f6a240c3a81bf1b85",
}
SPLITS = {"train": (MNIST_FILES[0], MNIST_FILES[1], 5000),
          "test": (MNIST_FILES[2], MNIST_FILES[3], 10000)}


# ----- helpers independent of the code under test -----------------------------------------
def ref_parse_head(image_path, label_path, k):
    """First k labels and raw pixel sums, read with struct and byte slicing only."""
    with gzip.open(image_path, "rb") as f:
        img = f.read()
    with gzip.open(label_path, "rb") as f:
        lab = f.read()
    magic, n, rows, cols = struct.unpack(">IIII", img[:16])
    assert magic == 2051
    lmagic, ln = struct.unpack(">II", lab[:8])
    assert lmagic == 2049 and ln == n
    size = rows * cols
    sums = [sum(img[16 + i * size: 16 + (i + 1) * size]) for i in range(k)]
    return list(lab[8:8 + k]), sums, n, (rows, cols)


def idx_images(pixels):
    """IDX bytes for an (n, rows, cols) list-of-lists of ints in 0..255."""
    n, rows, cols = len(pixels), len(pixels[0]), len(pixels[0][0])
    flat = [v for img in pixels for row in img for v in row]
    return struct.pack(">IIII", 0x803, n, rows, cols) + bytes(flat)


def idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


# 3 images of 2 x 3 pixels
SMALL_IMAGES = [[[0, 255, 51], [102, 0, 0]],
                [[1, 2, 3], [4, 5, 6]],
                [[255, 255, 255], [0, 0, 0]]]
SMALL_LABELS = [7, 0, 9]


@pytest.fixture
def small_files(tmp_path):
    """Gzip content under a raw name and raw content under a .gz name: detection is by magic."""
    images = tmp_path / "images.idx"
    labels = tmp_path / "labels-idx1-ubyte.gz"
    images.write_bytes(gzip.compress(idx_images(SMALL_IMAGES)))
    labels.write_bytes(idx_labels(SMALL_LABELS))
    return images, labels


@pytest.fixture(scope="module")
def mnist():
    folder = builtin_mnist_dir()
    return {name: MNISTDataset(folder / im, folder / lb) for name, (im, lb, _) in SPLITS.items()}


# ----- the packaged files ------------------------------------------------------------------
def test_builtin_files_are_intact():
    folder = builtin_mnist_dir()
    assert folder.is_dir() and folder.name == "mnist"
    for name, digest in SHA256.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


def test_find_mnist_files_builtin():
    folder = builtin_mnist_dir()
    found = find_mnist_files(folder)
    assert list(found) == list(MNIST_FILES)
    assert all(found[name] == folder / name for name in MNIST_FILES)


def test_find_mnist_files_accepts_uncompressed_and_reports_missing(tmp_path):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"x")
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(b"x")
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(b"x")
    with pytest.raises(FileNotFoundError) as err:
        find_mnist_files(tmp_path)
    msg = str(err.value)
    assert "t10k-labels-idx1-ubyte" in msg and str(tmp_path) in msg
    assert "train-images" not in msg and "t10k-images" not in msg
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(b"x")
    found = find_mnist_files(tmp_path)
    assert found["train-images-idx3-ubyte.gz"] == tmp_path / "train-images-idx3-ubyte"
    assert found["train-labels-idx1-ubyte.gz"] == tmp_path / "train-labels-idx1-ubyte.gz"
    assert found["t10k-labels-idx1-ubyte.gz"] == tmp_path / "t10k-labels-idx1-ubyte"


def test_find_mnist_files_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        find_mnist_files(tmp_path / "nowhere")


# ----- the real MNIST data -----------------------------------------------------------------
@pytest.mark.parametrize("split", SPLITS)
def test_mnist_counts_dtypes_range(mnist, split):
    ds = mnist[split]
    n = SPLITS[split][2]
    assert len(ds) == n
    assert ds.images.shape == (n, 784) and ds.images.dtype == np.float32
    assert ds.labels.shape == (n,) and ds.labels.dtype == np.uint8
    assert ds.images.min() == 0.0 and ds.images.max() == 1.0
    assert set(np.unique(ds.labels)) == set(range(10))


@pytest.mark.parametrize("split", SPLITS)
def test_mnist_matches_independent_parse(mnist, split):
    image_name, label_name, n = SPLITS[split]
    folder = builtin_mnist_dir()
    labels, sums, n_ref, shape = ref_parse_head(folder / image_name, folder / label_name, 8)
    ds = mnist[split]
    assert n_ref == n and shape == (28, 28)
    assert ds.labels[:8].tolist() == labels
    np.testing.assert_allclose(ds.images[:8].sum(axis=1) * 255.0, sums, rtol=1e-5)
    # pixel values are exactly k / 255 in float32
    np.testing.assert_array_equal(np.round(ds.images[:8] * 255) / np.float32(255),
                                  ds.images[:8])


def test_mnist_known_label_statistics(mnist):
    # the official test set's first labels and class counts; the training subset is balanced
    assert mnist["test"].labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert np.bincount(mnist["test"].labels).tolist() == [
        980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert np.bincount(mnist["train"].labels).tolist() == [500] * 10


def test_parse_mnist_and_indexing(mnist):
    folder = builtin_mnist_dir()
    X, y = parse_mnist(folder / MNIST_FILES[0], str(folder / MNIST_FILES[1]))
    ds = mnist["train"]
    assert X.dtype == np.float32 and X.shape == (5000, 784) and y.dtype == np.uint8
    np.testing.assert_array_equal(X, ds.images)
    np.testing.assert_array_equal(y, ds.labels)
    x0, y0 = ds[3]
    assert x0.shape == (784,) and int(y0) == int(y[3])
    np.testing.assert_array_equal(x0, X[3])
    xs, ys = ds[10:15]
    assert xs.shape == (5, 784) and ys.shape == (5,)
    idx = np.array([4, 0, 4999])
    xs, ys = ds[idx]
    assert xs.shape == (3, 784)
    np.testing.assert_array_equal(xs, X[[4, 0, 4999]])
    np.testing.assert_array_equal(ys, y[[4, 0, 4999]])


# ----- MNIST from small files written here ---------------------------------------------------
def test_small_files_gz_and_raw(small_files):
    images, labels = small_files
    ds = MNISTDataset(images, labels)
    assert len(ds) == 3 and ds.image_shape == (2, 3, 1)
    x, y = ds[0]
    np.testing.assert_array_equal(x * 255, [0, 255, 51, 102, 0, 0])
    assert x.dtype == np.float32 and y == 7 and ds.labels.dtype == np.uint8
    assert np.float32(51 / 255) == x[2]
    # the same content, the other way round (raw under .idx name, gzip under .gz name)
    raw_images = images.with_name("raw-images")
    raw_images.write_bytes(idx_images(SMALL_IMAGES))
    gz_labels = labels.with_name("labels.bin")
    gz_labels.write_bytes(gzip.compress(idx_labels(SMALL_LABELS)))
    X, y = parse_mnist(raw_images, gz_labels)
    np.testing.assert_array_equal(X, ds.images)
    assert y.tolist() == SMALL_LABELS


def test_missing_file(small_files, tmp_path):
    images, labels = small_files
    missing = tmp_path / "nope-images.gz"
    with pytest.raises(FileNotFoundError, match="nope-images"):
        MNISTDataset(missing, labels)
    with pytest.raises(FileNotFoundError, match="nope-images"):
        parse_mnist(images, missing)


def test_wrong_magic(tmp_path, small_files):
    images, labels = small_files
    bad = tmp_path / "bad-images"
    bad.write_bytes(struct.pack(">I", 0x804) + idx_images(SMALL_IMAGES)[4:])
    with pytest.raises(ValueError) as err:
        MNISTDataset(bad, labels)
    msg = str(err.value)
    assert str(bad) in msg and "0x00000803" in msg and "0x00000804" in msg
    # label and image files swapped
    with pytest.raises(ValueError) as err:
        MNISTDataset(images, images)
    assert "0x00000801" in str(err.value) and str(images) in str(err.value)


@pytest.mark.parametrize("which", ["images", "labels"])
def test_truncated_data(tmp_path, small_files, which):
    images, labels = small_files
    data = idx_images(SMALL_IMAGES) if which == "images" else idx_labels(SMALL_LABELS)
    bad = tmp_path / f"short-{which}"
    bad.write_bytes(gzip.compress(data[:-1]))
    args = (bad, labels) if which == "images" else (images, bad)
    with pytest.raises(ValueError) as err:
        MNISTDataset(*args)
    msg = str(err.value)
    assert str(bad) in msg and "truncated" in msg
    expected = 18 if which == "images" else 3
    assert f"{expected} data bytes are expected, found {expected - 1}" in msg


@pytest.mark.parametrize("length", [0, 2, 6, 15])
def test_truncated_header(tmp_path, small_files, length):
    _, labels = small_files
    bad = tmp_path / "stub-images"
    bad.write_bytes(idx_images(SMALL_IMAGES)[:length])
    with pytest.raises(ValueError) as err:
        MNISTDataset(bad, labels)
    msg = str(err.value)
    assert str(bad) in msg and "16-byte" in msg and f"found only {length} bytes" in msg


def test_trailing_data(tmp_path, small_files):
    images, _ = small_files
    bad = tmp_path / "long-labels"
    bad.write_bytes(idx_labels(SMALL_LABELS) + b"\x00")
    with pytest.raises(ValueError, match="trailing") as err:
        MNISTDataset(images, bad)
    assert str(bad) in str(err.value)


@pytest.mark.parametrize("keep", [5, 30, -9])
def test_truncated_gzip(tmp_path, small_files, keep):
    _, labels = small_files
    compressed = gzip.compress(idx_images(SMALL_IMAGES))
    bad = tmp_path / "cut-images.gz"
    bad.write_bytes(compressed[:keep])
    with pytest.raises(ValueError) as err:
        MNISTDataset(bad, labels)
    assert str(bad) in str(err.value) and "gzip" in str(err.value)


def test_corrupt_gzip(tmp_path, small_files):
    _, labels = small_files
    compressed = bytearray(gzip.compress(idx_images(SMALL_IMAGES)))
    compressed[-8] ^= 0xFF  # break the CRC
    bad = tmp_path / "crc-images.gz"
    bad.write_bytes(bytes(compressed))
    with pytest.raises(ValueError, match="gzip") as err:
        MNISTDataset(bad, labels)
    assert str(bad) in str(err.value)


def test_mismatched_counts(tmp_path, small_files):
    images, _ = small_files
    labels = tmp_path / "four-labels"
    labels.write_bytes(idx_labels([1, 2, 3, 4]))
    with pytest.raises(ValueError) as err:
        MNISTDataset(images, labels)
    msg = str(err.value)
    assert str(images) in msg and str(labels) in msg
    assert "3 images" in msg and "4 labels" in msg


def test_mnist_transforms_see_hwc_images(small_files):
    images, labels = small_files
    seen = []

    def record(img):
        seen.append(img.copy())
        return img[::-1]  # flip rows, so we can tell the transform ran

    def plus_one(img):
        return img + 1

    ds = MNISTDataset(images, labels, transforms=[record, plus_one])
    x, y = ds[1]
    assert seen[0].shape == (2, 3, 1) and y == 0
    np.testing.assert_array_equal(seen[0][..., 0] * 255, [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_allclose(x * 255, np.array([4, 5, 6, 1, 2, 3]) + 255, rtol=1e-6)
    seen.clear()
    xs, ys = ds[np.array([2, 0])]
    assert xs.shape == (2, 6) and ys.tolist() == [9, 7]
    assert len(seen) == 2
    np.testing.assert_array_equal(seen[0][..., 0] * 255, [[255, 255, 255], [0, 0, 0]])
    np.testing.assert_array_equal(seen[1][..., 0] * 255, [[0, 255, 51], [102, 0, 0]])
    np.testing.assert_allclose(xs[1] * 255, np.array([102, 0, 0, 0, 255, 51]) + 255, rtol=1e-6)
    # the stored data is untouched
    np.testing.assert_array_equal(ds.images[1] * 255, [1, 2, 3, 4, 5, 6])


def test_mnist_random_crop_per_image_in_order(mnist):
    folder = builtin_mnist_dir()
    ds = MNISTDataset(folder / MNIST_FILES[0], folder / MNIST_FILES[1],
                      transforms=[transforms.RandomCrop(2)])
    np.random.seed(7)
    xs, ys = ds[np.array([5, 1, 5])]
    np.random.seed(7)
    for row, i in zip(xs, [5, 1, 5]):
        sx, sy = np.random.randint(-2, 3, size=2)
        img = mnist["train"].images[i].reshape(28, 28)
        want = np.zeros((28, 28), np.float32)
        for r in range(28):
            for c in range(28):
                if 0 <= r + sx < 28 and 0 <= c + sy < 28:
                    want[r, c] = img[r + sx, c + sy]
        np.testing.assert_array_equal(row, want.reshape(-1))


# ----- Dataset and NDArrayDataset ----------------------------------------------------------
def test_dataset_base():
    ds = Dataset([lambda x: x * 2, lambda x: x + 1])
    assert ds.apply_transforms(3) == 7  # list order: (3 * 2) + 1
    assert Dataset().apply_transforms("same") == "same"
    with pytest.raises(NotImplementedError):
        ds[0]
    with pytest.raises(NotImplementedError):
        len(ds)


def test_ndarray_dataset():
    a = np.arange(10).reshape(5, 2)
    b = np.array([10, 11, 12, 13, 14])
    ds = NDArrayDataset(a, b)
    assert len(ds) == 5
    x, y = ds[2]
    assert x.tolist() == [4, 5] and y == 12
    x, y = ds[1:3]
    assert x.tolist() == [[2, 3], [4, 5]] and y.tolist() == [11, 12]
    x, y = ds[np.array([4, 0])]
    assert x.tolist() == [[8, 9], [0, 1]] and y.tolist() == [14, 10]
    assert len(NDArrayDataset([1, 2, 3])[np.array([0, 2])]) == 1
    with pytest.raises(ValueError, match=r"\[5, 4\]"):
        NDArrayDataset(a, b[:4])
    with pytest.raises(ValueError):
        NDArrayDataset()


# ----- DataLoader --------------------------------------------------------------------------
def test_loader_batches_equal_dataset_on_device(mnist, device):
    ds = mnist["train"]
    loader = DataLoader(ds, batch_size=64, device=device)
    assert len(loader) == 79  # 78 full batches + 8 left over
    batches = list(loader)
    assert len(batches) == 79
    for k in (0, 40, 78):
        X, y = batches[k]
        idx = np.arange(64 * k, min(64 * (k + 1), 5000))
        assert isinstance(X, ndl.Tensor) and isinstance(y, ndl.Tensor)
        assert X.device == device and y.device == device
        assert not X.requires_grad and not y.requires_grad
        assert X.dtype == "float32" and y.dtype == "uint8"
        np.testing.assert_array_equal(X.numpy(), ds.images[idx])
        np.testing.assert_array_equal(y.numpy(), ds.labels[idx])
    assert batches[-1][0].shape == (8, 784)


def test_loader_batch_size_one_keeps_batch_dim(mnist, device):
    loader = DataLoader(mnist["test"], device=device)
    assert len(loader) == 10000
    X, y = next(iter(loader))
    assert X.shape == (1, 784) and y.shape == (1,)
    assert y.numpy().tolist() == [7]


def test_loader_dtype_and_single_array(device):
    data = np.arange(12, dtype=np.int64).reshape(6, 2)
    loader = DataLoader(NDArrayDataset(data, np.arange(6, dtype=np.uint8)), batch_size=4,
                        device=device, dtype="float32")
    X, y = next(iter(loader))
    assert X.dtype == "float32" and y.dtype == "float32"
    np.testing.assert_array_equal(X.numpy(), data[:4].astype(np.float32))

    class Plain(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, index):
            return np.arange(5)[index] * 10

    batches = list(DataLoader(Plain(), batch_size=2, device=device))
    assert [len(b) for b in batches] == [1, 1, 1]
    assert [b[0].numpy().tolist() for b in batches] == [[0, 10], [20, 30], [40]]


def test_loader_shuffle_matches_np_permutation(device):
    n = 23
    loader = DataLoader(NDArrayDataset(np.arange(n) * 3), batch_size=5, shuffle=True,
                        device=device)
    np.random.seed(11)
    epoch1 = [b[0].numpy() for b in loader]
    epoch2 = [b[0].numpy() for b in loader]
    np.random.seed(11)
    perm1, perm2 = np.random.permutation(n), np.random.permutation(n)
    assert [len(b) for b in epoch1] == [5, 5, 5, 5, 3]
    np.testing.assert_array_equal(np.concatenate(epoch1), perm1 * 3)
    np.testing.assert_array_equal(np.concatenate(epoch2), perm2 * 3)
    assert not np.array_equal(perm1, perm2)
    # the permutation is drawn when iter() is called, not at the first next()
    np.random.seed(3)
    it = iter(loader)
    np.random.seed(99)
    first = next(it)[0].numpy()
    np.random.seed(3)
    np.testing.assert_array_equal(first, np.random.permutation(n)[:5] * 3)


@pytest.mark.parametrize("n, bs, sizes", [
    (10, 4, [4, 4, 2]), (10, 3, [3, 3, 3, 1]), (10, 5, [5, 5]), (10, 10, [10]),
    (10, 15, [10]), (1, 1, [1]), (0, 3, []),
])
def test_loader_split_sizes(n, bs, sizes):
    loader = DataLoader(NDArrayDataset(np.arange(n)), batch_size=bs)
    batches = [b[0].numpy().tolist() for b in loader]
    assert [len(b) for b in batches] == sizes
    assert len(loader) == len(sizes)
    assert sum(batches, []) == list(range(n))


def test_loader_validation_and_repr():
    ds = NDArrayDataset(np.zeros((3, 2)))
    for bad in (0, -2):
        with pytest.raises(ValueError, match=str(bad)):
            DataLoader(ds, batch_size=bad)
    with pytest.raises(TypeError):
        DataLoader(ds, batch_size=2.5)
    text = repr(DataLoader(ds, batch_size=2, shuffle=True))
    assert "batch_size=2" in text and "shuffle=True" in text and "NDArrayDataset" in text


# ----- transforms --------------------------------------------------------------------------
IMG = np.arange(2 * 3 * 2).reshape(2, 3, 2)  # H=2, W=3, C=2
IMG_FLIPPED = np.array([[[4, 5], [2, 3], [0, 1]],
                        [[10, 11], [8, 9], [6, 7]]])


def test_flip_follows_one_rand_draw():
    flip = transforms.RandomFlipHorizontal(p=0.5)
    np.random.seed(0)
    draws = np.random.rand(6)
    np.random.seed(0)
    for d in draws:
        out = flip(IMG)
        np.testing.assert_array_equal(out, IMG_FLIPPED if d < 0.5 else IMG)
    assert np.random.rand() == np.random.RandomState(0).rand(7)[-1]
    assert 0 < (draws < 0.5).sum() < 6  # the seed exercises both branches


def test_flip_probability_extremes():
    always = transforms.RandomFlipHorizontal(p=1.0)
    never = transforms.RandomFlipHorizontal(p=0.0)
    np.random.seed(1)
    for _ in range(5):
        np.testing.assert_array_equal(always(IMG), IMG_FLIPPED)
        np.testing.assert_array_equal(never(IMG), IMG)


def test_crop_literal(monkeypatch):
    img = np.arange(1, 13).reshape(3, 4, 1)
    # shift_x=1 (rows move up by one), shift_y=-2 (columns move right by two)
    monkeypatch.setattr(np.random, "randint", lambda low, high, size: np.array([1, -2]))
    out = transforms.RandomCrop(padding=2)(img)
    assert out.shape == (3, 4, 1)
    np.testing.assert_array_equal(out[..., 0], [[0, 0, 5, 6], [0, 0, 9, 10], [0, 0, 0, 0]])


def test_crop_seeded_against_loops():
    rng_img = np.random.RandomState(5).randint(1, 100, size=(6, 5, 3))
    crop = transforms.RandomCrop(padding=3)
    np.random.seed(4)
    shifts = [np.random.randint(low=-3, high=4, size=2) for _ in range(8)]
    after = np.random.rand()
    np.random.seed(4)
    for sx, sy in shifts:
        out = crop(rng_img)
        want = np.zeros_like(rng_img)
        for r in range(6):
            for c in range(5):
                if 0 <= r + sx < 6 and 0 <= c + sy < 5:
                    want[r, c] = rng_img[r + sx, c + sy]
        np.testing.assert_array_equal(out, want)
    assert np.random.rand() == after  # exactly one randint(size=2) per call
    assert any(sx != 0 or sy != 0 for sx, sy in shifts)


def test_crop_zero_padding_is_identity():
    np.testing.assert_array_equal(transforms.RandomCrop(padding=0)(IMG), IMG)


def test_transform_validation():
    for p in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match=str(p)):
            transforms.RandomFlipHorizontal(p=p)
    with pytest.raises(ValueError, match="-1"):
        transforms.RandomCrop(padding=-1)
    with pytest.raises(TypeError):
        transforms.RandomCrop(padding=1.5)
    with pytest.raises(ValueError, match=r"\(784,\)"):
        transforms.RandomFlipHorizontal()(np.zeros(784))


def test_loader_refuses_a_dataset_that_reads_one_sample_per_index(device):
    """A PyTorch-style dataset (one sample per index) batched silently wrong: its
    per-sample reshape ran on the whole batch ((12,) for 3 images of 2x2) and its label
    came out as one number for the batch. Each array must have one row per index."""
    class OneSample(ndl.data.Dataset):
        def __init__(self):
            super().__init__()
            self.X = np.arange(24, dtype=np.float32).reshape(6, 2, 2)

        def __len__(self):
            return 6

        def __getitem__(self, i):
            return self.X[i].reshape(-1), 7

    with pytest.raises(ValueError, match=r"DataLoader: OneSample\[index array of 3\] gave item "
                                         r"0 of shape \(12,\), not one row per index"):
        next(iter(ndl.data.DataLoader(OneSample(), batch_size=3, device=device)))

    class Dicts(OneSample):
        def __getitem__(self, i):
            return {"x": self.X[i], "y": np.zeros(len(i))}
    with pytest.raises(TypeError, match="DataLoader: Dicts returned a dict for a batch; "
                                        "return a tuple of arrays"):
        next(iter(ndl.data.DataLoader(Dicts(), batch_size=3, device=device)))


@pytest.mark.parametrize("n, bs, sizes", [(10, 4, [4, 4]), (8, 4, [4, 4]), (3, 4, [])])
def test_loader_drop_last(n, bs, sizes, device):
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(np.arange(n, dtype=np.float32)),
                                 batch_size=bs, drop_last=True, device=device)
    assert [b[0].shape[0] for b in loader] == sizes and len(loader) == len(sizes)
    assert "drop_last=True" in repr(loader)

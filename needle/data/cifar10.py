"""CIFAR-10: `CIFAR10Dataset` over the python-version batches, read with a restricted unpickler.

Pass the `cifar-10-batches-py` folder (the one holding `data_batch_1` .. `data_batch_5` and
`test_batch`) as `base_folder`, or `download=True` to have `cifar-10-python.tar.gz` fetched,
verified and unpacked into a cache folder (needle/data/download.py).

The batches are pickles, and loading a pickle can run code, so they are read by an unpickler
that resolves only the few globals that rebuilding bytes and numpy arrays needs (see
`_ALLOWED_GLOBALS`) and refuses every other one; dicts, lists, str, int and the bytes of the
real (Python 2) files are built by pickle opcodes and call nothing.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .dataset import Dataset, TransformFn
from .download import cifar10_folder

TRAIN_BATCHES: tuple[str, ...] = tuple(f"data_batch_{k}" for k in range(1, 6))
TEST_BATCHES: tuple[str, ...] = ("test_batch",)
IMAGE_SHAPE = (3, 32, 32)  # (channels, rows, cols): a row is 1024 red, 1024 green, 1024 blue
ROW_LENGTH = 3 * 32 * 32
NUM_CLASSES = 10

# the functions numpy's pickles name, taken from numpy itself (numpy 2 moved them to numpy._core)
_np_reconstruct: Callable[..., Any] = np.ndarray((0,)).__reduce__()[0]
_np_scalar: Callable[..., Any] = np.int64(0).__reduce__()[0]


class _NdarrayName:
    """What the global numpy.ndarray resolves to: `_reconstruct`'s first argument, not a
    constructor (called, it could allocate any size before the data is read)."""

    def __repr__(self) -> str:
        return "numpy.ndarray"


_NDARRAY = _NdarrayName()


def _reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    """numpy's `_reconstruct`, for plain, empty ndarrays only (the pickle's data fills them).

    numpy pickles always call `_reconstruct(ndarray, (0,), b"b")` and then set the state,
    which checks the shape against the bytes present: memory grows with the file, no faster.
    """
    if subtype is not _NDARRAY:
        raise pickle.UnpicklingError(f"_reconstruct of {subtype!r}: only numpy.ndarray allowed")
    if shape != (0,):
        raise pickle.UnpicklingError(f"_reconstruct with shape {shape!r}: numpy's pickles "
                                     "use (0,)")
    return _np_reconstruct(np.ndarray, shape, dtype)


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any, axis_order: Any = None
                ) -> np.ndarray:
    """numpy's `_frombuffer` (protocol-5 pickles of arrays), over bytes the pickle holds."""
    if not isinstance(buf, (bytes, bytearray)) or not isinstance(dtype, np.dtype):
        raise pickle.UnpicklingError(f"_frombuffer of {type(buf).__name__}, "
                                     f"{type(dtype).__name__}: only bytes and a dtype allowed")
    if not (isinstance(shape, tuple) and all(type(d) is int for d in shape)) or order not in (
            "C", "F", "K"):
        raise pickle.UnpicklingError(f"_frombuffer with shape {shape!r}, order {order!r}")
    array = np.frombuffer(buf, dtype=dtype)  # sizes mismatching the bytes raise ValueError
    if order == "K" and axis_order is not None:
        return array.reshape(shape, order="C").transpose(axis_order)
    return array.reshape(shape, order=order)


def _latin1_bytes(text: Any, encoding: Any) -> bytes:
    """`_codecs.encode(text, "latin1")`: how protocol-2 pickles from Python 3 store bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"_codecs.encode with {type(text).__name__}, {encoding!r}: "
                                     "only a str and 'latin1' allowed")
    return text.encode("latin1")


def _empty_bytes(*args: Any) -> bytes:
    """`bytes()`: how protocol-2 pickles from Python 3 store b""."""
    if args:
        raise pickle.UnpicklingError("bytes(...) with arguments: only bytes() allowed")
    return b""


# (module, name) as written in the pickle -> what it resolves to; nothing else is resolvable
_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,  # numpy 1 pickles
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,  # numpy 2 pickles
    ("numpy.core.multiarray", "scalar"): _np_scalar,
    ("numpy._core.multiarray", "scalar"): _np_scalar,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,  # protocol 5 (numpy >= 1.16)
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_bytes,
    ("__builtin__", "bytes"): _empty_bytes,
    ("builtins", "bytes"): _empty_bytes,
}


class _RefusedGlobal(ValueError):
    """A pickle named a global outside `_ALLOWED_GLOBALS`."""


class _RestrictedUnpickler(pickle.Unpickler):
    """An Unpickler whose `find_class` resolves only `_ALLOWED_GLOBALS`."""

    def __init__(self, file: Any, path: Path):
        super().__init__(file, encoding="bytes")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise _RefusedGlobal(
                f"{self.path}: refusing to load the global {module}.{name} from this pickle: a "
                "CIFAR-10 batch holds only dicts, lists, bytes, str, int and numpy arrays"
            ) from None


def _unpickle(path: Path) -> Any:
    """The object pickled in `path`, loaded with `_RestrictedUnpickler`."""
    try:
        with path.open("rb") as f:
            return _RestrictedUnpickler(f, path).load()
    except FileNotFoundError:
        raise FileNotFoundError(f"CIFAR-10 batch file not found: {path}") from None
    except _RefusedGlobal:
        raise
    except (EOFError, pickle.UnpicklingError) as e:
        raise ValueError(f"{path}: truncated or corrupt CIFAR-10 batch: the pickle could not "
                         f"be read to its end ({type(e).__name__}: {e})") from None
    except (ValueError, TypeError, AttributeError, IndexError, KeyError, OverflowError,
            MemoryError) as e:
        raise ValueError(f"{path}: corrupt CIFAR-10 batch: unpickling failed "
                         f"({type(e).__name__}: {e})") from None


def read_cifar10_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """One python-version batch file as (data uint8 (N, 3072), labels int64 (N,)), checked."""
    path = Path(path)
    batch = _unpickle(path)
    if not isinstance(batch, dict):
        raise ValueError(f"{path}: not a CIFAR-10 batch: expected a pickled dict, "
                         f"found {type(batch).__name__}")
    missing = [repr(k) for k in (b"data", b"labels") if k not in batch]
    if missing:
        raise ValueError(f"{path}: not a CIFAR-10 batch: missing key(s) {', '.join(missing)}; "
                         f"keys found: {sorted(map(repr, batch))}")
    data = _check_data(batch[b"data"], path)
    labels = _check_labels(batch[b"labels"], len(data), path)
    return data, labels


def _check_data(data: Any, path: Path) -> np.ndarray:
    """`data` as uint8 (N, 3072), or a ValueError naming `path` and what was found."""
    if not isinstance(data, np.ndarray):
        raise ValueError(f"{path}: b'data' must be a numpy uint8 array of shape (N, {ROW_LENGTH}), "
                         f"found {type(data).__name__}")
    if data.ndim != 2 or data.shape[1] != ROW_LENGTH or data.dtype.kind not in "ui":
        raise ValueError(f"{path}: b'data' must be a uint8 array of shape (N, {ROW_LENGTH}), "
                         f"found {data.dtype} shape {data.shape}")
    if data.dtype != np.uint8 and data.size and (data.min() < 0 or data.max() > 255):
        raise ValueError(f"{path}: b'data' values must lie in 0..255, found "
                         f"{data.min()}..{data.max()} ({data.dtype} shape {data.shape})")
    return data.astype(np.uint8, copy=False)


def _check_labels(labels: Any, n: int, path: Path) -> np.ndarray:
    """`labels` as int64 (n,) in 0..9, or a ValueError naming `path` and what was found."""
    if not isinstance(labels, (list, tuple, np.ndarray)):
        raise ValueError(f"{path}: b'labels' must be a list of ints, found {type(labels).__name__}")
    try:
        found = np.asarray(labels)
    except ValueError:  # numpy's "inhomogeneous shape": lists of different lengths
        raise ValueError(f"{path}: b'labels' must be a flat list of ints, found a ragged "
                         "list") from None
    if found.ndim != 1 or (found.size and found.dtype.kind not in "ui"):
        raise ValueError(f"{path}: b'labels' must be a flat list of ints, found "
                         f"{found.dtype} shape {found.shape}")
    if len(found) != n:
        raise ValueError(f"{path}: label count disagrees with the images: b'data' has shape "
                         f"({n}, {ROW_LENGTH}), b'labels' has {len(found)} entries")
    if found.size and (found.min() < 0 or found.max() >= NUM_CLASSES):
        raise ValueError(f"{path}: b'labels' must lie in 0..{NUM_CLASSES - 1}, "
                         f"found {found.min()}..{found.max()}")
    return found.astype(np.int64)


def _batch_paths(base_folder: Path, train: bool) -> list[Path]:
    """The batch files of the split, or a FileNotFoundError listing every missing one."""
    if not base_folder.is_dir():
        raise FileNotFoundError(f"CIFAR-10 folder not found: {base_folder}")
    paths = [base_folder / name for name in (TRAIN_BATCHES if train else TEST_BATCHES)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        nested = base_folder / "cifar-10-batches-py"
        hint = f" (pass {nested} instead?)" if nested.is_dir() else ""
        raise FileNotFoundError(f"CIFAR-10 batch file(s) not found: {', '.join(missing)}{hint}")
    return paths


class CIFAR10Dataset(Dataset):
    """CIFAR-10 from `base_folder`: `dataset[i]` is `(image (3, 32, 32) float32, label int64)`.

    `X` is float32 (N, 3, 32, 32) in [0, 1] (bytes / 255) and `y` int64 (N,), from
    `data_batch_1` .. `data_batch_5` in order when `train`, else `test_batch`. Transforms see
    each image as (32, 32, 3) and their result is transposed back to (3, 32, 32); for a slice
    or index array they run on every selected image in order. `p` is kept for compatibility
    with the course's signature and is not used. With `download=True` (or `base_folder=None`)
    `base_folder` is a cache folder (default ~/.cache/needle) that the python version is
    fetched into, checked and unpacked the first time (see needle/data/download.py).
    """

    def __init__(
        self,
        base_folder: str | os.PathLike | None,
        train: bool,
        p: float = 0.5,
        transforms: Sequence[TransformFn] | None = None,
        download: bool = False,
    ):
        super().__init__(transforms)
        if download or base_folder is None:  # a cache folder, filled when download is set
            base_folder = cifar10_folder(base_folder, download=download)
        self.base_folder = Path(base_folder)
        self.train = bool(train)
        self.p = p
        self.files = _batch_paths(self.base_folder, self.train)
        batches = [read_cifar10_batch(path) for path in self.files]
        data = np.concatenate([d for d, _ in batches]).reshape((-1, *IMAGE_SHAPE))
        self.X = data.astype(np.float32)
        self.X /= np.float32(255.0)
        self.y = np.concatenate([labels for _, labels in batches])

    def __len__(self) -> int:
        return len(self.X)

    def __getitem__(self, index: Any) -> tuple[np.ndarray, Any]:
        x, y = self.X[index], self.y[index]
        if not self.transforms:
            return x, y
        if x.ndim == 3:
            return self._transform(x), y
        if len(x) == 0:
            return x, y
        return np.stack([self._transform(img) for img in x]), y

    def _transform(self, chw: np.ndarray) -> np.ndarray:
        hwc = self.apply_transforms(np.transpose(chw, (1, 2, 0)))
        return np.ascontiguousarray(np.transpose(hwc, (2, 0, 1)))

    def __repr__(self) -> str:
        return (
            f"CIFAR10Dataset({str(self.base_folder)!r}, train={self.train}, "
            f"len={len(self)}, transforms={self.transforms!r})"
        )

"""Penn Treebank: the course's `Dictionary`, `Corpus`, `batchify`, `get_batch`; the built-in copy.

A corpus is read line by line: each line is split on whitespace and `<eos>` is appended, and every
word gets an id in the order it is first seen (training file first, then the test file), so
`corpus.train` and `corpus.test` are lists of ids into one `corpus.dictionary`.

needle ships only the standard PTB *test* split (needle/data/ptb/README.md); `builtin_ptb_corpus`
re-splits it by lines into a training part (the first 90%) and a held-out part (the rest).
"""

from __future__ import annotations

import errno
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..arguments import integer
from ..autograd import Tensor
from .dataset import builtin_data_dir

EOS = "<eos>"
TRAIN_FILE = "train.txt"
TEST_FILE = "test.txt"
BUILTIN_FILE = "ptb.test.txt"


class Dictionary:
    """Words <-> ids, in first-seen order: `word2idx[idx2word[i]] == i`."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        """The id of `word`, given the next free id the first time it is seen."""
        idx = self.word2idx.get(word)
        if idx is None:
            idx = len(self.idx2word)
            self.word2idx[word] = idx
            self.idx2word.append(word)
        return idx

    def __len__(self) -> int:
        return len(self.idx2word)

    def __repr__(self) -> str:
        return f"Dictionary({len(self)} words)"


def read_lines(path: str | os.PathLike, max_lines: int | None = None) -> list[str]:
    """The first `max_lines` lines (all when None) of the UTF-8 text file `path`."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "PTB text file not found", str(path)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ValueError(
            f"{path}: not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {e.start} "
            f"(line {line}) cannot be decoded ({e.reason})"
        ) from None
    # newline=None: "\n", "\r\n" and "\r" end a line, as when the course iterates open(path)
    return _head(list(io.StringIO(text, newline=None)), max_lines)


def _head(lines: list[str], max_lines: int | None) -> list[str]:
    """The first `max_lines` of `lines` (all when None)."""
    if max_lines is None:
        return lines
    return lines[:integer("Corpus", "max_lines (None: all lines)", max_lines, 0)]


def tokenize_lines(lines: Iterable[str], dictionary: Dictionary) -> list[int]:
    """Ids of the words of `lines`, `<eos>` after each line, adding new words to `dictionary`."""
    return [dictionary.add_word(word) for line in lines for word in line.split() + [EOS]]


class Corpus:
    """`train.txt` then `test.txt` of `base_dir` as id lists `.train`, `.test` over `.dictionary`.

    With `max_lines`, only the first `max_lines` lines of each file are read.
    """

    def __init__(self, base_dir: str | os.PathLike, max_lines: int | None = None):
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(base_dir, TRAIN_FILE), max_lines)
        self.test = self.tokenize(os.path.join(base_dir, TEST_FILE), max_lines)

    def tokenize(self, path: str | os.PathLike, max_lines: int | None = None) -> list[int]:
        """Ids of the words of the file `path` (`<eos>` ending each line); grows the dictionary."""
        return tokenize_lines(read_lines(path, max_lines), self.dictionary)

    @classmethod
    def from_lines(cls, train_lines: Iterable[str], test_lines: Iterable[str]) -> Corpus:
        """A corpus from lines in memory, exactly as if they were `train.txt` and `test.txt`."""
        corpus = cls.__new__(cls)
        corpus.dictionary = Dictionary()
        corpus.train = tokenize_lines(train_lines, corpus.dictionary)
        corpus.test = tokenize_lines(test_lines, corpus.dictionary)
        return corpus

    def __repr__(self) -> str:
        return (f"Corpus(train={len(self.train)} tokens, test={len(self.test)} tokens, "
                f"vocabulary={len(self.dictionary)})")


def batchify(
    data: Sequence[int], batch_size: int, device: Any = None, dtype: Any = None
) -> np.ndarray:
    """`data` as `batch_size` columns of consecutive ids, shape (len(data) // batch_size, bs).

    Column j holds data[j*nbatch:(j+1)*nbatch]; the tail that fills no whole row is dropped.
    `device` is accepted for the course's signature and unused: the result is a numpy array.
    """
    batch_size = integer("batchify", "batch_size", batch_size, 1)
    nbatch = len(data) // batch_size
    if nbatch < 1:
        raise ValueError(
            f"batchify: {len(data)} tokens make no batch of batch_size {batch_size}: "
            f"at least {batch_size} tokens are needed"
        )
    return np.array(data[:nbatch * batch_size], dtype=dtype).reshape(batch_size, nbatch).T


def get_batch(
    batches: np.ndarray, i: int, bptt: int, device: Any = None, dtype: Any = None
) -> tuple[Tensor, Tensor]:
    """Inputs rows i..i+L-1 (L, bs) and their next-token targets flattened (L*bs,), as Tensors.

    L = min(bptt, nbatch - 1 - i): the last batch of an epoch may be shorter than `bptt`.
    """
    i, bptt = integer("get_batch", "i", i), integer("get_batch", "bptt", bptt)
    nbatch = batches.shape[0]
    seq_len = min(bptt, nbatch - 1 - i)
    if i < 0 or seq_len < 1:
        raise ValueError(
            f"get_batch: no batch at i={i} with bptt={bptt}: batches has {nbatch} rows, so "
            f"bptt >= 1 and 0 <= i <= {nbatch - 2} are needed (a target row must follow)"
        )
    data = batches[i:i + seq_len]
    target = batches[i + 1:i + 1 + seq_len].flatten()
    return (Tensor(data, device=device, dtype=dtype, requires_grad=False),
            Tensor(target, device=device, dtype=dtype, requires_grad=False))


def builtin_ptb_dir() -> Path:
    """The folder of the PTB text shipped with needle (the standard test split, ptb.test.txt)."""
    return builtin_data_dir("ptb")


def builtin_ptb_corpus(max_lines: int | None = None) -> Corpus:
    """The shipped PTB test split, re-split by lines: first 90% as `.train`, the rest as `.test`.

    Behaves as `Corpus` on two files holding those lines (`max_lines` limits each part). This is
    a demo corpus: the standard training split is not shipped (needle/data/ptb/README.md).
    """
    lines = read_lines(builtin_ptb_dir() / BUILTIN_FILE)
    n_train = len(lines) * 9 // 10  # 90% of the lines, rounded down
    train, test = lines[:n_train], lines[n_train:]
    return Corpus.from_lines(_head(train, max_lines), _head(test, max_lines))

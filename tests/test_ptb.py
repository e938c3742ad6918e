"""needle.data.ptb: Dictionary, Corpus, batchify, get_batch, and the built-in PTB copy."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import needle as ndl
from needle.data import (
    Corpus,
    Dictionary,
    batchify,
    builtin_ptb_corpus,
    builtin_ptb_dir,
    get_batch,
)

# from needle/data/ptb/README.md
PTB_SHA256 = "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0"
PTB_LINES = 3761
PTB_TOKENS = 82430  # 78,669 words + one <eos> per line


@pytest.fixture
def small_corpus_dir(tmp_path):
    # leading spaces and a blank line as in PTB; "\r\n" ends a line as "\n" does
    (tmp_path / "train.txt").write_bytes(b" the cat sat\n the dog\r\n\n a cat ran\n")
    (tmp_path / "test.txt").write_bytes(b" a bird\n the end\n")
    return tmp_path


# ----- Dictionary and Corpus ---------------------------------------------------------------
def test_dictionary_first_seen_order():
    d = Dictionary()
    assert len(d) == 0
    assert [d.add_word(w) for w in ["b", "a", "b", "c", "a"]] == [0, 1, 0, 2, 1]
    assert d.idx2word == ["b", "a", "c"]
    assert d.word2idx == {"b": 0, "a": 1, "c": 2}
    assert len(d) == 3


def test_corpus_ids_eos_and_shared_dictionary(small_corpus_dir):
    corpus = Corpus(small_corpus_dir)
    words = corpus.dictionary.idx2word
    assert words == ["the", "cat", "sat", "<eos>", "dog", "a", "ran", "bird", "end"]
    assert [words[i] for i in corpus.train] == [
        "the", "cat", "sat", "<eos>", "the", "dog", "<eos>", "<eos>", "a", "cat", "ran", "<eos>"]
    assert [words[i] for i in corpus.test] == ["a", "bird", "<eos>", "the", "end", "<eos>"]
    assert corpus.train[:4] == [0, 1, 2, 3] and corpus.test == [5, 7, 3, 0, 8, 3]
    assert all(corpus.dictionary.word2idx[w] == i for i, w in enumerate(words))


def test_corpus_max_lines_reads_that_many_lines_of_each_file(small_corpus_dir):
    corpus = Corpus(small_corpus_dir, max_lines=1)
    assert corpus.dictionary.idx2word == ["the", "cat", "sat", "<eos>", "a", "bird"]
    assert corpus.train == [0, 1, 2, 3] and corpus.test == [4, 5, 3]
    empty = Corpus(small_corpus_dir, max_lines=0)
    assert empty.train == [] and empty.test == [] and len(empty.dictionary) == 0


def test_tokenize_extends_the_dictionary(small_corpus_dir, tmp_path):
    corpus = Corpus(small_corpus_dir)
    n = len(corpus.dictionary)
    extra = tmp_path / "extra.txt"
    extra.write_text("cat zebra\n", encoding="utf-8")
    assert corpus.tokenize(extra) == [1, n, 3]
    assert corpus.dictionary.idx2word[n] == "zebra"


def test_corpus_missing_file_is_named(tmp_path):
    (tmp_path / "train.txt").write_text("a b\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError) as err:
        Corpus(tmp_path)
    assert str(tmp_path / "test.txt") in str(err.value)


def test_corpus_non_utf8_file_is_named(small_corpus_dir):
    bad = small_corpus_dir / "test.txt"
    bad.write_bytes(b" fine line\n caf\xe9 latin-1\n")
    with pytest.raises(ValueError) as err:
        Corpus(small_corpus_dir)
    msg = str(err.value)
    assert str(bad) in msg and "UTF-8" in msg and "0xe9" in msg and "line 2" in msg


def test_negative_max_lines_is_refused(small_corpus_dir):
    with pytest.raises(ValueError, match="max_lines"):
        Corpus(small_corpus_dir, max_lines=-1)


# ----- batchify and get_batch --------------------------------------------------------------
def test_batchify_layout_drops_the_tail():
    batches = batchify(list(range(10)), 3, device=None, dtype="float32")
    assert isinstance(batches, np.ndarray) and batches.dtype == np.float32
    np.testing.assert_array_equal(batches, [[0, 3, 6], [1, 4, 7], [2, 5, 8]])
    exact = batchify(list(range(8)), 2, None, None)
    np.testing.assert_array_equal(exact, [[0, 4], [1, 5], [2, 6], [3, 7]])


def test_batchify_without_a_whole_batch_names_the_sizes():
    with pytest.raises(ValueError) as err:
        batchify([1, 2], 3, None, "float32")
    assert "2 tokens" in str(err.value) and "batch_size 3" in str(err.value)
    with pytest.raises(ValueError, match="batch_size"):
        batchify([1, 2], 0, None, "float32")


def test_get_batch_shapes_values_and_short_last_batch(device):
    batches = batchify(list(range(20)), 2, device, "float32")  # (10, 2): columns 0..9, 10..19
    X, y = get_batch(batches, 0, 4, device=device, dtype="float32")
    assert isinstance(X, ndl.Tensor) and X.shape == (4, 2) and y.shape == (8,)
    assert X.device == device and y.device == device and not X.requires_grad
    assert X.dtype == y.dtype == "float32"
    np.testing.assert_array_equal(X.numpy(), [[0, 10], [1, 11], [2, 12], [3, 13]])
    np.testing.assert_array_equal(y.numpy(), [1, 11, 2, 12, 3, 13, 4, 14])
    X, y = get_batch(batches, 8, 4, device=device, dtype="float32")  # 10 - 1 - 8 = 1 row left
    assert X.shape == (1, 2) and y.shape == (2,)
    np.testing.assert_array_equal(X.numpy(), [[8, 18]])
    np.testing.assert_array_equal(y.numpy(), [9, 19])
    windows = [get_batch(batches, i, 4, device, "float32")[0].shape[0] for i in range(0, 9, 4)]
    assert windows == [4, 4, 1]


def test_get_batch_out_of_range():
    batches = batchify(list(range(20)), 2, None, "float32")
    for i in (9, 10, -1):
        with pytest.raises(ValueError, match=f"i={i}"):
            get_batch(batches, i, 4)
    with pytest.raises(ValueError, match="bptt=0"):
        get_batch(batches, 0, 0)


def test_sizes_must_be_integers(tmp_path):
    """(An audit.) Floats gave Python's slice error; True was batch_size 1."""
    for size in (2.5, True, "2"):
        with pytest.raises(TypeError, match="batchify: batch_size must be an integer"):
            batchify(list(range(26)), size)
    batches = batchify(list(range(26)), np.int64(4))  # numpy's integers are integers
    assert batches.shape == (6, 4)
    with pytest.raises(TypeError, match="get_batch: bptt must be an integer"):
        get_batch(batches, 0, 2.5)
    with pytest.raises(TypeError, match="get_batch: i must be an integer"):
        get_batch(batches, 1.0, 2)
    (tmp_path / "train.txt").write_text("a b\nc\n")
    (tmp_path / "test.txt").write_text("d\n")
    with pytest.raises(TypeError, match="max_lines"):
        Corpus(tmp_path, max_lines=1.5)
    with pytest.raises(ValueError, match="max_lines .* must be >= 0, found -1"):
        Corpus(tmp_path, max_lines=-1)
    assert len(Corpus(tmp_path, max_lines=np.int32(1)).train) == 3


# ----- the built-in corpus -----------------------------------------------------------------
def test_builtin_file_is_intact():
    folder = builtin_ptb_dir()
    assert folder.is_dir() and folder.name == "ptb" and (folder / "README.md").is_file()
    raw = (folder / "ptb.test.txt").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == PTB_SHA256
    assert PTB_SHA256 in (folder / "README.md").read_text(encoding="utf-8")


def test_builtin_corpus_is_the_test_split_resplit_at_90_percent():
    lines = (builtin_ptb_dir() / "ptb.test.txt").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""  # the file ends with a newline
    lines = lines[:-1]
    assert len(lines) == PTB_LINES
    n_train = 3384  # floor(0.9 * 3761)
    corpus = builtin_ptb_corpus()
    tokens = [w for line in lines for w in line.split() + ["<eos>"]]
    assert len(tokens) == PTB_TOKENS == len(corpus.train) + len(corpus.test)
    assert len(corpus.dictionary) == len(set(tokens)) == 6049  # 6,048 words and <eos>
    n_train_tokens = sum(len(line.split()) + 1 for line in lines[:n_train])
    assert len(corpus.train) == n_train_tokens
    words = corpus.dictionary.idx2word
    assert [words[i] for i in corpus.train + corpus.test] == tokens
    assert corpus.test[:len(lines[n_train].split())] == [
        corpus.dictionary.word2idx[w] for w in lines[n_train].split()]


def test_builtin_corpus_max_lines_limits_each_part():
    lines = (builtin_ptb_dir() / "ptb.test.txt").read_text(encoding="utf-8").split("\n")
    corpus = builtin_ptb_corpus(max_lines=2)
    words = corpus.dictionary.idx2word
    expect_train = [w for line in lines[:2] for w in line.split() + ["<eos>"]]
    expect_test = [w for line in lines[3384:3386] for w in line.split() + ["<eos>"]]
    assert [words[i] for i in corpus.train] == expect_train
    assert [words[i] for i in corpus.test] == expect_test

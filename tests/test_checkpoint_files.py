"""ndl.save / ndl.load with open file objects (io.BytesIO, open(..., "wb")), as torch's."""

from __future__ import annotations

import io

import numpy as np
import pytest

import needle as ndl
from needle import nn


def test_a_state_dict_round_trips_through_bytes_and_open_files(device, tmp_path):
    """(An audit.) A file object gave os.fspath's TypeError with no needle context."""
    np.random.seed(0)
    model = nn.Linear(3, 2, device=device)
    buf = io.BytesIO()
    ndl.save({"model": model.state_dict(), "epoch": 3}, buf)
    for _ in range(2):  # read from the start, whatever the position
        state = ndl.load(buf, device=device)
        assert state["epoch"] == 3
        for key, value in model.state_dict().items():
            got = state["model"][key]
            assert got.device == device and got.dtype == value.dtype
            assert got.numpy().tobytes() == value.numpy().tobytes()
    path = tmp_path / "ck.npz"
    with open(path, "wb") as f:
        ndl.save([np.arange(4), "text"], f)
    with open(path, "rb") as f:
        loaded = ndl.load(f)
    np.testing.assert_array_equal(loaded[0], np.arange(4))
    assert loaded[1] == "text" and ndl.load(path)[1] == "text"  # the same file as a path


def test_bad_file_objects_are_named(tmp_path):
    with pytest.raises(ValueError, match="load: the BytesIO is not a needle checkpoint: it is "
                                         "text starting with 'hello'"):
        ndl.load(io.BytesIO(b"hello"))
    buf = io.BytesIO()
    ndl.save({"a": np.ones(3)}, buf)
    with pytest.raises(ValueError, match="load: the BytesIO is not a readable"):
        ndl.load(io.BytesIO(buf.getvalue()[:-5]))
    path = tmp_path / "ck.npz"
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    with open(path) as f, pytest.raises(TypeError, match="text mode; open it with \"rb\""):
        ndl.load(f)
    with open(path, "w") as f, pytest.raises(TypeError, match=f"TextIOWrapper '{path}' is no "
                                                              "binary file open for writing"):
        ndl.save({"a": 1}, f)

    with open(path, "rb") as f, pytest.raises(TypeError, match="no binary file open for "
                                                                 "writing"):
        ndl.save({"a": 1}, f)
    path.write_bytes(buf.getvalue())  # (the text-mode open above emptied it)
    with open(path, "r+b") as f:
        assert ndl.load(f)["a"].shape == (3,)  # (read and write: fine)
    with open(tmp_path / "other", "wb") as f, pytest.raises(TypeError, match="no file open "
                                                                             "for reading"):
        ndl.load(f)

    class Sink(io.RawIOBase):  # (a review: io's default writable() says False)
        def __init__(self):
            self.data = b""

        def write(self, b):
            self.data += bytes(b)
            return len(b)
    sink = Sink()
    ndl.save({"a": 1}, sink)
    assert ndl.load(io.BytesIO(sink.data)) == {"a": 1}

    class Unseekable(io.RawIOBase):
        def readable(self):
            return True

        def seekable(self):
            return False
    with pytest.raises(TypeError, match="no seekable binary file"):
        ndl.load(Unseekable())

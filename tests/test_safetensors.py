"""ndl.save_safetensors / ndl.load_safetensors: the safetensors format, without the package.

The reference `safetensors` package (the test extra) checks both directions where it is
installed; the format checks below build files byte by byte from the format's description.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

import needle as ndl
from needle import nn


# ----- helpers independent of the code under test -----------------------------------------
def raw_file(path, header: dict, data: bytes = b"", length: int | None = None) -> None:
    """A file in the safetensors layout: u64 header length, JSON header, data."""
    text = json.dumps(header).encode()
    n = len(text) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + text + data)


def mlp(device, dtype="float32"):
    np.random.seed(0)
    return nn.Sequential(nn.Linear(4, 8, device=device, dtype=dtype), nn.ReLU(),
                         nn.Linear(8, 3, device=device, dtype=dtype))


def tmp_files(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


# ----- round trips ---------------------------------------------------------------------------
def test_a_module_round_trips_on_every_device(device, tmp_path):
    model = mlp(device)
    path = tmp_path / "w.safetensors"
    ndl.save_safetensors(model, path)
    loaded = ndl.load_safetensors(path, device=device)
    state = model.state_dict()
    assert set(loaded) == set(state)
    for name, tensor in state.items():
        assert loaded[name].device == device and loaded[name].dtype == tensor.dtype
        assert loaded[name].shape == tensor.shape and not loaded[name].requires_grad
        np.testing.assert_array_equal(loaded[name].numpy(), tensor.numpy())
    other = mlp(device)
    np.random.seed(1)
    other.modules[0].weight.data = ndl.init.rand(4, 8, device=device)
    other.load_state_dict(loaded)
    x = ndl.Tensor(np.random.randn(5, 4).astype("float32"), device=device)
    np.testing.assert_array_equal(other(x).numpy(), model(x).numpy())


DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "float16", "int32", "uint32",
          "float32", "int64", "uint64", "float64"]


def test_every_dtype_and_odd_shapes_round_trip_exactly(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {}
    for i, dtype in enumerate(DTYPES):
        shape = [(), (0,), (3,), (2, 3), (1, 2, 1, 2)][i % 5]
        arrays[f"t.{dtype}"] = (rng.standard_normal(shape) * 100).astype(dtype)
    arrays["big-endian"] = np.arange(6, dtype=">f4").reshape(2, 3)
    arrays["strided"] = np.arange(12.0).reshape(3, 4)[:, ::2]
    ndl.save_safetensors(arrays, tmp_path / "a.safetensors")
    back = ndl.load_safetensors(tmp_path / "a.safetensors")
    assert set(back) == set(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype.newbyteorder("=")
        np.testing.assert_array_equal(back[name].numpy(), array)


def test_the_file_follows_the_format(tmp_path):
    path = tmp_path / "m.safetensors"
    ndl.save_safetensors({"b": np.array([1, 2], dtype="int16"),
                          "a": np.array([[1.5, -2.0]], dtype="float64")}, path,
                         metadata={"who": "needle"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"] == {"who": "needle"}
    assert header["a"] == {"dtype": "F64", "shape": [1, 2], "data_offsets": [0, 16]}
    assert header["b"] == {"dtype": "I16", "shape": [2], "data_offsets": [16, 20]}
    data = raw[8 + n:]
    assert struct.unpack("<2d", data[:16]) == (1.5, -2.0)
    assert struct.unpack("<2h", data[16:]) == (1, 2)


def test_bf16_loads_as_float32_exactly(tmp_path):
    values = np.array([1.0, -2.5, 3.140625, 0.0], dtype=np.float32)  # exact in bfloat16
    bits = (values.view(np.uint32) >> 16).astype("<u2").tobytes()
    raw_file(tmp_path / "b.safetensors",
             {"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}, bits)
    w = ndl.load_safetensors(tmp_path / "b.safetensors")["w"]
    assert w.dtype == "float32"
    np.testing.assert_array_equal(w.numpy(), values.reshape(2, 2))


# ----- interop with the reference package and PyTorch ---------------------------------------
def test_the_reference_package_reads_needles_files(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    arrays = {"x": np.arange(6, dtype="int64").reshape(2, 3), "y": np.array(True),
              "z": np.linspace(0, 1, 5, dtype="float16")}
    ndl.save_safetensors(arrays, tmp_path / "n.safetensors")
    back = st.load_file(str(tmp_path / "n.safetensors"))
    assert set(back) == set(arrays)
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype
        np.testing.assert_array_equal(back[name], array)


def test_needle_reads_the_reference_packages_files(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    arrays = {"a.weight": np.random.default_rng(0).standard_normal((3, 4)).astype("float32"),
              "a.bias": np.zeros(4, dtype="float32"), "steps": np.array(7, dtype="int64"),
              "mask": np.array([True, False]), "empty": np.zeros((0, 2), dtype="uint8")}
    st.save_file(arrays, str(tmp_path / "r.safetensors"), metadata={"format": "np"})
    back = ndl.load_safetensors(tmp_path / "r.safetensors")
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype
        np.testing.assert_array_equal(back[name].numpy(), array)


def torch_mlp(torch, state: dict):
    """PyTorch's Sequential(Linear, ReLU, Linear) holding needle's MLP weights: needle's
    Linear is x @ W + b with W (in, out) and b (1, out), PyTorch's has weight (out, in)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model.load_state_dict({
        f"{i}.{kind}": (state[f"modules.{i}.weight"].T if kind == "weight"
                        else state[f"modules.{i}.bias"].reshape(-1))
        for i in (0, 2) for kind in ("weight", "bias")})
    return model


def test_a_needle_mlp_runs_in_pytorch(device, tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    model = mlp(device)
    ndl.save_safetensors(model, tmp_path / "mlp.safetensors")
    state = st.load_file(str(tmp_path / "mlp.safetensors"))
    assert set(state) == set(model.state_dict())
    x = np.random.default_rng(1).standard_normal((6, 4)).astype("float32")
    with torch.no_grad():
        theirs = torch_mlp(torch, state)(torch.from_numpy(x)).numpy()
    ours = model(ndl.Tensor(x, device=device)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


def test_a_pytorch_models_weights_come_back_into_needle(device, tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    st.save_file(theirs.state_dict(), str(tmp_path / "torch.safetensors"))
    loaded = ndl.load_safetensors(tmp_path / "torch.safetensors", device=device)
    assert sorted(loaded) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    model = mlp(device)
    model.load_state_dict({
        f"modules.{i}.{kind}": (ndl.transpose(loaded[f"{i}.weight"]) if kind == "weight"
                                else ndl.reshape(loaded[f"{i}.bias"], (1, -1)))
        for i in (0, 2) for kind in ("weight", "bias")})
    x = np.random.default_rng(2).standard_normal((6, 4)).astype("float32")
    with torch.no_grad():
        expected = theirs(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(ndl.Tensor(x, device=device)).numpy(), expected,
                               rtol=1e-6, atol=1e-6)


def test_bf16_weights_from_pytorch_load_as_float32(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    w = torch.tensor([[1.0, -0.5], [3.0, 1e-3]]).to(torch.bfloat16)
    st.save_file({"w": w}, str(tmp_path / "bf.safetensors"))
    loaded = ndl.load_safetensors(tmp_path / "bf.safetensors")["w"]
    np.testing.assert_array_equal(loaded.numpy(), w.float().numpy())


# ----- safety: nothing runs, sizes are checked, writes are atomic ----------------------------
F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize("header, data, length, message", [
    ({"w": F32}, b"\0" * 8, 10**9, "a header of 1000000000 bytes"),
    ({"w": F32}, b"\0" * 8, 3, "cannot be read as JSON"),
    ([1, 2], b"", None, "the header is a JSON list"),
    ({"w": F32}, b"\0" * 4, None, "the tensors take 8 bytes after the header, the file has 4"),
    ({"w": F32}, b"\0" * 12, None, "the tensors take 8 bytes after the header, the file has 12"),
    ({"w": {**F32, "dtype": "F8_E4M3"}}, b"\0" * 8, None, "has dtype 'F8_E4M3'"),
    ({"w": {**F32, "dtype": "pickle"}}, b"\0" * 8, None, "has dtype 'pickle'"),
    ({"w": {**F32, "shape": [-1]}}, b"\0" * 8, None, "has shape [-1]"),
    ({"w": {**F32, "shape": [3]}}, b"\0" * 8, None, "needs 12 bytes"),
    ({"w": {**F32, "shape": [2**40, 2**40]}}, b"\0" * 8, None, "needs 4835703278458516698824704"),
    ({"w": {**F32, "data_offsets": [8, 0]}}, b"\0" * 8, None, "has data_offsets [8, 0]"),
    ({"w": {**F32, "data_offsets": [4, 12]}}, b"\0" * 12, None, "'w' starts at byte 4"),
    ({"w": F32, "v": F32}, b"\0" * 8, None, "'v' starts at byte 0 of the data, expected 8"),
    ({"w": {**F32, "extra": 1}}, b"\0" * 8, None, "exactly dtype, shape and data_offsets"),
    ({"w": F32, "__metadata__": {"a": 1}}, b"\0" * 8, None, "__metadata__ must map strings"),
    # a falsy non-object was taken for no metadata
    ({"w": F32, "__metadata__": []}, b"\0" * 8, None, "__metadata__ must map strings"),
    ({"w": F32, "__metadata__": ""}, b"\0" * 8, None, "__metadata__ must map strings"),
    ({"w": F32, "__metadata__": 0}, b"\0" * 8, None, "__metadata__ must map strings"),
    ({"w": F32, "__metadata__": False}, b"\0" * 8, None, "__metadata__ must map strings"),
    ({"w": F32, "__metadata__": [["a", "b"]]}, b"\0" * 8, None, "__metadata__ must map strings"),
    # empty, but no array can have the shape: numpy's bare "cannot reshape array of size 0"
    ({"w": {**F32, "shape": [2**40, 2**40, 0], "data_offsets": [0, 0]}}, b"", None,
     "'w' (F32) has shape [1099511627776, 1099511627776, 0]: no array holds so many elements"),
    ({"w": {**F32, "shape": [0, 2**62, 2], "data_offsets": [0, 0]}}, b"", None,
     "'w' (F32) has shape [0, 4611686018427387904, 2]: no array holds"),
    ({"w": {**F32, "shape": [2**62, 0], "data_offsets": [0, 0]}}, b"", None,
     "'w' (F32) has shape [4611686018427387904, 0]: no array holds"),
    ({"w": {"dtype": "BF16", "shape": [2**62, 0], "data_offsets": [0, 0]}}, b"", None,
     "'w' (BF16) has shape [4611686018427387904, 0]: no array holds"),
    ({"w": {**F32, "shape": [1] * 65, "data_offsets": [0, 4]}}, b"\0" * 4, None,
     "'w' has 65 dimensions, more than the 64 an array can have"),
])
def test_malformed_files_are_value_errors_naming_the_file(tmp_path, header, data, length,
                                                          message):
    path = tmp_path / "bad.safetensors"
    raw_file(path, header, data, length)
    with pytest.raises(ValueError, match="load_safetensors: .*bad.safetensors.* is not a valid "
                                         "safetensors file") as info:
        ndl.load_safetensors(path)
    assert message in str(info.value)


def test_metadata_null_is_none_and_empty_shapes_numpy_holds_load(tmp_path):
    # as the reference package: "__metadata__": null is no metadata
    path = tmp_path / "ok.safetensors"
    raw_file(path, {"__metadata__": None, "w": {**F32, "shape": [2**61 - 1, 0],
                                                 "data_offsets": [0, 0]}})
    assert ndl.load_safetensors(path)["w"].shape == (2**61 - 1, 0)
    raw_file(path, {"w": {**F32, "shape": [1] * 64, "data_offsets": [0, 4]}}, b"\0" * 4)
    assert ndl.load_safetensors(path)["w"].shape == (1,) * 64


def test_duplicate_names_are_refused(tmp_path):
    path = tmp_path / "dup.safetensors"
    text = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},' \
           b'"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * 8)
    with pytest.raises(ValueError, match="the key 'w' appears twice"):
        ndl.load_safetensors(path)


def test_short_files_are_value_errors(tmp_path):
    (tmp_path / "s.safetensors").write_bytes(b"\1\0\0")
    with pytest.raises(ValueError, match="shorter than the 8-byte header length"):
        ndl.load_safetensors(tmp_path / "s.safetensors")


def test_a_dtype_the_device_lacks_names_the_tensor(tmp_path):
    ndl.save_safetensors({"w": np.zeros(2, dtype="float64")}, tmp_path / "d.safetensors")
    mps = ndl.torch("mps")
    if mps.enabled():
        with pytest.raises(ValueError, match="holds a float64 tensor at 'w'"):
            ndl.load_safetensors(tmp_path / "d.safetensors", device=mps)
    with pytest.raises(TypeError, match="complex128, which safetensors cannot hold"):
        ndl.save_safetensors({"c": np.zeros(2, dtype="complex128")}, tmp_path / "c.st")


def test_save_replaces_atomically_and_a_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "w.safetensors"
    ndl.save_safetensors({"w": np.ones(3, dtype="float32")}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match="'bad' is a str"):
        ndl.save_safetensors({"w": np.zeros(3, dtype="float32"), "bad": "text"}, path)
    import needle.safetensors_format as fmt

    def broken(array, dtype):
        raise OSError("disk full")

    monkeypatch.setattr(fmt.np, "ascontiguousarray", broken)
    with pytest.raises(OSError, match="disk full"):  # fails mid-write
        ndl.save_safetensors({"w": np.zeros(3, dtype="float32")}, path)
    assert path.read_bytes() == before and tmp_files(tmp_path) == []


def test_bad_arguments_are_type_errors(tmp_path):
    with pytest.raises(TypeError, match="expected a Module or a dict of Tensors, got list"):
        ndl.save_safetensors([1], tmp_path / "x")
    with pytest.raises(TypeError, match="metadata must be a dict of str to str"):
        ndl.save_safetensors({}, tmp_path / "x", metadata={"a": 1})
    with pytest.raises(ValueError, match="tensor name '__metadata__' is not allowed"):
        ndl.save_safetensors({"__metadata__": np.zeros(1)}, tmp_path / "x")

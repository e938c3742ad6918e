"""ndl.save / ndl.load: pickle-free .npz, bit-exact, atomic, with clear errors."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def test_round_trip_is_exact_for_every_leaf_type(device, tmp_path):
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 4)).astype(np.float32)
    f32[0, 0] = np.nan
    f32[0, 1] = -0.0
    tensors = {
        "f32": f32, "f64": rng.standard_normal(5), "i64": np.arange(-3, 3),
        "i32": np.array([[1, -2]], dtype=np.int32), "u8": np.array([0, 255], dtype=np.uint8),
        "b": np.array([True, False]), "scalar": np.array(2.5),
    }
    obj = {
        "tensors": {k: ndl.Tensor(v, device=device, requires_grad=False)
                    for k, v in tensors.items()},
        "grad": ndl.Tensor(f32, device=device, requires_grad=True),
        "array": np.arange(6, dtype=np.int16).reshape(2, 3),
        "numbers": [1, 2.5, float("inf"), -0.0, True, None, "text"],
        "pair": (3, "x"),
        7: {"int keys": 1.0e-300},
    }
    path = tmp_path / "ck.npz"
    ndl.save(obj, path)
    out = ndl.load(path, device=device)
    assert set(out) == {"tensors", "grad", "array", "numbers", "pair", 7}
    for k, v in tensors.items():
        t = out["tensors"][k]
        assert isinstance(t, ndl.Tensor) and t.device == device and not t.requires_grad
        assert t.dtype == v.dtype and t.shape == v.shape
        assert bits(t.numpy()) == bits(v)
    assert out["grad"].requires_grad and bits(out["grad"].numpy()) == bits(f32)
    assert out["array"].dtype == np.int16 and bits(out["array"]) == bits(obj["array"])
    assert out["numbers"][:2] == [1, 2.5] and out["numbers"][2] == float("inf")
    assert str(out["numbers"][3]) == "-0.0" and out["numbers"][4:] == [True, None, "text"]
    assert type(out["numbers"][0]) is int and type(out["numbers"][4]) is bool
    assert out["pair"] == (3, "x") and out[7] == {"int keys": 1.0e-300}


def test_file_is_a_plain_npz_with_flat_keys_and_a_manifest(tmp_path):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    path = tmp_path / "model.npz"
    ndl.save({"model": model.state_dict()}, path)
    with np.load(path, allow_pickle=False) as npz:
        assert "model/modules.0.weight" in npz.files and "model/modules.2.bias" in npz.files
        np.testing.assert_array_equal(npz["model/modules.0.weight"], model.modules[0].weight
                                      .numpy())
        manifest = json.loads(npz["__manifest__"].tobytes())
    assert manifest["format"] == "needle-checkpoint"
    assert sorted(os.listdir(tmp_path)) == ["model.npz"]  # no temporary file left behind


def test_save_replaces_atomically_and_a_failed_save_keeps_the_old_file(tmp_path):
    path = tmp_path / "ck.npz"
    ndl.save({"a": 1}, path)
    ndl.save({"a": 2}, str(path))
    assert ndl.load(path) == {"a": 2}
    with pytest.raises(TypeError, match=r"cannot save set at 'b'"):
        ndl.save({"b": {1, 2}}, path)
    assert ndl.load(path) == {"a": 2}
    assert sorted(os.listdir(tmp_path)) == ["ck.npz"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip", "npy", "no_manifest"])
def test_corrupt_files_raise_value_error_naming_the_file(damage, tmp_path):
    path = tmp_path / "ck.npz"
    ndl.save({"w": np.arange(1000.0)}, path)
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a checkpoint at all" * 10)
    elif damage == "flip":  # a byte inside the array data: the zip CRC catches it
        data = bytearray(raw)
        data[len(raw) // 3] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "npy":
        with open(path, "wb") as f:
            np.save(f, np.arange(3))
    else:
        np.savez(path, w=np.arange(3))
    with pytest.raises(ValueError, match="ck.npz"):
        ndl.load(path)


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        ndl.load(tmp_path / "nope.npz")


def make(device, seed):
    np.random.seed(seed)
    model = nn.Sequential(nn.Linear(4, 8, device=device), nn.BatchNorm1d(8, device=device),
                          nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 3, device=device))
    return model, optim.Adam(model.parameters(), lr=0.01, weight_decay=0.001)


def train_step(model, opt, x, y, seed):
    np.random.seed(seed)  # dropout's draws
    opt.reset_grad()
    loss = nn.SoftmaxLoss()(model(x), y)
    loss.backward()
    opt.step()


def test_model_and_optimizer_resume_bit_for_bit(device, tmp_path):
    rng = np.random.default_rng(0)
    x = ndl.Tensor(rng.standard_normal((16, 4)), device=device, dtype="float32")
    y = ndl.Tensor(rng.integers(0, 3, 16), device=device, requires_grad=False)
    model, opt = make(device, seed=1)
    for step in range(3):
        train_step(model, opt, x, y, seed=step)
    path = tmp_path / "run.npz"
    ndl.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, path)

    model2, opt2 = make(device, seed=2)
    ck = ndl.load(path, device=device)
    model2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["optimizer"])
    assert ck["epoch"] == 3
    model.eval()
    model2.eval()
    assert bits(model2(x).numpy()) == bits(model(x).numpy())
    model.train()
    model2.train()
    train_step(model, opt, x, y, seed=3)
    train_step(model2, opt2, x, y, seed=3)
    for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
        assert bits(a.numpy()) == bits(b.numpy())

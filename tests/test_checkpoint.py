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



def test_parameters_load_as_parameters(device, tmp_path):
    """As torch.load: a saved Parameter comes back a Parameter (requires_grad kept), a plain
    Tensor a plain Tensor; files without the mark (every older one) load plain Tensors."""
    np.random.seed(0)
    layer = nn.Linear(3, 2, device=device)
    frozen = nn.Parameter(np.ones(2), device=device, requires_grad=False)
    plain = ndl.Tensor(np.ones(2), device=device)
    path = tmp_path / "params.npz"
    ndl.save({"params": layer.parameters(), "frozen": frozen, "plain": plain}, path)
    out = ndl.load(path, device=device)
    for got, saved in zip(out["params"], layer.parameters()):
        assert type(got) is nn.Parameter and got.requires_grad and got.device == device
        assert bits(got.numpy()) == bits(saved.numpy())
    assert type(out["frozen"]) is nn.Parameter and not out["frozen"].requires_grad
    assert type(out["plain"]) is ndl.Tensor and out["plain"].requires_grad
    with np.load(path, allow_pickle=False) as npz:
        tree = json.loads(npz["__manifest__"].tobytes())["tree"]
    nodes = dict(tree["items"])
    assert nodes["plain"] == {"type": "tensor", "key": "plain", "requires_grad": True}
    assert nodes["frozen"]["parameter"] is True
    del nodes["frozen"]["parameter"]  # as a file written before Parameters were marked
    old = tmp_path / "old.npz"
    manifest = json.dumps({"format": "needle-checkpoint", "version": 1, "tree": nodes["frozen"]})
    np.savez(old, __manifest__=np.frombuffer(manifest.encode(), np.uint8),
             frozen=np.ones(2))
    assert type(ndl.load(old, device=device)) is ndl.Tensor


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


# keys a zip member name cannot hold as it is: NUL (zip readers cut the name there), a lone
# surrogate (no UTF-8), more than 64 KiB of UTF-8 (the name's 16-bit length field), a path
# made long by nesting; keys live in the manifest, so each must still come back exactly
AWKWARD_KEYS = {
    "nul": {"a\0x": 1.0, "a\0y": 2.0, "a": 3.0, "\0": 4.0},
    "long": {"k" * 70000: 1.0, "k" * 65531: 2.0},
    "long-utf8": {"\u00e9" * 40000: 1.0},
    "surrogate": {"\ud800": 1.0, "a\udfffb": 2.0, "?": 3.0},
    "long-path": {"p" * 30000: {"q" * 30000: {"r" * 30000: 1.0}}},
    "slashes": {"/lead": 1.0, "a/b": 2.0, "a": {"b": 3.0}, "x\\y": 4.0},
}


@pytest.mark.parametrize("case", AWKWARD_KEYS)
def test_every_str_key_round_trips_whatever_a_zip_name_holds(case, device, tmp_path):
    # before: NUL keys saved a file that never loaded, long ones raised struct.error and a
    # lone surrogate a bare UnicodeEncodeError
    counter = iter(range(1, 100))

    def build(spec):
        out = {}
        for key, value in spec.items():
            if isinstance(value, dict):
                out[key] = build(value)
            else:
                out[key] = ndl.Tensor(np.full(3, value * next(counter), dtype=np.float32),
                                      device=device, requires_grad=False)
        return out

    def flat(tree, prefix=()):
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from flat(value, prefix + (key,))
            else:
                yield prefix + (key,), value.numpy()

    obj = build(AWKWARD_KEYS[case])
    path = tmp_path / "keys.npz"
    ndl.save(obj, path)
    back = ndl.load(path, device=device)
    want, got = dict(flat(obj)), dict(flat(back))
    assert list(got) == list(want)
    for key in want:
        assert bits(got[key]) == bits(want[key]), key
    with np.load(path, allow_pickle=False) as npz:  # still a plain .npz
        assert len(npz.files) == len(want) + 1
        for name in npz.files:
            npz[name]


def test_awkward_keys_get_readable_member_names_and_the_archive_refuses_bad_ones(tmp_path):
    from needle.archive import write_archive

    path = tmp_path / "keys.npz"
    ndl.save({"a\0x": np.ones(1), "a": np.zeros(1), "k" * 70000: np.ones(2)}, path)
    with np.load(path, allow_pickle=False) as npz:
        assert sorted(npz.files) == ["__manifest__", "a", "a?x", "k" * 100 + "..."]
    for bad in ["a\0x", "\ud800", "k" * 70000]:  # written directly: refused, nothing written
        with pytest.raises(ValueError, match="cannot be a zip member name"):
            write_archive(tmp_path / "bad.npz", {bad: np.ones(1)}, b"{}")
    assert sorted(os.listdir(tmp_path)) == ["keys.npz"]


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
    ndl.manual_seed(seed)  # dropout's draws, on every device
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


# ----- limits, versions, devices -----------------------------------------------------------
def write_manifest(path, manifest) -> None:
    """An archive as needle lays it out, with a hand-made manifest (a dict or JSON text)."""
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    np.savez(path, __manifest__=np.frombuffer(text.encode("utf-8"), dtype=np.uint8))


@pytest.mark.parametrize("depth", [101, 400, 5000], ids=["over", "far-over", "json-limit"])
def test_manifest_nested_deeper_than_needle_writes_is_a_value_error(depth, tmp_path):
    path = tmp_path / "deep.npz"
    tree = '{"type": "list", "items": [' * depth + '{"type": "none"}' + "]}" * depth
    write_manifest(path, f'{{"format": "needle-checkpoint", "version": 1, "tree": {tree}}}')
    with pytest.raises(ValueError, match=r"deep.npz.*nests deeper than 100 levels"):
        ndl.load(path)


def test_the_deepest_structure_save_writes_loads_back(tmp_path):
    deepest = None
    for _ in range(100):
        deepest = [deepest]
    ndl.save(deepest, tmp_path / "ok.npz")
    assert ndl.load(tmp_path / "ok.npz") == deepest
    with pytest.raises(ValueError, match=r"save: containers nest deeper than 100 levels at "
                                         r"'0/0/0/.*\.\.\.'"):
        ndl.save([deepest], tmp_path / "deep.npz")
    assert sorted(os.listdir(tmp_path)) == ["ok.npz"]


def test_self_referencing_structures_cannot_be_saved(tmp_path):
    loop = {"a": [1, 2]}
    loop["a"].append(loop)
    with pytest.raises(ValueError, match=r"save: the dict at 'a/2' contains itself \(it is "
                                         r"also at 'the top level'\)"):
        ndl.save(loop, tmp_path / "loop.npz")
    shared = [1]
    ndl.save({"x": shared, "y": shared}, tmp_path / "shared.npz")  # repeated, not a cycle
    assert ndl.load(tmp_path / "shared.npz") == {"x": [1], "y": [1]}


def test_newer_format_version_names_both_versions(tmp_path):
    path = tmp_path / "future.npz"
    write_manifest(path, {"format": "needle-checkpoint", "version": 2, "tree": {"type": "none"}})
    with pytest.raises(ValueError, match=r"future.npz' is needle-checkpoint version 2, newer "
                                         r"than this needle reads \(version 1\)"):
        ndl.load(path)


@pytest.mark.parametrize("version", [0, "1", None, True])
def test_malformed_format_version_is_a_corrupt_manifest(version, tmp_path):
    path = tmp_path / "odd.npz"
    write_manifest(path, {"format": "needle-checkpoint", "version": version,
                          "tree": {"type": "none"}})
    with pytest.raises(ValueError, match=r"odd.npz' has a corrupt manifest .*version"):
        ndl.load(path)


def test_a_dtype_the_device_lacks_says_so(tmp_path):
    pytest.importorskip("array_api_strict")
    path = tmp_path / "half.npz"
    ndl.save({"w": ndl.Tensor(np.ones(3, dtype=np.float16), device=ndl.cpu())}, path)
    assert ndl.load(path)["w"].dtype == "float16"  # fine on cpu
    with pytest.raises(ValueError, match=r"half.npz' holds a float16 tensor at 'w', a dtype "
                                         r"strict\(\) does not support"):
        ndl.load(path, device=ndl.strict())


# ----- files: permissions and stale temporaries ---------------------------------------------
@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_checkpoints_get_the_permissions_the_umask_gives(umask, tmp_path):
    old = os.umask(umask)
    try:
        ndl.save({"a": 1}, tmp_path / "ck.npz")
        with open(tmp_path / "plain", "w"):
            pass
    finally:
        os.umask(old)
    mode = os.stat(tmp_path / "ck.npz").st_mode & 0o777
    assert mode == 0o666 & ~umask == os.stat(tmp_path / "plain").st_mode & 0o777


def test_stale_temporaries_of_the_same_target_are_removed(tmp_path):
    stale = [".ck.npz.a1b2c3d_.tmp", ".ck.npz.zzzzzzzz.tmp"]
    kept = [".ck.npz.bak.a1b2c3d4.tmp",  # a temporary of the target "ck.npz.bak"
            ".ck.npz.short.tmp", ".ck.npz.a1b2c3d4.tmp.keep", "ck.npz.a1b2c3d4.tmp",
            ".other.npz.a1b2c3d4.tmp", ".ck.npz.ABCDEFGH.tmp"]
    for name in stale + kept:
        (tmp_path / name).write_bytes(b"partial")
    ndl.save({"a": 1}, tmp_path / "ck.npz")
    assert sorted(os.listdir(tmp_path)) == sorted(kept + ["ck.npz"])
    (tmp_path / stale[0]).write_bytes(b"partial")
    with pytest.raises(TypeError):  # a failed save removes nothing
        ndl.save({"a": {1}}, tmp_path / "ck.npz")
    assert stale[0] in os.listdir(tmp_path)


@pytest.mark.skipif(os.name != "posix", reason="advisory file locks")
def test_a_temporary_that_a_live_save_holds_is_left_alone(tmp_path):
    import fcntl

    busy = tmp_path / ".ck.npz.inflight.tmp"
    with open(busy, "wb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # what a save in another process holds
        ndl.save({"a": 1}, tmp_path / "ck.npz")
        assert busy.exists()
    ndl.save({"a": 2}, tmp_path / "ck.npz")  # released: now it is stale
    assert sorted(os.listdir(tmp_path)) == ["ck.npz"]


def test_save_into_a_missing_folder_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"save: the folder '.*nope' for 'ck.npz' "
                                                r"does not exist"):
        ndl.save({"a": 1}, tmp_path / "nope" / "ck.npz")


# ----- archives needle does not write: compressed, oversized, not zip at all ----------------
def zip_members(path, members: dict[str, bytes], compression=None) -> None:
    """A zip of raw member bytes (name -> bytes), written by zipfile, not by needle."""
    import zipfile

    with zipfile.ZipFile(path, "w", compression=compression or zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def npy_bytes(array: np.ndarray) -> bytes:
    import io

    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


MANIFEST_NONE = json.dumps({"format": "needle-checkpoint", "version": 1,
                            "tree": {"type": "ndarray", "key": "w"}}).encode()


def test_compressed_members_are_refused_before_inflating_them(tmp_path):
    import zipfile

    # 64 MB of zeros deflate to 64 kB: needle writes stored members only, so it never inflates
    header = npy_bytes(np.zeros(0, np.uint8))
    bomb = header.replace(b"(0,)", b"(%d,)" % (64 << 20)) + bytes(64 << 20)
    path = tmp_path / "bomb.npz"
    zip_members(path, {"__manifest__.npy": npy_bytes(np.frombuffer(MANIFEST_NONE, np.uint8)),
                       "w.npy": bomb}, compression=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(ValueError, match=r"bomb.npz' has a compressed member "
                                         r"'__manifest__.npy' \(deflate\): needle writes stored"):
        ndl.load(path)
    # np.savez_compressed: the same refusal
    np.savez_compressed(tmp_path / "z.npz", w=np.arange(3))
    with pytest.raises(ValueError, match=r"z.npz' has a compressed member 'w.npy'"):
        ndl.load(tmp_path / "z.npz")


def test_a_member_whose_header_outgrows_its_declared_size_is_refused(tmp_path):
    path = tmp_path / "big.npz"
    header = npy_bytes(np.zeros(0, np.float64)).replace(b"(0,)", b"(10000000000000,)")
    zip_members(path, {"__manifest__.npy": npy_bytes(np.frombuffer(MANIFEST_NONE, np.uint8)),
                       "w.npy": header + bytes(16)})
    with pytest.raises(ValueError, match=r"big.npz' is corrupt: its member 'w.npy' holds a "
                                         r"float64 array of shape \(10000000000000,\)"):
        ndl.load(path)


def test_members_declaring_more_bytes_than_the_file_holds_are_refused(tmp_path):
    path = tmp_path / "lie.npz"
    zip_members(path, {"__manifest__.npy": npy_bytes(np.frombuffer(MANIFEST_NONE, np.uint8)),
                       "w.npy": npy_bytes(np.arange(4.0))})
    raw = bytearray(path.read_bytes())
    entry = raw.rindex(b"PK\x01\x02")  # the central directory entry of w.npy
    raw[entry + 20:entry + 28] = (2**31).to_bytes(4, "little") * 2  # its two sizes
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"lie.npz' is corrupt: its members declare \d+ bytes "
                                         r"by 'w.npy' .*more than the file's \d+"):
        ndl.load(path)


@pytest.mark.parametrize("content, what", [
    (b"epoch,train_loss,test_loss\n1,0.5,0.6\n", "text starting with 'epoch,train_loss,tes'"),
    (b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00N.", "a Python pickle"),
    (b"", "empty"),
    ("npy", r"a single numpy array \(.npy\)"),
])
def test_a_file_that_is_no_archive_says_what_it_is(content, what, tmp_path):
    path = tmp_path / "run.npz"
    if content == "npy":
        np.save(open(path, "wb"), np.arange(3))
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=rf"load: '.*run.npz' is not a needle checkpoint: it is "
                                         rf"{what}, not a zip \(.npz\) archive") as err:
        ndl.load(path)
    assert "pickled" not in str(err.value) and "pickle.load" not in str(err.value)


@pytest.mark.parametrize("node, message", [
    ({"type": "tensor", "key": "w", "requires_grad": "yes"},
     r"'requires_grad' of the tensor at 'the top level' must be a bool, found 'yes'"),
    ({"type": "tensor", "key": "w", "requires_grad": True, "parameter": 1},
     r"'parameter' of the tensor at 'the top level' must be a bool, found 1"),
    ({"type": "ndarray", "key": 0}, r"'key' of the ndarray at 'the top level' must be a str"),
    ({"type": "dict", "items": [["a", {"type": "int", "value": "3"}]]},
     r"'value' of the int at 'a' must be an int, found '3'"),
    ({"type": "list", "items": [{"type": "bool", "value": 1}]},
     r"'value' of the bool at '0' must be a bool, found 1"),
    ({"type": "dict", "items": {"a": 1}}, r"'items' of the dict at 'the top level' must be a "
                                          r"list"),
    ({"type": "dict", "items": [["a"]]}, r"the dict at 'the top level' holds \['a'\], not a "
                                         r"\[str or int key, node\] pair"),
    ({"type": "numpy_scalar", "key": "w"}, r"the numpy scalar at 'the top level' is an array "
                                           r"of shape \(3,\)"),
])
def test_manifest_fields_of_the_wrong_type_are_refused(node, message, tmp_path):
    path = tmp_path / "odd.npz"
    manifest = json.dumps({"format": "needle-checkpoint", "version": 1, "tree": node})
    np.savez(path, __manifest__=np.frombuffer(manifest.encode(), np.uint8), w=np.ones(3))
    with pytest.raises(ValueError, match=r"odd.npz' has a corrupt manifest: " + message):
        ndl.load(path)


def test_save_onto_a_folder_names_the_folder(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as err:
        ndl.save({"a": 1}, folder)
    assert err.value.filename == str(folder) and ".tmp" not in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["runs"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks")
def test_save_onto_a_symlink_writes_through_it(tmp_path):
    (tmp_path / "real").mkdir()
    target, link = tmp_path / "real" / "ck.npz", tmp_path / "ck.npz"
    link.symlink_to(target)  # dangling: the first save creates the target, as open() would
    ndl.save({"a": 1}, link)
    ndl.save({"a": 2}, link)
    assert link.is_symlink() and ndl.load(target) == {"a": 2} == ndl.load(link)
    assert sorted(os.listdir(tmp_path / "real")) == ["ck.npz"]  # the temporary went there
    assert sorted(os.listdir(tmp_path)) == ["ck.npz", "real"]


def test_subclasses_of_tuples_lists_and_scalars_load_as_their_base(tmp_path):
    """A torch.Size, namedtuple or IntEnum was saved under its own type name, which load
    refused as an unknown node type: each is saved as its base kind (bool stays bool)."""
    import collections
    import enum

    Pair = collections.namedtuple("Pair", "a b")

    class Color(enum.IntEnum):
        RED = 3

    class Ratio(float):
        pass

    class Name(str):
        def __str__(self):
            return "not the value"

    class Items(list):
        pass

    obj = {"pair": Pair(1, 2), "color": Color.RED, "ratio": Ratio(0.5), "name": Name("ab"),
           "items": Items([1, (2,)]), "flag": True}
    want = {"pair": (1, 2), "color": 3, "ratio": 0.5, "name": "ab", "items": [1, (2,)],
            "flag": True}
    try:
        import torch
    except ImportError:  # (the rest still runs)
        pass
    else:
        obj["shape"], want["shape"] = torch.zeros(2, 3).shape, (2, 3)
    ndl.save(obj, tmp_path / "sub.npz")
    out = ndl.load(tmp_path / "sub.npz")
    assert out == want
    assert {k: type(v) for k, v in out.items()} == {k: type(v) for k, v in want.items()}


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("make", [lambda: np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0]),
                                  lambda: np.matrix([[1.0, 2.0]])], ids=["masked", "matrix"])
def test_numpy_array_subclasses_are_refused_not_stripped(make, tmp_path):
    """A masked array was saved as a plain one (the masked value as data) and a matrix lost
    its type, in ndl.save and ndl.save_safetensors: a TypeError names the type and the fix."""
    array = make()
    name = type(array).__name__
    with pytest.raises(TypeError, match=rf"save: 'm' is a numpy {name}.*np.asarray"):
        ndl.save({"m": array}, tmp_path / "sub.npz")
    with pytest.raises(TypeError, match=rf"save_safetensors: 'm' is a numpy {name}"):
        ndl.save_safetensors({"m": array}, tmp_path / "sub.safetensors")
    assert os.listdir(tmp_path) == []
    ndl.save({"m": np.asarray(array)}, tmp_path / "plain.npz")  # the suggested fix works
    memmap = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", shape=(3,))
    ndl.save({"m": memmap}, tmp_path / "mm.npz")  # (a memmap holds nothing more: kept)
    np.testing.assert_array_equal(ndl.load(tmp_path / "mm.npz")["m"], np.zeros(3))


def test_a_big_endian_member_loads_as_a_native_tensor(device, tmp_path):
    """A tensor member stored as '>f4' (another writer's file) loaded as a '>f4' cpu Tensor
    and failed on the other devices: it loads native; a plain array node keeps its order."""
    path = tmp_path / "be.npz"
    tree = {"type": "dict", "items": [
        ["w", {"type": "tensor", "key": "w", "requires_grad": False}],
        ["a", {"type": "ndarray", "key": "a"}]]}
    manifest = json.dumps({"format": "needle-checkpoint", "version": 1, "tree": tree})
    big = np.array([[1.5, -2.0]], dtype=">f4")
    np.savez(path, __manifest__=np.frombuffer(manifest.encode(), np.uint8), w=big, a=big)
    out = ndl.load(path, device=device)
    assert out["w"].dtype == "float32" and out["w"].numpy().dtype.isnative
    np.testing.assert_array_equal((out["w"] * 2).numpy(), [[3.0, -4.0]])
    assert out["a"].dtype == np.dtype(">f4") and bits(out["a"]) == bits(big)

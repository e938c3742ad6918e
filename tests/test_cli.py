"""needle-train: runs, checkpoints and resuming, usage errors, Ctrl-C, nan losses, help text.

Most runs use a tiny MNIST folder (120 training, 60 test images) and an 8-wide model, so a run
takes milliseconds; the one run on the built-in data is marked `slow`.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import needle as ndl
from needle.apps import curves, mlp_resnet, simple_ml, train, train_config
from needle.data import MNIST_FILES, builtin_mnist_dir

N_TRAIN, N_TEST, BATCH = 120, 60, 40  # three training batches per epoch
LANGUAGE_MODELS = ("rnn", "lstm", "transformer")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A data folder: the first images of the built-in files, uncompressed (plain names)."""
    folder = tmp_path_factory.mktemp("tiny-mnist")
    counts = [N_TRAIN, N_TRAIN, N_TEST, N_TEST]
    for name, n in zip(MNIST_FILES, counts):
        data = gzip.decompress((builtin_mnist_dir() / name).read_bytes())
        magic = struct.unpack(">I", data[:4])[0]
        if magic == 0x803:
            out = struct.pack(">IIII", magic, n, 28, 28) + data[16:16 + n * 784]
        else:
            out = struct.pack(">II", magic, n) + data[8:8 + n]
        (folder / name.removesuffix(".gz")).write_bytes(out)
    return folder


@pytest.fixture
def fast(tiny) -> list[str]:
    """Command-line options for a run of milliseconds."""
    return ["--data-dir", str(tiny), "--hidden-dim", "8", "--batch-size", str(BATCH), "--quiet"]


def usage_error(argv: list[str], capsys) -> str:
    """stderr of a run that must stop with a usage error (exit 2) before training."""
    with pytest.raises(SystemExit) as exit_info:
        train.main(argv)
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert "epoch" not in out and "Traceback" not in err
    return err


# numpy's legacy random state after seed(0), as needle-train stores it
RNG_STATE = {"keys": np.random.RandomState(0).get_state()[1], "pos": 624, "has_gauss": 0,
             "cached_gaussian": 0.0}


def fake_checkpoint(path: Path, epoch: int = 1, **config) -> Path:
    """A checkpoint with the layout needle-train writes, but no trained model (written fast)."""
    cfg = {**train.SETTINGS, **train.PLACES, **config}
    ndl.save({"model": {}, "optimizer": {}, "rng": RNG_STATE, "config": cfg, "epoch": epoch,
              "seconds": 1.0}, path)
    return path


def assert_same_state(a: dict, b: dict) -> None:
    for key, value in a["model"].items():
        np.testing.assert_array_equal(value.numpy(), b["model"][key].numpy(), err_msg=key)
    assert a["optimizer"]["t"] == b["optimizer"]["t"]
    for i, state in a["optimizer"]["state"].items():
        for name, value in state.items():
            np.testing.assert_array_equal(value.numpy(),
                                          b["optimizer"]["state"][i][name].numpy())


# ----- runs -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_trains_on_the_builtin_data(capsys):
    assert train.main(["--epochs", "1", "--hidden-dim", "16", "--batch-size", "250"]) == 0
    out = capsys.readouterr().out
    assert "5000 training / 10000 test images" in out
    assert out.splitlines()[-1].startswith("final: test accuracy")


def test_summary_says_1_epoch(fast, capsys):
    assert train.main(["--epochs", "1", *fast]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("final: test accuracy") and ", 1 epoch, " in line


def cli_name(device) -> str:
    """needle-train's --device name of a test device: torch:cpu for torch(), else the kind."""
    if device.kind == "torch":
        return f"torch:{device.index.partition(':')[0]}"
    return device.kind


def test_resume_alone_continues_bit_for_bit_with_the_stored_settings(device, fast, tmp_path,
                                                                     capsys):
    # settings far from the defaults: `--resume FILE` alone must pick them up from FILE
    settings = ["--epochs", "3", "--optimizer", "sgd", "--momentum", "0.5", "--lr", "0.05",
                "--weight-decay", "0.0001", "--schedule", "constant", "--augment", "1",
                "--seed", "3", "--device", cli_name(device), *fast]
    whole, part, other = tmp_path / "whole.npz", tmp_path / "part.npz", tmp_path / "other.npz"
    assert train.main([*settings, "--checkpoint", str(whole)]) == 0
    assert train.main([*settings, "--stop-after", "1", "--checkpoint", str(part)]) == 0
    assert f"continue with --resume {part}" in capsys.readouterr().out
    # no --checkpoint: the resumed run writes back to the file it resumed from
    assert train.main(["--resume", str(part), "--stop-after", "1", "--quiet"]) == 0
    assert ndl.load(part)["epoch"] == 2
    # --checkpoint given: written there, the resumed file is left alone
    assert train.main(["--resume", str(part), "--checkpoint", str(other), "--quiet"]) == 0
    assert ndl.load(part)["epoch"] == 2
    a, b = ndl.load(whole), ndl.load(other)
    assert a["epoch"] == b["epoch"] == 3 and a["config"] == b["config"]
    assert b["config"]["optimizer"] == "sgd" and b["config"]["momentum"] == 0.5
    assert b["config"]["device"] == cli_name(device)
    assert_same_state(a, b)


def test_one_epoch_matches_the_cpus(device, fast, tmp_path, capsys, monkeypatch):
    """Same seed, same recipe: the weights after one epoch agree with cpu's (float32 rounding
    apart), and so does the printed test loss to its 4 decimals. The tiny recipe (3 steps,
    width 8) only: on the default one (50 Adam steps, width 256) float32 rounding differences
    between libraries grow through training to ~1e-3 in loss (see README)."""
    if device.kind == "cpu":
        pytest.skip("cpu is the reference")
    # Dropout masks come from each device's own generator; here the device draws numpy's,
    # as cpu does, so that only the arithmetic differs (eager steps: a compiled step records
    # the class's draw, not an instance's patched one)
    monkeypatch.setattr(device, "random",
                        lambda shape: device.asarray(np.random.rand(*shape), dtype="float32"))
    losses, states = [], []
    for name in ("cpu", cli_name(device)):
        ck = tmp_path / f"{name.replace(':', '-')}.npz"
        assert train.main(["--epochs", "1", "--seed", "5", "--device", name, "--checkpoint",
                           str(ck), "--no-compile", *fast]) == 0
        line = capsys.readouterr().out.strip().splitlines()[-1]
        losses.append(float(line.split("(loss ")[1].split(")")[0]))
        states.append(ndl.load(ck)["model"])
    assert abs(losses[0] - losses[1]) <= 1.0001e-4, losses
    for key, value in states[0].items():
        np.testing.assert_allclose(states[1][key].numpy(), value.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=key)


def test_summary_after_resume_counts_the_whole_run(fast, tmp_path, capsys):
    ck = tmp_path / "ck.npz"
    assert train.main(["--epochs", "2", "--stop-after", "1", "--checkpoint", str(ck),
                       *fast]) == 0
    state = ndl.load(ck)
    assert 0 < state["seconds"] < 1000
    state["seconds"] = 1000.0  # as if the first epoch had taken 1000 s
    ndl.save(state, ck)
    capsys.readouterr()
    assert train.main(["--resume", str(ck), "--quiet"]) == 0
    line = capsys.readouterr().out.strip()
    assert ", 2 epochs, 100" in line and " s training on cpu" in line, line
    assert 1000 < ndl.load(ck)["seconds"] < 2000


def test_epochs_extends_a_finished_run(fast, tmp_path, capsys):
    ck = tmp_path / "ck.npz"
    assert train.main(["--epochs", "1", "--checkpoint", str(ck), *fast]) == 0
    capsys.readouterr()
    assert train.main(["--resume", str(ck), "--quiet"]) == 0
    assert "nothing to do" in capsys.readouterr().out
    if curves.matplotlib_available():  # --plot with nothing to train said nothing, drew nothing
        plot = tmp_path / "p.png"
        assert train.main(["--resume", str(ck), "--quiet", "--plot", str(plot)]) == 0
        assert f"no epochs to draw to {plot}" in capsys.readouterr().out and not plot.exists()
    assert train.main(["--resume", str(ck), "--epochs", "2", "--quiet"]) == 0
    assert ", 2 epochs, " in capsys.readouterr().out
    state = ndl.load(ck)
    assert state["epoch"] == 2 and state["config"]["epochs"] == 2
    # the cosine schedule now spans 2 epochs: epoch 2 ran at half the peak rate
    assert state["optimizer"]["hyperparameters"]["lr"] == pytest.approx(0.001 * 0.5)


def test_device_may_differ_on_resume(device, fast, tmp_path):
    ck = tmp_path / "ck.npz"
    assert train.main(["--epochs", "2", "--stop-after", "1", "--checkpoint", str(ck),
                       "--device", "cpu", *fast]) == 0
    state = ndl.load(ck)
    # trained on another device (on a GPU machine, cuda resumes what the cpu trained)
    state["config"]["device"] = "cuda" if device.kind != "cuda" else "cpu"
    ndl.save(state, ck)
    assert train.main(["--resume", str(ck), "--device", cli_name(device), "--quiet"]) == 0
    state = ndl.load(ck)
    assert state["epoch"] == 2 and state["config"]["device"] == cli_name(device)


def test_a_checkpoint_with_a_device_generator_resumes_on_another_device(device, fast, tmp_path):
    """A run on a device with a generator of its own (torch, jax, cuda) continues on the cpu
    (the cpu's on strict): numpy's state is restored, the device generator's is left behind
    (it fits its own kind alone; it failed as "does not fit this model", or a traceback)."""
    ck = tmp_path / "ck.npz"
    assert train.main(["--epochs", "2", "--stop-after", "1", "--checkpoint", str(ck),
                       "--device", cli_name(device), *fast]) == 0
    assert ("device" in ndl.load(ck)["rng"]) == (device.kind not in ("cpu", "strict"))
    other = "strict" if device.kind == "cpu" else "cpu"
    assert train.main(["--resume", str(ck), "--device", other, "--quiet"]) == 0
    assert ndl.load(ck)["epoch"] == 2


# ----- usage errors: exit 2 before training ---------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--device", "tpu"], "invalid choice: 'tpu'"),
    (["--data-dir", "{tmp}"], "MNIST files missing in {tmp}"),
    (["--epochs", "0"], "--epochs must be at least 1"),
    (["--stop-after", "0"], "--stop-after must be at least 1"),
    (["--lr", "-1"], "--lr must be positive"),
    (["--lr", "inf"], "--lr must be a finite number, got inf"),
    (["--lr", "nan"], "--lr must be a finite number, got nan"),
    (["--weight-decay", "nan"], "--weight-decay must be a finite number"),
    (["--momentum=-inf", "--optimizer", "sgd"], "--momentum must be a finite number"),
    (["--momentum", "1", "--optimizer", "sgd"], "--momentum must lie in [0, 1), got 1.0"),
    (["--momentum", "0.9"], "--momentum applies to --optimizer sgd only, not adam"),
    (["--seed", "-1"], "--seed must lie in [0, 2**32), got -1"),
    (["--resume", "{tmp}/none.npz"], "cannot read the checkpoint {tmp}/none.npz"),
    (["--stop-after", "1"], "--stop-after needs --checkpoint FILE"),
    (["--checkpoint", "{tmp}/nowhere/ck.npz"],
     "--checkpoint {tmp}/nowhere/ck.npz: cannot save there: {tmp}/nowhere does not exist"),
    (["--checkpoint", "{tmp}/file/ck.npz"],
     "--checkpoint {tmp}/file/ck.npz: cannot save there: {tmp}/file is not a folder"),
    (["--checkpoint", "{tmp}"], "--checkpoint {tmp}: is a folder; name a file"),
    (["--verbose"], "--verbose applies to --distributed runs"),
])
def test_bad_arguments_are_usage_errors(argv, message, tmp_path, fast, capsys):
    (tmp_path / "file").write_text("a regular file")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    # the data folder comes last, so that `--data-dir {tmp}` wins over the tiny one
    err = usage_error([*fast, *argv], capsys)
    assert "usage: needle-train" in err and message.replace("{tmp}", str(tmp_path)) in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_checkpoint_in_a_read_only_folder_is_a_usage_error(tmp_path, fast, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        err = usage_error([*fast, "--checkpoint", str(folder / "ck.npz")], capsys)
    finally:
        folder.chmod(0o700)
    assert f"cannot write in the folder {folder}" in err


def test_cuda_without_a_gpu_is_a_usage_error(fast, capsys):
    if ndl.cuda().enabled():
        pytest.skip("a GPU is present")
    assert "pip install needle[cuda12]" in usage_error(["--device", "cuda", *fast], capsys)


def test_resume_with_other_settings_lists_every_clash(tmp_path, capsys):
    ck = fake_checkpoint(tmp_path / "ck.npz", hidden_dim=16, lr=0.01)
    err = usage_error(["--resume", str(ck), "--hidden-dim", "32", "--lr", "0.5", "--seed", "0",
                       "--epochs", "30"], capsys)
    assert f"{ck} was trained with --lr 0.01 (this run asks for 0.5), --hidden-dim 16 " \
           "(this run asks for 32)" in err
    line = err.splitlines()[-1]
    assert "--seed" not in line and "--epochs" not in line  # equal, and free to change


def test_resume_with_fewer_epochs_than_done_is_a_usage_error(tmp_path, capsys):
    ck = fake_checkpoint(tmp_path / "ck.npz", epoch=3, epochs=5)
    assert f"--epochs 2: {ck} already has 3 epochs" in usage_error(
        ["--resume", str(ck), "--epochs", "2"], capsys)


def test_resume_on_an_unavailable_stored_device_suggests_another(tmp_path, capsys):
    if ndl.cuda().enabled():
        pytest.skip("a GPU is present")
    ck = fake_checkpoint(tmp_path / "ck.npz", device="cuda")
    err = usage_error(["--resume", str(ck)], capsys)
    assert "--device cuda: cuda() is unavailable" in err and "pass --device cpu" in err


@pytest.mark.parametrize("state, message", [
    ({"model": {}}, "missing or malformed: optimizer, rng, config, epoch, seconds"),
    ([1, 2], "is not a needle-train checkpoint"),
    ("config", "missing or malformed: config['hidden_dim']"),
    ("model", "does not fit this model: load_state_dict for Sequential: missing keys"),
])
def test_resume_from_a_foreign_checkpoint_is_a_usage_error(state, message, tmp_path, fast,
                                                          capsys):
    ck = tmp_path / "ck.npz"
    if state == "config":
        fake_checkpoint(ck)
        bad = ndl.load(ck)
        del bad["config"]["hidden_dim"]
        ndl.save(bad, ck)
    elif state == "model":
        fake_checkpoint(ck, hidden_dim=8, batch_size=BATCH, data_dir=str(fast[1]))
    else:
        ndl.save(state, ck)
    err = usage_error(["--resume", str(ck)], capsys)
    assert message in err and str(ck) in err


@pytest.mark.parametrize("damage, message", [
    ("truncate", "truncated MNIST image file"),
    ("magic", "not an IDX MNIST image file"),
    ("gzip", "corrupt gzip stream"),
])
def test_broken_data_files_exit_2_naming_the_file(damage, message, tiny, tmp_path, capsys):
    for name in MNIST_FILES:
        plain = name.removesuffix(".gz")
        (tmp_path / plain).write_bytes((tiny / plain).read_bytes())
    bad = tmp_path / "train-images-idx3-ubyte"
    data = bad.read_bytes()
    if damage == "truncate":
        bad.write_bytes(data[:-100])
    elif damage == "magic":
        bad.write_bytes(struct.pack(">I", 0x801) + data[4:])
    else:
        compressed = bytearray(gzip.compress(data))
        compressed[-8] ^= 0xFF  # break the CRC
        bad.write_bytes(bytes(compressed))
    err = usage_error(["--data-dir", str(tmp_path), "--quiet"], capsys)
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"needle-train: error: --data-dir {tmp_path}: {bad}")
    assert message in line


# ----- stopping: Ctrl-C, a nan loss, a failed checkpoint write ---------------------------------


def interrupt_in_epoch(monkeypatch, epoch: int) -> None:
    """Make the training pass of `epoch` (from 1) raise KeyboardInterrupt, as Ctrl-C does."""
    calls = []
    real = train.run_epoch

    def run_epoch(loader, model, loss_fn, opt=None, **kw):
        calls.append(opt is not None)
        if opt is not None and sum(calls) == epoch:
            raise KeyboardInterrupt
        return real(loader, model, loss_fn, opt, **kw)

    monkeypatch.setattr(train, "run_epoch", run_epoch)


def test_ctrl_c_names_the_last_checkpoint_and_exits_130(fast, tmp_path, monkeypatch, capsys):
    ck = tmp_path / "ck.npz"
    interrupt_in_epoch(monkeypatch, 2)
    assert train.main(["--epochs", "3", "--checkpoint", str(ck), *fast]) == 130
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"needle-train: interrupted in epoch 2; the last checkpoint is {ck} "
                    f"(epoch 1): continue with --resume {ck}")
    assert ndl.load(ck)["epoch"] == 1


def test_ctrl_c_without_a_checkpoint(fast, monkeypatch, capsys):
    interrupt_in_epoch(monkeypatch, 1)
    assert train.main(["--epochs", "3", *fast]) == 130
    (line,) = capsys.readouterr().err.splitlines()
    assert line == "needle-train: interrupted in epoch 1; nothing was saved: no --checkpoint"


def test_ctrl_c_while_loading_data(fast, monkeypatch, capsys):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "_datasets", interrupted)
    assert train.main(fast) == 130
    assert capsys.readouterr().err == "needle-train: interrupted before training\n"


def test_nan_loss_stops_with_exit_1_keeping_the_last_good_checkpoint(fast, tmp_path,
                                                                     monkeypatch, capsys):
    class PoisonedLoss(ndl.nn.SoftmaxLoss):
        """nan from the 5th training batch on (epoch 2, batch 2 at three batches an epoch)."""

        calls = 0

        def forward(self, logits, y):
            loss = super().forward(logits, y)
            if logits.requires_grad:
                PoisonedLoss.calls += 1
                if PoisonedLoss.calls >= 5:
                    return loss * float("nan")
            return loss

    monkeypatch.setattr(ndl.nn, "SoftmaxLoss", PoisonedLoss)
    ck = tmp_path / "ck.npz"  # (eager: the poison counts Python calls, which a replay skips)
    assert train.main(["--epochs", "3", "--checkpoint", str(ck), "--no-compile", *fast]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("needle-train: the training loss became nan in epoch 2, batch 2; "
                           f"stopped (the last checkpoint is {ck} (epoch 1)")
    state = ndl.load(ck)
    assert state["epoch"] == 1
    assert all(np.isfinite(t.numpy()).all() for t in state["model"].values())


def test_diverging_run_stops_with_exit_1(fast, capsys):
    assert train.main(["--optimizer", "sgd", "--lr", "1e30", "--epochs", "2", *fast]) == 1
    (line,) = capsys.readouterr().err.splitlines()  # no numpy overflow warnings either
    assert "loss became" in line and "in epoch 1, batch " in line
    assert "nothing was saved: no --checkpoint" in line


def test_failed_checkpoint_write_exits_1(fast, tmp_path, monkeypatch, capsys):
    def full_disk(obj, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ndl, "save", full_disk)
    ck = tmp_path / "ck.npz"
    assert train.main(["--epochs", "2", "--checkpoint", str(ck), *fast]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert f"cannot write the checkpoint {ck} after epoch 1" in line
    assert "No space left on device" in line


# ----- the shared loop, help, running as a module --------------------------------------------


def test_an_epoch_of_the_cli_is_the_course_loops_epoch(fast, tiny, tmp_path):
    """One needle-train epoch, redone by hand: same data, seed and recipe, the course's
    `run_epoch`; the logged numbers and the weights agree to the bit."""
    ck, log = tmp_path / "ck.npz", tmp_path / "log.csv"
    assert train.main([*fast, "--epochs", "1", "--checkpoint", str(ck), "--log-csv",
                       str(log)]) == 0
    files = ndl.data.find_mnist_files(tiny)
    images, labels, test_images, test_labels = (files[name] for name in MNIST_FILES)
    shifts = [ndl.data.transforms.RandomCrop(2)]  # the default --augment 2
    train_set = ndl.data.MNISTDataset(images, labels, transforms=shifts)
    test_set = ndl.data.MNISTDataset(test_images, test_labels)
    ndl.manual_seed(0)  # the default --seed
    model = mlp_resnet.MLPResNet(784, 8)
    opt = ndl.optim.Adam(model.parameters(), lr=0.001, weight_decay=0.001)
    model.train()
    train_err, train_loss = mlp_resnet.run_epoch(
        ndl.data.DataLoader(train_set, BATCH, shuffle=True), model, ndl.nn.SoftmaxLoss(), opt,
        create_graph=False)
    model.eval()
    test_err, test_loss = mlp_resnet.run_epoch(ndl.data.DataLoader(test_set, 1000), model,
                                               ndl.nn.SoftmaxLoss())
    (row,) = curves.read_csv(log)[1]
    assert (row["train_loss"], row["train_accuracy"], row["test_loss"],
            row["test_accuracy"]) == (train_loss, 1 - train_err, test_loss, 1 - test_err)
    mine = model.state_dict()
    for key, value in ndl.load(ck)["model"].items():
        np.testing.assert_array_equal(value.numpy(), mine[key].numpy(), err_msg=key)


def test_clip_applies_to_image_models_too(fast, monkeypatch):
    norms = []
    clip = ndl.nn.utils.clip_grad_norm_
    monkeypatch.setattr(ndl.nn.utils, "clip_grad_norm_",
                        lambda params, max_norm: norms.append(max_norm) or clip(params, max_norm))
    # eager steps, whose Python calls the patch counts (a compiled step replays the clipping
    # recorded at its first call: test_the_compiled_step_gives_the_eager_runs_numbers)
    assert train.main([*fast, "--epochs", "1", "--no-compile"]) == 0
    assert norms == []  # the image models' default: 0, off
    assert train.main([*fast, "--epochs", "1", "--clip", "0.5", "--no-compile"]) == 0
    assert norms == [0.5] * (N_TRAIN // BATCH)  # before each training step


@pytest.mark.parametrize("model, setting, message", [
    ("lstm", {}, "--distributed trains image models, not lstm"),
])
def test_distributed_refuses_language_models(model, setting, message, capsys):
    # checked with the other settings, before MPI is asked for the ranks
    cfg = {**train.SETTINGS, **train.MODELS[model], **train.PLACES, "model": model, **setting}
    train_config.validate(train.build_parser(), cfg, None)  # fine without --distributed
    with pytest.raises(SystemExit):
        train_config.validate(train.build_parser(), cfg, None, distributed=True)
    assert message in capsys.readouterr().err


def test_run_epoch_names_the_first_nonfinite_batch(device):
    # 14 batches, the loss turns inf at batch 12: found at the end, between host reads
    rng = np.random.default_rng(0)
    batches = [(ndl.Tensor(rng.standard_normal((2, 3)) * (np.inf if i == 11 else 1),
                           device=device, dtype="float32"),
                ndl.Tensor(np.array([0, 1], np.uint8), device=device, requires_grad=False))
               for i in range(14)]
    model = ndl.nn.Linear(3, 2, device=device)
    with pytest.raises(mlp_resnet.NonFiniteLoss) as info, np.errstate(all="ignore"):
        mlp_resnet.run_epoch(batches, model, ndl.nn.SoftmaxLoss(), check_finite=True)
    assert info.value.batch == 12 and not math.isfinite(info.value.loss)
    err, loss = mlp_resnet.run_epoch(batches[:11], model, ndl.nn.SoftmaxLoss(),
                                     check_finite=True)
    assert 0 <= err <= 1 and math.isfinite(loss)


def test_every_option_has_help_with_its_default():
    for action in train.build_parser()._actions:
        if action.dest != "help":
            assert action.help and "(default: " in action.help, action.dest


def test_module_runs_as_a_script(tmp_path):
    # from a neutral folder: the installed needle, not the source tree, must answer
    out = subprocess.run([sys.executable, "-m", "needle.apps.train", "--help"], check=True,
                         capture_output=True, text=True, cwd=tmp_path)
    assert "--checkpoint" in out.stdout and "--resume" in out.stdout


# ----- --model cnn and --model resnet9 ----------------------------------------------------------


@pytest.fixture
def cnn(tiny) -> list[str]:
    """A cnn run on the tiny MNIST folder (a second an epoch at most)."""
    return ["--model", "cnn", "--data-dir", str(tiny), "--batch-size", str(BATCH), "--quiet"]


def test_cnn_trains_checkpoints_and_resumes_bit_for_bit(cnn, tmp_path, capsys):
    whole, part = tmp_path / "whole.npz", tmp_path / "part.npz"
    assert train.main([*cnn, "--epochs", "2", "--checkpoint", str(whole)]) == 0
    assert capsys.readouterr().out.startswith("final: test accuracy")
    assert train.main([*cnn, "--epochs", "2", "--stop-after", "1",
                       "--checkpoint", str(part)]) == 0
    assert train.main(["--resume", str(part), "--quiet"]) == 0  # the model comes from FILE
    a, b = ndl.load(whole), ndl.load(part)
    assert a["config"]["model"] == b["config"]["model"] == "cnn"
    assert a["config"]["lr"] == 0.01  # the cnn's own default
    assert any(name.endswith("conv.weight") or ".weight" in name and value.ndim == 4
               for name, value in a["model"].items())
    assert_same_state(a, b)


def test_cnn_header_names_the_model(cnn, capsys):
    argv = [a for a in cnn if a != "--quiet"]
    assert train.main([*argv, "--epochs", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("needle-train: MNISTConvNet on MNIST, 120 training / 60 test")


@pytest.mark.parametrize("argv, message", [
    (["--model", "cnn", "--hidden-dim", "8"],
     "--hidden-dim applies to --model mlp, rnn, lstm and transformer only, not cnn"),
    (["--model", "resnet9"], "--model resnet9 trains on CIFAR-10, which is not built in: pass "
                             "--data-dir DIR"),
    (["--model", "resnet9", "--data-dir", "{tmp}"],
     "--data-dir {tmp}: CIFAR-10 batch file(s) not found: {tmp}/data_batch_1"),
    (["--model", "vgg"], "invalid choice: 'vgg'"),
])
def test_model_usage_errors(argv, message, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    err = usage_error([*argv, "--quiet"], capsys)
    assert message.replace("{tmp}", str(tmp_path)) in err, err


def test_resume_with_another_model_is_a_usage_error(fast, tmp_path, capsys):
    ck = fake_checkpoint(tmp_path / "ck.npz", model="cnn")
    err = usage_error(["--resume", str(ck), "--model", "mlp", "--quiet"], capsys)
    assert "was trained with --model cnn (this run asks for mlp)" in err


def test_checkpoint_from_before_model_existed_resumes_as_mlp(fast, tmp_path, capsys):
    ck = tmp_path / "ck.npz"
    assert train.main([*fast, "--epochs", "2", "--stop-after", "1",
                       "--checkpoint", str(ck)]) == 0
    state = ndl.load(ck)
    del state["config"]["model"]  # the layout of checkpoints written before --model
    ndl.save(state, ck)
    assert train.main(["--resume", str(ck), "--quiet"]) == 0
    assert ndl.load(ck)["config"]["model"] == "mlp" and ndl.load(ck)["epoch"] == 2


def write_cifar(folder: Path, per_batch: int = 4, empty: tuple[str, ...] = ()) -> Path:
    """CIFAR-10's python-version batches with a few random images each (none in `empty`)."""
    import pickle

    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        n = 0 if name in empty else per_batch
        batch = {b"batch_label": name.encode(), b"labels": rng.integers(0, 10, n).tolist(),
                 b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 b"filenames": [b"x.png"] * n}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    return folder


def test_resnet9_trains_on_a_cifar_folder(tmp_path, capsys):
    data = write_cifar(tmp_path / "cifar-10-batches-py")
    assert train.main(["--model", "resnet9", "--data-dir", str(data), "--epochs", "1",
                       "--batch-size", "10", "--checkpoint", str(tmp_path / "ck.npz")]) == 0
    out = capsys.readouterr().out
    assert "ResNet9 on CIFAR-10, 20 training / 4 test images" in out
    assert out.splitlines()[-1].startswith("final: test accuracy")
    assert ndl.load(tmp_path / "ck.npz")["config"]["augment"] == 4


def test_running_out_of_memory_is_one_line(monkeypatch, capsys):
    """--hidden-dim 100000000 ended in numpy's _ArrayMemoryError traceback."""
    def setup(parser, args):
        raise MemoryError("Unable to allocate 584. GiB")
    monkeypatch.setattr(train, "setup", setup)
    assert train.main(["--quiet"]) == 1
    assert capsys.readouterr().err.strip() == (
        "needle-train: out of memory building the run (Unable to allocate 584. GiB); try a "
        "smaller --hidden-dim or --batch-size")


def test_a_downloaded_run_resumes_from_its_checkpoint_alone(tmp_path, monkeypatch, capsys):
    """The checkpoint kept --data-dir as given (None: the cache), not the folder --download
    fetched into, so `--resume ck.npz` alone (what the stop line suggests) was refused."""
    (tmp_path / "cache").mkdir()
    data = write_cifar(tmp_path / "cache" / "cifar-10-batches-py")
    monkeypatch.setattr(train.train_data, "download", lambda *args: str(data))
    ck = tmp_path / "ck.npz"
    assert train.main(["--model", "resnet9", "--download", "--epochs", "2", "--batch-size",
                       "10", "--checkpoint", str(ck), "--stop-after", "1", "--quiet"]) == 0
    assert ndl.load(ck)["config"]["data_dir"] == str(data)
    assert train.main(["--resume", str(ck), "--quiet"]) == 0
    assert ndl.load(ck)["epoch"] == 2


# ----- --model rnn and --model lstm: language models on PTB ---------------------------------


@pytest.fixture
def ptb(tmp_path) -> Path:
    """A tiny corpus folder: train.txt and test.txt of a few short lines."""
    return write_corpus(tmp_path / "ptb", 30)


def write_corpus(folder: Path, train_lines: int) -> Path:
    """train.txt of `train_lines` short lines and test.txt of 10, in `folder`."""
    folder.mkdir()
    words = "the cat sat on a mat and the dog ran to the cat".split()
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(words, 6)) for _ in range(train_lines + 10)]
    (folder / "train.txt").write_text("\n".join(lines[:train_lines]) + "\n")
    (folder / "test.txt").write_text("\n".join(lines[train_lines:]) + "\n")
    return folder


@pytest.mark.parametrize("model", ["rnn", "lstm", "transformer"])
def test_language_model_trains_checkpoints_and_resumes(model, ptb, tmp_path, capsys):
    argv = ["--model", model, "--data-dir", str(ptb), "--hidden-dim", "8", "--batch-size", "4"]
    whole, part = tmp_path / "whole.npz", tmp_path / "part.npz"
    assert train.main([*argv, "--epochs", "2", "--checkpoint", str(whole)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"needle-train: LanguageModel({model}, hidden 8) on PTB")
    assert "held-out perplexity" in lines[1]
    assert lines[-1].startswith("final: held-out perplexity")
    first, last = (float(line.split("held-out perplexity ")[1].split()[0]) for line in lines[1:3])
    assert math.isfinite(last) and 1 < last < first  # learning
    assert train.main([*argv, "--epochs", "2", "--stop-after", "1", "--checkpoint", str(part),
                       "--quiet"]) == 0
    assert train.main(["--resume", str(part), "--quiet"]) == 0
    a, b = ndl.load(whole), ndl.load(part)
    assert a["config"]["model"] == model and a["config"]["clip"] == 0.25
    given = ("hidden_dim", "epochs", "batch_size")  # the rest is the model's own recipe
    assert a["config"] == {**a["config"], **{k: v for k, v in train.MODELS[model].items()
                                             if k not in given}}
    assert_same_state(a, b)


def test_a_language_model_epoch_of_the_cli_is_run_lm_epochs(ptb, tmp_path):
    """One lstm epoch of needle-train, redone with the course's `run_lm_epoch` (windows of
    40, the state carried, clipping at 0.25): the logged losses and the weights agree to the
    bit."""
    from needle.apps.models import LanguageModel
    from needle.data.ptb import Corpus, batchify

    ck, log = tmp_path / "ck.npz", tmp_path / "log.csv"
    assert train.main(["--model", "lstm", "--data-dir", str(ptb), "--hidden-dim", "8",
                       "--batch-size", "4", "--epochs", "1", "--checkpoint", str(ck),
                       "--log-csv", str(log), "--quiet"]) == 0
    corpus = Corpus(ptb)
    ndl.manual_seed(0)
    model = LanguageModel(8, len(corpus.dictionary), 8, seq_model="lstm")
    opt = ndl.optim.SGD(model.parameters(), lr=4.0, weight_decay=0.0, momentum=0.0)
    model.train()
    _, train_loss = simple_ml.run_lm_epoch(batchify(corpus.train, 4), model,
                                           ndl.nn.SoftmaxLoss(), opt, 40, 0.25)
    model.eval()
    _, test_loss = simple_ml.run_lm_epoch(batchify(corpus.test, 4), model, ndl.nn.SoftmaxLoss())
    (row,) = curves.read_csv(log)[1]
    assert (row["train_loss"], row["test_loss"]) == (train_loss, test_loss)
    mine = model.state_dict()
    for key, value in ndl.load(ck)["model"].items():
        np.testing.assert_array_equal(value.numpy(), mine[key].numpy(), err_msg=key)


def test_language_model_usage_errors(ptb, tmp_path, capsys):
    err = usage_error(["--model", "lstm", "--augment", "2", "--quiet"], capsys)
    assert "--augment applies to image models, not lstm" in err
    err = usage_error(["--model", "lstm", "--clip", "-1", "--quiet"], capsys)
    assert "--clip must be a finite number >= 0, got -1.0" in err
    err = usage_error(["--model", "rnn", "--data-dir", str(tmp_path), "--quiet"], capsys)
    assert f"--data-dir {tmp_path}: " in err and "train.txt" in err


# ----- --log-csv, --plot, --plot-every-epoch ---------------------------------------------------


IMAGE_LINE = re.compile(r"epoch +(\d+)  train err (\S+) loss (\S+)  test err (\S+) loss (\S+)$")
LM_LINE = re.compile(r"epoch +(\d+)  train perplexity (\S+)  held-out perplexity (\S+) \(loss "
                     r"(\S+)\)$")


def test_log_csv_rows_match_the_printed_epoch_lines(fast, tmp_path, capsys):
    log = tmp_path / "log.csv"
    assert train.main([*[a for a in fast if a != "--quiet"], "--epochs", "3",
                       "--log-csv", str(log)]) == 0
    printed = [IMAGE_LINE.match(line).groups() for line in capsys.readouterr().out.splitlines()
               if line.startswith("epoch")]
    columns, rows = curves.read_csv(log)
    assert columns == curves.IMAGE_COLUMNS and len(printed) == len(rows) == 3
    for row, (epoch, train_err, train_loss, test_err, test_loss) in zip(rows, printed):
        assert row["epoch"] == int(epoch)
        assert (f"{1 - row['train_accuracy']:.4f}", f"{row['train_loss']:.4f}") == (train_err,
                                                                                    train_loss)
        assert (f"{1 - row['test_accuracy']:.4f}", f"{row['test_loss']:.4f}") == (test_err,
                                                                                  test_loss)
    # the cosine schedule over 3 epochs: lr (1 + cos(pi e / 3)) / 2 for e = 0, 1, 2
    assert [r["lr"] for r in rows] == pytest.approx([0.001, 0.00075, 0.00025])
    assert 0 < rows[0]["seconds"] < rows[1]["seconds"] < rows[2]["seconds"]


def test_log_csv_of_a_language_model_has_perplexities(ptb, tmp_path, capsys):
    log = tmp_path / "log.csv"
    assert train.main(["--model", "rnn", "--data-dir", str(ptb), "--hidden-dim", "8",
                       "--batch-size", "4", "--epochs", "2", "--log-csv", str(log)]) == 0
    printed = [LM_LINE.match(line).groups() for line in capsys.readouterr().out.splitlines()
               if line.startswith("epoch")]
    columns, rows = curves.read_csv(log)
    assert columns == curves.LM_COLUMNS and len(printed) == len(rows) == 2
    for row, (epoch, train_ppl, test_ppl, test_loss) in zip(rows, printed):
        assert row["epoch"] == int(epoch) and row["lr"] == 4.0
        assert f"{row['train_perplexity']:.2f}" == train_ppl
        assert (f"{row['test_perplexity']:.2f}", f"{row['test_loss']:.4f}") == (test_ppl,
                                                                               test_loss)


def test_log_csv_is_appended_on_resume_without_duplicate_epochs(fast, tmp_path):
    whole, part, ck = tmp_path / "whole.csv", tmp_path / "part.csv", tmp_path / "ck.npz"
    assert train.main([*fast, "--epochs", "3", "--log-csv", str(whole)]) == 0
    assert train.main([*fast, "--epochs", "3", "--stop-after", "1", "--checkpoint", str(ck),
                       "--log-csv", str(part)]) == 0
    # a row of epoch 2 whose checkpoint was never written (killed in between): trained again
    with open(part, "a") as f:
        f.write("2,99.0,0.0,99.0,0.0,0.001,99.0\n")
    assert train.main(["--resume", str(ck), "--stop-after", "1", "--log-csv", str(part),
                       "--quiet"]) == 0
    assert [r["epoch"] for r in curves.read_csv(part)[1]] == [1, 2]
    assert train.main(["--resume", str(ck), "--log-csv", str(part), "--quiet"]) == 0
    (_, a), (_, b) = curves.read_csv(whole), curves.read_csv(part)
    assert [r["epoch"] for r in b] == [1, 2, 3] and b[1]["train_loss"] != 99.0
    # resuming is bit-for-bit: the same numbers as the uninterrupted run, but the seconds
    drop = [{k: v for k, v in r.items() if k != "seconds"} for r in a]
    assert drop == [{k: v for k, v in r.items() if k != "seconds"} for r in b]
    assert b[0]["seconds"] < b[1]["seconds"] < b[2]["seconds"]
    # a fresh run starts the log anew
    assert train.main([*fast, "--epochs", "1", "--log-csv", str(part)]) == 0
    assert [r["epoch"] for r in curves.read_csv(part)[1]] == [1]


def test_resume_with_a_log_of_another_kind_is_a_usage_error(fast, tmp_path, capsys):
    ck, log = tmp_path / "ck.npz", tmp_path / "log.csv"
    assert train.main([*fast, "--epochs", "2", "--stop-after", "1", "--checkpoint",
                       str(ck)]) == 0
    capsys.readouterr()
    log.write_text(",".join(curves.LM_COLUMNS) + "\n")
    err = usage_error(["--resume", str(ck), "--log-csv", str(log)], capsys)
    assert f"--log-csv {log}: its columns (epoch, train_loss, train_perplexity" in err


def test_resume_with_a_log_that_is_not_utf8_names_the_file(fast, tmp_path, capsys):
    ck, log = tmp_path / "ck.npz", tmp_path / "log.csv"
    assert train.main([*fast, "--epochs", "2", "--stop-after", "1", "--checkpoint", str(ck),
                       "--log-csv", str(log)]) == 0
    capsys.readouterr()
    log.write_bytes(log.read_bytes().replace(b"1,", b"\xff,", 1))
    err = usage_error(["--resume", str(ck), "--log-csv", str(log)], capsys)
    # was "--log-csv: 'utf-8' codec can't decode byte 0xff in position 69: ..."
    assert err.splitlines()[-1] == (f"needle-train: error: --log-csv: {log} is not a "
                                    "needle-train log: it is not UTF-8 text (byte 0xff at "
                                    f"offset {len(','.join(curves.IMAGE_COLUMNS)) + 1})")


@pytest.mark.parametrize("every_epoch, drawn", [(False, [3]), (True, [1, 2, 3])])
def test_plot_is_drawn_at_the_end_or_after_every_epoch(every_epoch, drawn, fast, tmp_path,
                                                       monkeypatch):
    calls = []
    monkeypatch.setattr(curves, "save_figure",
                        lambda rows, columns, title, path: calls.append((len(rows), title, path)))
    plot = tmp_path / "curves.png"
    flags = ["--plot-every-epoch"] if every_epoch else []
    assert train.main([*fast, "--epochs", "3", "--plot", str(plot), *flags]) == 0
    title = "MLPResNet(hidden 8) on MNIST, device cpu"
    assert calls == [(n, title, plot) for n in drawn]


def test_plot_writes_a_png(fast, tmp_path):
    pytest.importorskip("matplotlib", reason=f"matplotlib is not installed ({curves.PLOT_HINT})")
    plot = tmp_path / "curves.png"
    assert train.main([*fast, "--epochs", "2", "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["--plot-every-epoch"], "--plot-every-epoch needs --plot FILE"),
    (["--plot", "{tmp}/curves.jpg"], "--plot {tmp}/curves.jpg: name a .png, .svg or .pdf file"),
    (["--plot", "{tmp}/no/curves.png"], "cannot write there: {tmp}/no does not exist"),
    (["--log-csv", __file__ + "/x.csv"], f"cannot write there: {__file__} is not a folder"),
    (["--log-csv", "{tmp}"], "--log-csv {tmp}: is a folder; name a file"),
])
def test_curve_options_usage_errors(argv, message, fast, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert message.replace("{tmp}", str(tmp_path)) in usage_error([*fast, *argv], capsys)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc: a folder that exists "
                                                          "and cannot take new files")
@pytest.mark.parametrize("flag, name", [("--log-csv", "x.csv"), ("--plot", "x.png")])
def test_log_or_plot_in_a_folder_that_takes_no_files_is_a_usage_error(flag, name, fast, tmp_path,
                                                                      capsys):
    # was found only when writing, after the first epoch (--log-csv) or the last (--plot)
    ck = tmp_path / "ck.npz"
    err = usage_error([*fast, "--epochs", "2", "--checkpoint", str(ck), flag, f"/proc/{name}"],
                      capsys)
    assert err.splitlines()[-1].startswith(f"needle-train: error: {flag} /proc/{name}: cannot "
                                           "write in the folder /proc (")
    assert not ck.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
@pytest.mark.parametrize("flag, name", [("--log-csv", "x.csv"), ("--plot", "x.png")])
def test_log_or_plot_in_a_read_only_folder_is_a_usage_error(flag, name, fast, tmp_path,
                                                            capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        err = usage_error([*fast, flag, str(folder / name)], capsys)
    finally:
        folder.chmod(0o700)
    assert f"{flag} {folder / name}: cannot write in the folder {folder} (Permission denied)" \
        in err


@pytest.mark.parametrize("flag, name, epoch", [("--log-csv", "log.csv", 1),
                                               ("--plot", "curves.png", 2)])
def test_a_late_log_or_plot_write_failure_names_the_users_file(flag, name, epoch, fast,
                                                               tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib", reason=f"matplotlib is not installed ({curves.PLOT_HINT})")
    path = tmp_path / name

    def full_disk(src, dst):  # the disk fills up after the checks before training
        raise OSError(28, "No space left on device", str(src), None, str(dst))

    monkeypatch.setattr(os, "replace", full_disk)
    assert train.main([*fast, "--epochs", "2", flag, str(path)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    # was the temporary file's name, /.../.log.csv.3ca9379e.tmp
    assert line == (f"needle-train: cannot write {path} after epoch {epoch} (No space left on "
                    "device); nothing was saved: no --checkpoint")
    assert os.listdir(tmp_path) == []  # no temporary file left behind


def test_plot_without_matplotlib_is_a_usage_error(fast, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    err = usage_error([*fast, "--plot", str(tmp_path / "c.png")], capsys)
    assert "--plot needs matplotlib, which is not installed: pip install needle[plot]" in err


def test_failed_log_write_exits_1(fast, tmp_path, monkeypatch, capsys):
    log = tmp_path / "log.csv"

    def full_disk(path, columns, rows):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(curves, "write_csv", full_disk)
    assert train.main([*fast, "--epochs", "2", "--log-csv", str(log)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"needle-train: cannot write {log} after epoch 1 (No space left on "
                    "device); nothing was saved: no --checkpoint")


# ----- bad data, files and checkpoints: one line naming the file, exit 2 ----------------------


def mnist_copy(tiny: Path, folder: Path, counts: dict[str, int] | None = None,
               label: tuple[str, int] | None = None) -> Path:
    """The tiny MNIST files in `folder`: `counts` cuts a file's items (file name -> count),
    `label` = (file name, value) writes `value` as that file's last label."""
    folder.mkdir()
    for name in MNIST_FILES:
        plain = name.removesuffix(".gz")
        data = bytearray((tiny / plain).read_bytes())
        n = (counts or {}).get(plain)
        if n is not None:
            size = 784 if plain.endswith("images-idx3-ubyte") else 1
            start = 16 if size == 784 else 8
            data = data[:4] + struct.pack(">I", n) + data[8:start] + data[start:start + n * size]
        if label and label[0] == plain:
            data[-1] = label[1]
        (folder / plain).write_bytes(bytes(data))
    return folder


@pytest.mark.parametrize("labels", ["train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte"])
def test_mnist_labels_outside_0_to_9_are_usage_errors(labels, tiny, tmp_path, capsys):
    data = mnist_copy(tiny, tmp_path / "mnist", label=(labels, 200))
    ck = tmp_path / "ck.npz"
    err = usage_error(["--data-dir", str(data), "--hidden-dim", "8", "--batch-size", "40",
                       "--checkpoint", str(ck), "--quiet"], capsys)
    n = N_TRAIN if labels.startswith("train") else N_TEST
    assert err.splitlines()[-1] == (f"needle-train: error: --data-dir {data}: {data / labels}: "
                                    f"labels must lie in 0..9, found 200 (the label of image "
                                    f"{n - 1})")
    assert not ck.exists()  # refused before training, not after an epoch


@pytest.mark.parametrize("empty", ["train-images-idx3-ubyte", "t10k-images-idx3-ubyte"])
def test_mnist_without_images_is_a_usage_error(empty, tiny, tmp_path, capsys):
    labels = empty.replace("images-idx3", "labels-idx1")
    data = mnist_copy(tiny, tmp_path / "mnist", counts={empty: 0, labels: 0})
    err = usage_error(["--data-dir", str(data), "--quiet"], capsys)
    assert err.splitlines()[-1] == (f"needle-train: error: --data-dir {data}: {data / empty} "
                                    "holds no images")


def mnist_of_size(folder: Path, train: tuple[int, int], test: tuple[int, int],
                  n: int = 20) -> Path:
    """Valid MNIST files in `folder` whose training and test images are `train` and `test`
    (rows, cols) pixels."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    for split, (rows, cols) in (("train", train), ("t10k", test)):
        (folder / f"{split}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 0x803, n, rows, cols)
            + rng.integers(0, 256, n * rows * cols, dtype=np.uint8).tobytes())
        (folder / f"{split}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 0x801, n) + rng.integers(0, 10, n, dtype=np.uint8).tobytes())
    return folder


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("train_size, test_size, message", [
    # was a traceback from the first layer
    ((3, 3), (3, 3), "--model {model} needs 28x28 images, found 3x3 in {data}/"
                     "train-images-idx3-ubyte"),
    ((3, 3), (28, 28), "--model {model} needs 28x28 images, found 3x3 in {data}/"
                       "train-images-idx3-ubyte"),
    # 784 pixels too: was trained on, and tested with scrambled images
    ((28, 28), (14, 56), "the test images in {data}/t10k-images-idx3-ubyte are 14x56, the "
                         "training images 28x28: --model {model} needs 28x28 images"),
    ((28, 28), (3, 3), "the test images in {data}/t10k-images-idx3-ubyte are 3x3, the "
                       "training images 28x28: --model {model} needs 28x28 images"),
])
def test_mnist_images_of_another_size_are_a_usage_error(model, train_size, test_size, message,
                                                        tmp_path, capsys):
    data = mnist_of_size(tmp_path / "mnist", train_size, test_size)
    ck = tmp_path / "ck.npz"
    err = usage_error(["--model", model, "--data-dir", str(data), "--batch-size", "10",
                       "--epochs", "1", "--checkpoint", str(ck), "--quiet"], capsys)
    message = message.replace("{model}", model).replace("{data}", str(data))
    assert err.splitlines()[-1] == f"needle-train: error: --data-dir {data}: {message}"
    assert not ck.exists()


@pytest.mark.parametrize("empty, subject", [
    (tuple(f"data_batch_{k}" for k in range(1, 6)),
     "the training batches (data_batch_1, data_batch_2, data_batch_3, data_batch_4, "
     "data_batch_5) hold"),
    (("test_batch",), "{data}/test_batch holds"),
])
def test_cifar_without_images_is_a_usage_error(empty, subject, tmp_path, capsys):
    data = write_cifar(tmp_path / "cifar", empty=empty)
    err = usage_error(["--model", "resnet9", "--data-dir", str(data), "--quiet"], capsys)
    subject = subject.replace("{data}", str(data))
    assert err.splitlines()[-1] == f"needle-train: error: --data-dir {data}: {subject} no images"


def test_cifar_batch_with_a_huge_array_is_a_usage_error(tmp_path, capsys):
    data = write_cifar(tmp_path / "cifar")
    # numpy.ndarray((10**14,), "b") in the pickle: 91 TiB if it were allocated
    (data / "test_batch").write_bytes(b"\x80\x02}C\x04datacnumpy\nndarray\n"
                                      b"\x8a\x06\x00@z\x10\xf3Z\x85U\x01b\x86Rs.")
    err = usage_error(["--model", "resnet9", "--data-dir", str(data), "--quiet"], capsys)
    line = err.splitlines()[-1]
    assert line.startswith(f"needle-train: error: --data-dir {data}: {data / 'test_batch'}: ")
    assert "corrupt CIFAR-10 batch" in line


def test_cifar_batch_with_ragged_labels_names_the_batch(tmp_path, capsys):
    import pickle

    data = write_cifar(tmp_path / "cifar", per_batch=2)
    batch = data / "data_batch_3"
    with open(batch, "rb") as f:
        content = pickle.load(f)
    content[b"labels"] = [[0], [1, 2]]
    with open(batch, "wb") as f:
        pickle.dump(content, f, protocol=2)
    err = usage_error(["--model", "resnet9", "--data-dir", str(data), "--quiet"], capsys)
    # was numpy's bare "setting an array element with a sequence. ... inhomogeneous shape"
    assert err.splitlines()[-1] == (f"needle-train: error: --data-dir {data}: {batch}: "
                                    "b'labels' must be a flat list of ints, found a ragged "
                                    "list")


@pytest.mark.parametrize("train_words, test_words, bad, tokens", [
    (3, 40, "train.txt", 4), (40, 5, "test.txt", 6)])
def test_ptb_split_too_short_for_one_window_is_a_usage_error(train_words, test_words, bad,
                                                             tokens, tmp_path, capsys):
    folder = tmp_path / "ptb"
    folder.mkdir()
    (folder / "train.txt").write_text(" ".join(["w"] * train_words) + "\n")
    (folder / "test.txt").write_text(" ".join(["w"] * test_words) + "\n")
    err = usage_error(["--model", "rnn", "--data-dir", str(folder), "--batch-size", "4",
                       "--quiet"], capsys)
    assert err.splitlines()[-1] == (
        f"needle-train: error: --data-dir {folder}: {folder / bad} holds {tokens} tokens, "
        "fewer than one window of --batch-size 4 needs (8: two rows of 4); use a longer file "
        "or a smaller --batch-size")


def test_builtin_ptb_with_a_batch_larger_than_its_held_out_part(capsys):
    err = usage_error(["--model", "lstm", "--batch-size", "5000", "--quiet"], capsys)
    assert err.splitlines()[-1].startswith("needle-train: error: the built-in PTB set: its "
                                           "last 10% holds ")


@pytest.mark.parametrize("damage, message", [
    (lambda ck: ck["rng"].update(keys=ck["rng"]["keys"][:10]),  # was an IndexError
     "rng['keys'] (a uint32 array of shape (10,), expected 624 uint32)"),
    (lambda ck: ck["rng"].update(keys=ck["rng"]["keys"].astype(np.float64)),
     "rng['keys'] (a float64 array of shape (624,), expected 624 uint32)"),
    (lambda ck: ck["rng"].pop("keys"), "rng['keys'] (NoneType, expected 624 uint32)"),
    (lambda ck: ck["rng"].update(pos=10000), "rng['pos'] (10000, expected an int in [0, 624])"),
    (lambda ck: ck["rng"].pop("has_gauss"), "rng['has_gauss'] (None, expected an int in "),
    (lambda ck: ck["rng"].update(cached_gaussian="x"), "rng['cached_gaussian'] ('x', expected"),
    (lambda ck: ck.update(epoch=-3), "epoch (-3, negative)"),
    (lambda ck: ck.update(seconds=float("nan")), "seconds (nan)"),
])
def test_checkpoint_with_a_bad_rng_state_epoch_or_time_is_a_usage_error(damage, message,
                                                                        tmp_path, capsys):
    ck = fake_checkpoint(tmp_path / "ck.npz")
    state = ndl.load(ck)
    damage(state)
    ndl.save(state, ck)
    err = usage_error(["--resume", str(ck)], capsys)
    assert err.splitlines()[-1].startswith(
        f"needle-train: error: --resume: {ck} is not a needle-train checkpoint of this version "
        f"(missing or malformed: {message}")


def test_resume_from_a_file_that_is_no_archive_says_what_it_is(tmp_path, capsys):
    log = tmp_path / "log.csv"
    log.write_text(",".join(curves.IMAGE_COLUMNS) + "\n")
    err = usage_error(["--resume", str(log)], capsys)
    assert err.splitlines()[-1] == (
        f"needle-train: error: --resume: cannot read the checkpoint {log}: load: '{log}' is not "
        "a needle checkpoint: it is text starting with 'epoch,train_loss,tra', not a zip (.npz) "
        "archive")


@pytest.mark.parametrize("pixels, side", [(28, 28), (100, 28)])
def test_augment_as_large_as_the_image_is_a_usage_error(pixels, side, fast, capsys):
    err = usage_error([*fast, "--augment", str(pixels)], capsys)
    assert err.splitlines()[-1] == (f"needle-train: error: --augment {pixels}: shifts of up to "
                                    f"{pixels} pixels can move a {side}x{side} training image "
                                    f"out of view entirely; use at most {side - 1}")


def test_augment_as_large_as_a_cifar_image_is_a_usage_error(tmp_path, capsys):
    data = write_cifar(tmp_path / "cifar")
    err = usage_error(["--model", "resnet9", "--data-dir", str(data), "--augment", "32"], capsys)
    assert "--augment 32: shifts of up to 32 pixels can move a 32x32" in err


def test_distributed_without_mpi4py_is_a_usage_error_with_the_install_command(fast, monkeypatch,
                                                                              capsys):
    import needle.distributed as dist
    from needle.distributed import comm

    if dist.is_initialized():
        pytest.skip("another test initialized the MPI world")
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py fails
    err = usage_error([*fast, "--distributed"], capsys)
    line = err.splitlines()[-1]
    assert line.startswith("needle-train: error: --distributed: needle.distributed needs "
                           "mpi4py and an MPI library")
    assert f": {comm.install_command()}, then launch with `mpiexec" in line


# ----- files that would overwrite each other --------------------------------------------------


@pytest.mark.parametrize("flags", [
    ["--checkpoint", "{tmp}/run", "--log-csv", "{tmp}/run"],
    ["--log-csv", "{tmp}/run.png", "--plot", "{tmp}/run.png"],
    ["--checkpoint", "{tmp}/run.png", "--plot", "{tmp}/sub/../run.png"],
    ["--checkpoint", "{tmp}/ck.npz", "--log-csv", "{tmp}/link.csv"],  # a symlink to ck.npz
])
def test_two_outputs_naming_one_file_are_a_usage_error(flags, fast, tmp_path, capsys):
    (tmp_path / "link.csv").symlink_to(tmp_path / "ck.npz")
    (tmp_path / "sub").mkdir()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in flags]
    err = usage_error([*fast, *argv], capsys)
    assert err.splitlines()[-1] == (f"needle-train: error: {argv[0]} {argv[1]} and {argv[2]} "
                                    f"{argv[3]} name the same file: each would overwrite the "
                                    "other; name two files")
    assert sorted(os.listdir(tmp_path)) == ["link.csv", "sub"]  # nothing written


def test_resume_with_the_resumed_file_as_log_or_plot_is_a_usage_error(fast, tmp_path, capsys):
    ck = tmp_path / "ck.png"  # a checkpoint may have any name
    assert train.main([*fast, "--epochs", "2", "--stop-after", "1", "--checkpoint",
                       str(ck)]) == 0
    capsys.readouterr()
    before = ck.read_bytes()
    for flags in (["--log-csv", str(ck)], ["--checkpoint", str(tmp_path / "new.npz"),
                                           "--plot", str(ck)]):
        err = usage_error(["--resume", str(ck), *flags], capsys)
        assert f"--resume {ck} and {flags[-2]} {ck} name the same file" in err
    assert ck.read_bytes() == before
    # continuing a run into the file it came from is what --resume does
    assert train.main(["--resume", str(ck), "--checkpoint", str(ck), "--quiet"]) == 0
    assert ndl.load(ck)["epoch"] == 2


@pytest.fixture
def two_runs(fast, tmp_path) -> dict[str, Path]:
    """Two runs stopped after epoch 1 of 3 (seeds 0 and 1), each with a checkpoint and a log."""
    files = {}
    for seed in ("0", "1"):
        files[f"ck{seed}"], files[f"log{seed}"] = tmp_path / f"{seed}.npz", tmp_path / f"{seed}.csv"
        assert train.main([*fast, "--epochs", "3", "--stop-after", "1", "--seed", seed,
                           "--checkpoint", str(files[f"ck{seed}"]),
                           "--log-csv", str(files[f"log{seed}"])]) == 0
    return files


def test_resume_with_another_runs_log_is_a_usage_error(two_runs, tmp_path, capsys):
    ck, other = two_runs["ck0"], two_runs["log1"]
    capsys.readouterr()
    before = other.read_text()
    err = usage_error(["--resume", str(ck), "--log-csv", str(other)], capsys)
    seconds = ndl.load(ck)["seconds"]
    assert err.splitlines()[-1] == (
        f"needle-train: error: --log-csv {other}: its epoch 1 ended at "
        f"{curves.read_csv(other)[1][0]['seconds']!r} s of training, so it logs another run "
        f"than {ck} (epoch 1, {seconds!r} s); name another file")
    assert other.read_text() == before  # not spliced
    # its own log continues
    assert train.main(["--resume", str(ck), "--log-csv", str(two_runs["log0"]), "--quiet"]) == 0
    assert [r["epoch"] for r in curves.read_csv(two_runs["log0"])[1]] == [1, 2, 3]


def test_a_log_started_by_a_resumed_run_continues_when_that_run_is_resumed(two_runs, tmp_path,
                                                                          capsys):
    """A log first given to a resumed run starts at its first epoch; resuming that run later
    continues it (its epochs end at the checkpoint's, at its time), another run's is refused."""
    new, ck1, ck0 = tmp_path / "new.csv", tmp_path / "r1.npz", tmp_path / "r0.npz"
    assert train.main(["--resume", str(two_runs["ck1"]), "--checkpoint", str(ck1),
                       "--log-csv", str(new), "--quiet"]) == 0
    rows = curves.read_csv(new)[1]
    assert [r["epoch"] for r in rows] == [2, 3] and rows[1]["seconds"] == ndl.load(ck1)["seconds"]
    # another run at epoch 3: never spliced onto this log
    assert train.main(["--resume", str(two_runs["ck0"]), "--checkpoint", str(ck0),
                       "--quiet"]) == 0
    capsys.readouterr()
    err = usage_error(["--resume", str(ck0), "--epochs", "4", "--log-csv", str(new)], capsys)
    assert err.splitlines()[-1].startswith(f"needle-train: error: --log-csv {new}: its epoch 3 "
                                           f"ended at {rows[1]['seconds']!r} s of training, so "
                                           f"it logs another run than {ck0} (epoch 3, ")
    # the run that started it: was refused as "its epochs are 2, 3, not 1 to 3"
    assert train.main(["--resume", str(ck1), "--epochs", "4", "--log-csv", str(new),
                       "--quiet"]) == 0
    after = curves.read_csv(new)[1]
    assert [r["epoch"] for r in after] == [2, 3, 4] and after[:2] == rows


@pytest.mark.parametrize("edit, problem", [
    (lambda lines: lines[:1], "it holds no epochs up to 2"),
    (lambda lines: lines[:2], "it ends at epoch 1, before epoch 2"),
    (lambda lines: [lines[0], lines[2], lines[1]], "its epochs are 2, 1, not consecutive "
                                                   "numbers from 1 or later"),
    (lambda lines: [lines[0], lines[1].replace("1", "0", 1), lines[2]],
     "its epochs are 0, 2, not consecutive numbers from 1 or later"),
])
def test_resume_with_a_log_whose_epochs_do_not_match_is_a_usage_error(edit, problem, fast,
                                                                      tmp_path, capsys):
    ck, log = tmp_path / "ck.npz", tmp_path / "log.csv"
    assert train.main([*fast, "--epochs", "3", "--stop-after", "2", "--checkpoint", str(ck),
                       "--log-csv", str(log)]) == 0
    capsys.readouterr()
    log.write_text("\n".join(edit(log.read_text().splitlines())) + "\n")
    err = usage_error(["--resume", str(ck), "--log-csv", str(log)], capsys)
    assert f"--log-csv {log}: {problem}, so it logs another run than {ck} (epoch 2" in err


# ----- --help ----------------------------------------------------------------------------------


def test_help_names_every_model_and_every_models_defaults(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse's line breaks undone
    description = text[text.index("Train "):text.index("options:")]
    for model in ("mlp", "cnn", "resnet9", "rnn", "lstm", "transformer"):
        assert model in description, model
    # the language models' own recipe, next to the image models' defaults
    for option, default in [
            ("--batch-size", "100 for mlp, cnn and resnet9; 20 for rnn, lstm and transformer"),
            ("--optimizer", "adam for mlp, cnn, resnet9 and transformer; sgd for rnn and lstm"),
            ("--weight-decay", "0.001 for mlp, cnn and resnet9; 0.0 for rnn, lstm and "
                               "transformer"),
            ("--schedule", "cosine for mlp, cnn, resnet9 and transformer; constant for rnn and "
                           "lstm"),
            ("--epochs", "20 for mlp; 15 for cnn; 10 for resnet9; 5 for rnn, lstm and "
                         "transformer"),
            ("--lr", "0.001 for mlp, resnet9 and transformer; 0.01 for cnn; 4.0 for rnn and "
                     "lstm"),
            ("--clip", "0.0 for mlp, cnn and resnet9; 0.25 for rnn, lstm and transformer"),
            ("--hidden-dim", "256 for mlp; 100 for rnn and lstm; 64 for transformer"),
            ("--augment", "2 for mlp and cnn; 4 for resnet9)")]:
        assert f"(default: {default}" in text[text.index(f" {option} "):], option
    # every setting some model changes lists each model it applies to
    unused = {"hidden_dim": ("cnn", "resnet9"), "augment": ("rnn", "lstm", "transformer")}
    for action in train.build_parser()._actions:
        if any(action.dest in own for own in train.MODELS.values()):
            listed = action.help.split("(default: ")[1]
            for model in set(train.MODELS) - set(unused.get(action.dest, ())):
                assert model in listed, (action.dest, model)


def run_ways(argv: list[str], ways: dict[str, list[str]], tmp_path: Path) -> dict:
    """needle-train run once per way (name -> extra arguments): name -> (its checkpoint, its
    logged rows without the seconds)."""
    runs = {}
    for name, extra in ways.items():
        ck, log = tmp_path / f"{name}.npz", tmp_path / f"{name}.csv"
        assert train.main([*argv, *extra, "--checkpoint", str(ck), "--log-csv", str(log)]) == 0
        rows = [{k: v for k, v in row.items() if k != "seconds"}
                for row in curves.read_csv(log)[1]]
        runs[name] = (ndl.load(ck), rows)
    return runs


@pytest.mark.parametrize("model", ["mlp", "cnn", "rnn", "lstm", "transformer"])
def test_the_compiled_step_gives_the_eager_runs_numbers(model, tiny, ptb, tmp_path):
    """needle-train replays its step compiled by ndl.compile by default: two epochs (train,
    eval, train again, with the lr schedule and clipping) give the weights, optimizer state
    and logged losses of --no-compile bit for bit."""
    data = ptb if model in LANGUAGE_MODELS else tiny
    argv = ["--model", model, "--data-dir", str(data), "--batch-size", "4" if data is ptb
            else str(BATCH), "--epochs", "2", "--quiet"]
    if model != "cnn":
        argv += ["--hidden-dim", "8"]
    runs = run_ways(argv, {"compiled": [], "eager": ["--no-compile"]}, tmp_path)
    assert runs["compiled"][1] == runs["eager"][1]
    assert_same_state(runs["compiled"][0], runs["eager"][0])


def test_cuda_graph_usage_errors(tiny, capsys):
    base = ["--data-dir", str(tiny), "--epochs", "1", "--cuda-graph"]
    assert "--cuda-graph needs a GPU device" in usage_error([*base, "--device", "cpu"], capsys)
    assert "is not a CUDA device" in usage_error([*base, "--device", "strict"], capsys)
    assert "cannot go with --no-compile" in usage_error([*base, "--no-compile"], capsys)
    try:  # under --distributed every rank's exit status is returned, not raised
        status = train.main([*base, "--distributed"])
    except SystemExit as e:
        status = e.code
    assert status == 2 and "not supported with --distributed" in capsys.readouterr().err


@pytest.mark.parametrize("gpu", [True, False])
@pytest.mark.parametrize("flags, graphed_on_a_gpu", [
    ([], True), (["--cuda-graph"], True), (["--no-cuda-graph"], False),
    (["--no-compile"], False), (["--distributed"], False)])
def test_the_step_is_graphed_by_default_where_a_graph_can_be_captured(
        flags, graphed_on_a_gpu, gpu, tiny, monkeypatch):
    """A step is captured as CUDA graphs by default on a GPU device (the run's flag, which
    training_step gets): not with --no-cuda-graph, --no-compile or --distributed, never on
    a device that cannot capture (where --cuda-graph alone is a usage error)."""
    from needle.compiled import cuda_graph

    if gpu:  # the cpu standing in for a GPU: what decides is whether a graph can be made
        monkeypatch.setattr(cuda_graph, "unavailable_reason", lambda device: "")
    parser = train_config.build_parser()
    args = parser.parse_args(["--data-dir", str(tiny), *flags])
    if flags == ["--cuda-graph"] and not gpu:
        with pytest.raises(SystemExit):
            train._cuda_graph(parser, args, ndl.cpu())
    else:
        assert train._cuda_graph(parser, args, ndl.cpu()) is (gpu and graphed_on_a_gpu)


@pytest.mark.parametrize("model", ["mlp", "cnn", "rnn", "lstm", "transformer"])
@pytest.mark.filterwarnings("ignore:ndl.compile.*replayed without a CUDA graph")
def test_the_graphed_step_gives_the_eager_runs_numbers(model, tiny, ptb, tmp_path,
                                                       monkeypatch):
    """--cuda-graph's step (forward and backward compiled with cuda_graph=True; reset_grad,
    clipping and the update eager around it) on the cpu, where its graph is refused and the
    program replays as usual: the weights, optimizer state and losses of --no-compile bit for
    bit (with the lstm's clipping and its hidden state carried between windows)."""
    # the cpu allowed: its graph is then refused by ndl.compile, which warns and replays
    monkeypatch.setattr(train, "_check_cuda_graph", lambda parser, args, device: None)
    data = ptb if model in LANGUAGE_MODELS else tiny
    argv = ["--model", model, "--data-dir", str(data), "--batch-size", "4" if data is ptb
            else str(BATCH), "--epochs", "2", "--quiet"]
    if model != "cnn":
        argv += ["--hidden-dim", "8"]
    runs = run_ways(argv, {"graphed": ["--cuda-graph"], "eager": ["--no-compile"]}, tmp_path)
    assert runs["graphed"][1] == runs["eager"][1]
    assert_same_state(runs["graphed"][0], runs["eager"][0])


def test_the_graphed_step_compiles_only_the_forward_and_backward(monkeypatch):
    """training_step(cuda_graph=True) hands ndl.compile a step with no optimizer call (a
    graph would freeze its Python), with cuda_graph=True; the update runs outside."""
    from needle.apps import epoch_loop

    seen = {}
    real = ndl.compile

    def spy(fn=None, **kwargs):
        seen[fn.__name__] = (kwargs, real(fn, **kwargs))
        return seen[fn.__name__][1]

    monkeypatch.setattr(epoch_loop.ndl, "compile", spy)
    np.random.seed(0)
    model = ndl.nn.Linear(3, 2)
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)
    step = epoch_loop.training_step(model, ndl.nn.SoftmaxLoss(), opt, clip=1.0,
                                    cuda_graph=True)
    assert list(seen) == ["forward_backward"] and seen["forward_backward"][0] == {
        "cuda_graph": True}
    X = ndl.Tensor(np.ones((4, 3), np.float32), requires_grad=False)
    y = ndl.Tensor(np.array([0, 1, 0, 1]), requires_grad=False)
    before = model.weight.numpy()
    with pytest.warns(UserWarning, match="replayed without a CUDA graph: cpu"):
        step(X, y)
    assert not np.array_equal(model.weight.numpy(), before)  # the update ran (eagerly)
    (program,) = seen["forward_backward"][1].programs()
    assert not program.replayed_calls  # no optimizer call inside: a graph could take it


@pytest.mark.parametrize("kind", ["torch:cuda", "cuda"])
@pytest.mark.parametrize("model", ["mlp", "cnn", "rnn", "lstm", "transformer"])
def test_needle_train_with_cuda_graph_on_a_gpu(kind, model, tiny, ptb, tmp_path, monkeypatch):
    """--cuda-graph on a GPU: steps captured (at least one graph, no 'replayed without'
    warning) and the run's losses and weights those of --no-compile to float32 rounding (on
    cuda the graph's products call cuBLAS directly, which may pick other kernels than cupy)."""
    import importlib
    import warnings

    device = gpu_device(kind)
    if kind == "torch:cuda":  # (cuDNN's default weight adjoints are not deterministic, and
        import torch  # Adam turns their last-bit differences into different weights)

        monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    # (the lstm's corpus: windows of 40 rows, several with the same shape and state each
    # epoch, so that one is captured: a compiled step is captured at its third call)
    ptb = write_corpus(tmp_path / "long", 200) if model in LANGUAGE_MODELS else ptb
    replay = importlib.import_module("needle.compiled.cuda_graph").CudaGraphReplay
    captured, capture = [], replay.__init__
    monkeypatch.setattr(replay, "__init__", lambda self, *a: (capture(self, *a),
                                                               captured.append(1))[0])
    data = ptb if model in LANGUAGE_MODELS else tiny
    argv = ["--model", model, "--device", kind, "--data-dir", str(data), "--batch-size",
            "4" if data is ptb else str(BATCH), "--epochs", "2", "--quiet"]
    if model != "cnn":
        argv += ["--hidden-dim", "8"]
    if model == "transformer":  # SGD: the keys' bias gets a gradient of rounding noise only
        argv += ["--optimizer", "sgd"]  # (softmax ignores it), which Adam makes lr-sized
        # steps of (torch:cuda on an H100: 8 of 8 entries apart after two epochs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = run_ways(argv, {"graphed": ["--cuda-graph"], "eager": ["--no-compile"]},
                        tmp_path)
    assert not [w for w in caught if "graph" in str(w.message)], device
    assert captured, "no step was captured"
    for a, b in zip(runs["graphed"][1], runs["eager"][1]):
        for key in ("train_loss", "test_loss"):
            assert math.isclose(float(a[key]), float(b[key]), rel_tol=1e-4), (key, a, b)
    for key, value in runs["eager"][0]["model"].items():
        np.testing.assert_allclose(runs["graphed"][0]["model"][key].numpy(), value.numpy(),
                                   rtol=1e-3, atol=1e-5, err_msg=key)


def gpu_device(kind: str):
    """The GPU device `kind` names, or a skip saying why it is not here."""
    if kind == "torch:cuda":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("no CUDA GPU for torch here")
        return ndl.backends.torch("cuda")
    device = ndl.cuda()
    if not device.enabled():
        pytest.skip(device.unavailable_reason())
    return device

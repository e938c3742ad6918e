"""The course applications (simple_ml, mlp_resnet); the needle-train CLI is in test_cli.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import needle as ndl
import needle.apps
from needle.apps import mlp_resnet, simple_ml
from needle.data import MNIST_FILES, builtin_mnist_dir

MNIST = builtin_mnist_dir()
TRAIN_IMAGES, TRAIN_LABELS = (MNIST / MNIST_FILES[0], MNIST / MNIST_FILES[1])


def np_softmax_loss(Z, y):
    Z = Z - Z.max(axis=1, keepdims=True)
    return np.mean(np.log(np.exp(Z).sum(axis=1)) - Z[np.arange(len(y)), y])


# ----- simple_ml -------------------------------------------------------------------------


def test_parse_mnist_and_loss_err():
    X, y = simple_ml.parse_mnist(TRAIN_IMAGES, TRAIN_LABELS)
    assert X.shape == (5000, 784) and X.dtype == np.float32 and y.dtype == np.uint8
    assert 0.0 <= X.min() and X.max() <= 1.0
    Z = np.random.default_rng(0).standard_normal((50, 10)).astype(np.float32)
    loss, err = simple_ml.loss_err(ndl.Tensor(Z), y[:50])
    np.testing.assert_allclose(loss, np_softmax_loss(Z.astype(np.float64), y[:50]), rtol=1e-5)
    assert err == np.mean(Z.argmax(1) != y[:50])


def test_softmax_loss_matches_numpy(device):
    rng = np.random.default_rng(1)
    Z, y = rng.standard_normal((8, 5)), rng.integers(0, 5, 8)
    got = simple_ml.softmax_loss(ndl.Tensor(Z, device=device),
                                 ndl.Tensor(np.eye(5)[y], device=device))
    np.testing.assert_allclose(got.numpy(), np_softmax_loss(Z, y), rtol=1e-10)


def test_nn_epoch_matches_a_numpy_epoch(device):
    X, y = simple_ml.parse_mnist(TRAIN_IMAGES, TRAIN_LABELS)
    X, y = X[:250].astype(np.float64), y[:250]
    rng = np.random.default_rng(2)
    W1, W2 = rng.standard_normal((784, 20)) / 28, rng.standard_normal((20, 10)) / 5
    # the same epoch by hand: batches in order, the last one partial, plain SGD
    w1, w2 = W1.copy(), W2.copy()
    for s in range(0, 250, 100):
        xb, yb = X[s:s + 100], y[s:s + 100]
        h = np.maximum(xb @ w1, 0)
        p = np.exp(h @ w2 - (h @ w2).max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(yb)), yb] -= 1
        g2 = h.T @ p / len(yb)
        g1 = xb.T @ ((p @ w2.T) * (h > 0)) / len(yb)
        w1, w2 = w1 - 0.1 * g1, w2 - 0.1 * g2
    T1, T2 = ndl.Tensor(W1, device=device), ndl.Tensor(W2, device=device)
    T1, T2 = simple_ml.nn_epoch(X, y, T1, T2, lr=0.1, batch=100)
    np.testing.assert_allclose(T1.numpy(), w1, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(T2.numpy(), w2, rtol=1e-9, atol=1e-12)


# ----- mlp_resnet --------------------------------------------------------------------------


def test_mlp_resnet_structure():
    model = mlp_resnet.MLPResNet(784, hidden_dim=16, num_blocks=2, num_classes=10)
    mods = model.modules
    assert [type(m).__name__ for m in mods] == ["Linear", "ReLU", "Sequential", "Sequential",
                                                "Linear"]
    block = mods[2]
    assert isinstance(block.modules[0], ndl.nn.Residual)
    assert isinstance(block.modules[1], ndl.nn.ReLU)
    inner = [type(m).__name__ for m in block.modules[0].fn.modules]
    assert inner == ["Linear", "BatchNorm1d", "ReLU", "Dropout", "Linear", "BatchNorm1d"]
    assert block.modules[0].fn.modules[0].weight.shape == (16, 8)
    # Linear(784,16) + 2 * [Linear(16,8) + BN(8) + Linear(8,16) + BN(16)] + Linear(16,10)
    expected = (784 * 16 + 16) + 2 * ((16 * 8 + 8) + 16 + (8 * 16 + 16) + 32) + (16 * 10 + 10)
    assert sum(int(np.prod(p.shape)) for p in model.parameters()) == expected


def test_epoch_returns_error_and_batch_weighted_loss(device):
    np.random.seed(0)
    X = np.random.rand(30, 12).astype(np.float32)
    y = np.random.randint(0, 3, 30).astype(np.uint8)
    model = mlp_resnet.MLPResNet(12, hidden_dim=8, num_blocks=1, num_classes=3, device=device)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), batch_size=8, device=device)
    err, loss = mlp_resnet.epoch(loader, model)  # eval: no optimizer
    assert not model.training
    # recompute by hand: batches of 8, 8, 8, 6 weighted by size
    model.eval()
    logits = model(ndl.Tensor(X, device=device)).numpy().astype(np.float64)
    assert err == pytest.approx(np.mean(logits.argmax(1) != y))
    losses = [np_softmax_loss(logits[s:s + 8], y[s:s + 8]) * len(y[s:s + 8])
              for s in range(0, 30, 8)]
    assert loss == pytest.approx(sum(losses) / 30, rel=1e-5)
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)
    before = model.parameters()[0].numpy()
    mlp_resnet.epoch(loader, model, opt)
    assert model.training and not np.array_equal(before, model.parameters()[0].numpy())


def test_epoch_sums_batch_losses_as_the_course_does(device):
    # the course's loop adds float(loss) * n on the host, in float64; the shared loop keeps
    # the sum on the device and must give exactly the same numbers
    np.random.seed(1)
    X = np.random.rand(200, 12).astype(np.float32)
    y = np.random.randint(0, 3, 200).astype(np.uint8)
    model = mlp_resnet.MLPResNet(12, hidden_dim=8, num_blocks=1, num_classes=3, device=device)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), batch_size=3, device=device)
    err, loss = mlp_resnet.epoch(loader, model)
    total, wrong = 0.0, 0
    for Xb, yb in loader:
        logits = model(Xb)
        total += float(ndl.nn.SoftmaxLoss()(logits, yb).numpy()) * Xb.shape[0]
        wrong += int(np.sum(logits.numpy().argmax(axis=1) != yb.numpy()))
    assert (err, loss) == (wrong / 200, total / 200)


def test_epoch_seeds_numpy_with_4_each_call():
    model = mlp_resnet.MLPResNet(4, hidden_dim=4, num_blocks=1, num_classes=2)
    loader = ndl.data.DataLoader(ndl.data.NDArrayDataset(
        np.ones((3, 4), np.float32), np.zeros(3, np.uint8)), batch_size=3)
    np.random.seed(0)
    mlp_resnet.epoch(loader, model)  # evaluation: no shuffling or dropout draws
    assert np.random.rand() == np.random.RandomState(4).rand()


@pytest.mark.slow
def test_train_mnist_on_the_builtin_data():
    out = mlp_resnet.train_mnist(batch_size=100, epochs=2, hidden_dim=32, data_dir=MNIST)
    assert len(out) == 4
    train_err, train_loss, test_err, test_loss = out
    # chance is an error of 0.9 and a loss of log(10) = 2.3: two short epochs learn a lot
    assert 0 < train_err < 0.6 and 0 < test_err < 0.4 and test_loss < 1.2


def test_apps_import_standalone():
    folder = Path(needle.apps.__file__).parent
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from mlp_resnet import *; from simple_ml import *; "
            "print(MLPResNet.__name__, softmax_loss.__name__)")
    out = subprocess.run([sys.executable, "-c", code, str(folder)], check=True,
                         capture_output=True, text=True, cwd="/")
    assert out.stdout.split() == ["MLPResNet", "softmax_loss"]


# ----- the one epoch loop ----------------------------------------------------------------


def test_lm_windows_carry_the_state_detached(device):
    """Window 2 starts from window 1's final state, as a constant: its gradients are those of
    window 2 alone from that state (no path back into window 1), and a new pass starts from
    no state."""
    from needle.apps.epoch_loop import LMWindows
    from needle.apps.models import LanguageModel

    data = np.random.default_rng(4).integers(0, 7, (17, 2)).astype(np.float32)
    np.random.seed(0)
    lm = LanguageModel(5, 7, 6, seq_model="lstm", device=device)
    windows = LMWindows(data, 8, device)
    assert len(windows) == 2  # rows 0-7 and 8-15, each with the next row as targets
    batches = iter(windows)
    (X1, _), (X2, y2) = next(batches), next(batches)
    assert X1.shape == X2.shape == (8, 2) and y2.shape == (16,)
    windows.forward(lm, X1)
    ndl.nn.SoftmaxLoss()(windows.forward(lm, X2), y2).backward()
    got = [p.grad.numpy() for p in lm.parameters()]
    # by hand: window 1's final state copied into constants, window 2 run from them
    with ndl.no_grad():
        _, (h, c) = lm(X1)
    state = tuple(ndl.Tensor(t.numpy(), device=device, requires_grad=False) for t in (h, c))
    for p in lm.parameters():
        p.grad = None
    ndl.nn.SoftmaxLoss()(lm(X2, state)[0], y2).backward()
    for mine, expected in zip(got, (p.grad.numpy() for p in lm.parameters())):
        if device.kind == "jax" and device.defers_checks:  # jax on a GPU: its embedding
            # adjoint's scatter-add runs in no fixed order (an H100: 7e-8 relative apart)
            np.testing.assert_allclose(mine, expected, rtol=1e-5, atol=1e-7)
        else:
            np.testing.assert_array_equal(mine, expected)
    next(iter(windows))
    assert windows.hidden is None  # a new pass


def test_run_epoch_clips_before_each_step(device):
    """With `clip`, every step sees gradients of global norm at most `clip`."""
    from needle.apps.epoch_loop import run_epoch

    rng = np.random.default_rng(5)
    batches = [(ndl.Tensor(rng.standard_normal((4, 3)) * 100, device=device, dtype="float32"),
                ndl.Tensor(rng.integers(0, 2, 4).astype(np.uint8), device=device,
                           requires_grad=False)) for _ in range(3)]

    class Recording(ndl.optim.SGD):
        norms: list[float] = []

        def step(self):
            self.norms.append(np.sqrt(sum(float((p.grad.numpy().astype(np.float64) ** 2).sum())
                                          for p in self.params)))
            super().step()

    np.random.seed(0)
    model = ndl.nn.Linear(3, 2, device=device)
    run_epoch(batches, model, ndl.nn.SoftmaxLoss(), Recording(model.parameters(), lr=0.1),
              clip=0.5)
    assert len(Recording.norms) == 3 and max(Recording.norms) <= 0.5 * (1 + 1e-5)
    Recording.norms.clear()
    run_epoch(batches, model, ndl.nn.SoftmaxLoss(), Recording(model.parameters(), lr=0.1))
    assert max(Recording.norms) > 0.5  # unclipped, they are larger

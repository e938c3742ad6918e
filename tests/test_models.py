"""The course's hw4 apps: ResNet9 (needle/apps/models.py) and simple_ml's CIFAR-10 loops."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import needle as ndl
import needle.apps
from needle import nn
from needle.apps import simple_ml
from needle.apps.models import ConvBN, ResNet9

# (in, out, kernel, stride) of ResNet9's ConvBN blocks, in the order they are built
RESNET9_CONVS = [(3, 16, 7, 4), (16, 32, 3, 2), (32, 32, 3, 1), (32, 32, 3, 1),
                 (32, 64, 3, 2), (64, 128, 3, 2), (128, 128, 3, 1), (128, 128, 3, 1)]


def np_softmax_loss(Z, y):
    Z = Z - Z.max(axis=1, keepdims=True)
    return np.mean(np.log(np.exp(Z).sum(axis=1)) - Z[np.arange(len(y)), y])


def n_params(model):
    return sum(int(np.prod(p.shape)) for p in model.parameters())


# ----- ResNet9 --------------------------------------------------------------------------------


def test_resnet9_has_the_courses_layers_and_431946_parameters():
    model = ResNet9()
    assert n_params(model) == 431_946
    layers = model.model.modules
    assert [type(m).__name__ for m in layers] == [
        "ConvBN", "ConvBN", "Residual", "ConvBN", "ConvBN", "Residual",
        "Flatten", "Linear", "ReLU", "Linear"]
    blocks = [layers[0], layers[1], *layers[2].fn, layers[3], layers[4], *layers[5].fn]
    assert all(isinstance(b, ConvBN) for b in blocks)
    found = [(b.conv.in_channels, b.conv.out_channels, b.conv.kernel_size, b.conv.stride)
             for b in blocks]
    assert found == RESNET9_CONVS
    assert [b.bn.dim for b in blocks] == [c[1] for c in RESNET9_CONVS]
    assert (layers[7].in_features, layers[7].out_features) == (128, 128)
    assert (layers[9].in_features, layers[9].out_features) == (128, 10)


def course_layers():
    """ResNet9's layers built one by one in the course's order (BatchNorm draws nothing)."""
    convbns = [(nn.Conv(a, b, k, stride=s), nn.BatchNorm2d(b)) for a, b, k, s in RESNET9_CONVS]
    return convbns, nn.Linear(128, 128), nn.Linear(128, 10)


def course_forward(layers, x):
    convbns, fc1, fc2 = layers

    def cb(i, h):
        conv, bn = convbns[i]
        return ndl.relu(bn(conv(h)))

    h = cb(1, cb(0, x))
    h = cb(3, cb(2, h)) + h
    h = cb(5, cb(4, h))
    h = cb(7, cb(6, h)) + h
    return fc2(ndl.relu(fc1(h.reshape((h.shape[0], 128)))))


def test_resnet9_draws_the_same_weights_as_the_courses_layer_order():
    np.random.seed(3)
    model = ResNet9()
    after_model = np.random.rand()
    np.random.seed(3)
    layers = course_layers()
    assert np.random.rand() == after_model  # the same number of draws
    convbns, fc1, fc2 = layers
    expected = [p for conv, bn in convbns for p in (conv.weight, conv.bias, bn.weight, bn.bias)]
    expected += [fc1.weight, fc1.bias, fc2.weight, fc2.bias]
    got = model.parameters()
    assert len(got) == len(expected) == 36
    for p, q in zip(got, expected):
        assert p.shape == q.shape
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    # and the same wiring: the residual additions and the head
    x = ndl.Tensor(np.random.default_rng(0).standard_normal((2, 3, 32, 32)), dtype="float32",
                   requires_grad=False)
    np.testing.assert_array_equal(model(x).numpy(), course_forward(layers, x).numpy())


def test_resnet9_forward_backward_on_every_device(device):
    np.random.seed(0)
    model = ResNet9(device=device)
    assert all(p.device == device and p.dtype == "float32" for p in model.parameters())
    x = ndl.Tensor(np.random.rand(2, 3, 32, 32), device=device, dtype="float32")
    logits = model(x)
    assert logits.shape == (2, 10) and logits.device == device
    nn.SoftmaxLoss()(logits, ndl.Tensor([1, 7], device=device)).backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())
    assert x.grad.shape == (2, 3, 32, 32)


def test_convbn_is_conv_then_batchnorm_then_relu():
    np.random.seed(1)
    block = ConvBN(3, 4, 3, 2)
    np.random.seed(1)
    conv, bn = nn.Conv(3, 4, 3, stride=2), nn.BatchNorm2d(4)
    x = ndl.Tensor(np.random.randn(2, 3, 8, 8), dtype="float32")
    out = block(x)
    assert out.shape == (2, 4, 4, 4)
    np.testing.assert_array_equal(out.numpy(), ndl.relu(bn(conv(x))).numpy())
    assert [name for name, _ in block.named_parameters()] == [
        "conv.weight", "conv.bias", "bn.weight", "bn.bias"]


def test_models_and_simple_ml_import_standalone():
    folder = Path(needle.apps.__file__).parent
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from models import *; from simple_ml import *; from mnist_cnn import *; "
            "print(ResNet9.__name__, ConvBN.__name__, epoch_general_cifar10.__name__, "
            "train_cifar10.__name__, evaluate_cifar10.__name__, MNISTConvNet.__name__)")
    out = subprocess.run([sys.executable, "-c", code, str(folder)], check=True,
                         capture_output=True, text=True, cwd="/")
    assert out.stdout.split() == ["ResNet9", "ConvBN", "epoch_general_cifar10",
                                  "train_cifar10", "evaluate_cifar10", "MNISTConvNet"]


# ----- MNISTConvNet: needle-train's --model cnn -----------------------------------------------


def test_mnist_conv_net_shapes_parameters_and_layers(device):
    from needle.apps.mnist_cnn import MNISTConvNet

    np.random.seed(0)
    net = MNISTConvNet(device=device)
    # three 3x3 ConvBN blocks (16, 32, 64 channels) and Linear(64 * 3 * 3, 10)
    convs = [(1, 16), (16, 32), (32, 64)]
    expected = sum(9 * a * b + b + 2 * b for a, b in convs) + 64 * 9 * 10 + 10
    assert n_params(net) == expected == 29_290
    x = np.random.rand(5, 784).astype(np.float32)
    flat = net(ndl.Tensor(x, device=device))
    nchw = net(ndl.Tensor(x.reshape(5, 1, 28, 28), device=device))
    assert flat.shape == (5, 10)
    np.testing.assert_array_equal(flat.numpy(), nchw.numpy())
    flat.sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    assert repr(net).startswith("MNISTConvNet(widths=(16, 32, 64)")


# ----- simple_ml: epoch_general_cifar10, train_cifar10, evaluate_cifar10 -----------------------


def tiny_net(device=None):
    """A small conv net on (N, 3, 32, 32): milliseconds per batch where ResNet9 takes ten."""
    return nn.Sequential(nn.Conv(3, 4, 3, stride=4, device=device),
                         nn.BatchNorm2d(4, device=device), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 8 * 8, 10, device=device))


def fake_cifar(n, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.random((n, 3, 32, 32)).astype(dtype), rng.integers(0, 10, n).astype(np.uint8)


def loader(X, y, batch_size=8, shuffle=False):
    """Batches on the cpu: the loops move them to the model's device."""
    return ndl.data.DataLoader(ndl.data.NDArrayDataset(X, y), batch_size=batch_size,
                               shuffle=shuffle)


def host_params(model):
    return [p.numpy().copy() for p in model.parameters()]


def test_eval_epoch_returns_accuracy_and_batch_weighted_loss(device):
    X, y = fake_cifar(30)
    np.random.seed(0)
    model = tiny_net(device)
    before = host_params(model)
    acc, loss = simple_ml.epoch_general_cifar10(loader(X, y), model)
    assert type(acc) is float and type(loss) is float
    assert 0.0 <= acc <= 1.0 and loss > 0
    assert not model.training
    for p, q in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), q)  # no optimizer: nothing changes
    # recomputed with numpy from the logits: batches of 8, 8, 8, 6 weighted by their size
    logits = model(ndl.Tensor(X, device=device)).numpy().astype(np.float64)
    assert acc == np.sum(logits.argmax(axis=1) == y) / 30
    losses = [np_softmax_loss(logits[s:s + 8], y[s:s + 8]) * len(y[s:s + 8])
              for s in range(0, 30, 8)]
    assert loss == pytest.approx(sum(losses) / 30, rel=1e-5)


def test_training_epoch_changes_the_parameters_in_train_mode(device):
    X, y = fake_cifar(16)
    np.random.seed(0)
    model = tiny_net(device)
    model.eval()
    before = host_params(model)
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)
    acc, loss = simple_ml.epoch_general_cifar10(loader(X, y), model, opt=opt)
    assert model.training and 0.0 <= acc <= 1.0 and loss > 0
    changed = [not np.array_equal(p.numpy(), q) for p, q in zip(model.parameters(), before)]
    assert all(changed)


def test_float64_images_become_float32_on_the_models_device(device):
    X, y = fake_cifar(10, dtype=np.float64)
    np.random.seed(0)
    model = tiny_net(device)
    acc32, loss32 = simple_ml.evaluate_cifar10(model, loader(X.astype(np.float32), y))
    assert simple_ml.evaluate_cifar10(model, loader(X, y)) == (acc32, loss32)


def test_epoch_seeds_numpy_with_4():
    X, y = fake_cifar(4)
    model = tiny_net()
    np.random.seed(0)
    simple_ml.epoch_general_cifar10(loader(X, y), model)  # eval, no shuffle: no draws
    assert np.random.rand() == np.random.RandomState(4).rand()


def test_evaluate_is_one_eval_epoch_with_a_fresh_loss():
    X, y = fake_cifar(12)
    model = tiny_net()
    made = []

    class CountingLoss(nn.SoftmaxLoss):
        def __init__(self):
            super().__init__()
            made.append(self)

    result = simple_ml.evaluate_cifar10(model, loader(X, y, batch_size=5), loss_fn=CountingLoss)
    assert len(made) == 1 and not model.training
    assert result == simple_ml.epoch_general_cifar10(loader(X, y, batch_size=5), model)


def test_train_cifar10_passes_lr_and_weight_decay_to_the_optimizer():
    X, y = fake_cifar(8)
    seen = {}

    class RecordingSGD(ndl.optim.SGD):
        def __init__(self, params, **kwargs):
            seen.update(kwargs)
            super().__init__(params, **kwargs)

    simple_ml.train_cifar10(tiny_net(), loader(X, y), optimizer=RecordingSGD, lr=0.05,
                            weight_decay=0.01)
    assert seen == {"lr": 0.05, "weight_decay": 0.01}
    with pytest.raises(ValueError, match="n_epochs must be at least 1"):
        simple_ml.train_cifar10(tiny_net(), loader(X, y), n_epochs=0)


def learnable_cifar(n=32, seed=0):
    """Class c is fixed random pattern c plus a little noise: easy to learn."""
    rng = np.random.default_rng(seed)
    patterns = rng.standard_normal((10, 3, 32, 32))
    y = np.arange(n) % 10
    X = patterns[y] + 0.1 * rng.standard_normal((n, 3, 32, 32))
    return X.astype(np.float32), y.astype(np.uint8)


def test_train_cifar10_learns_a_tiny_problem_with_resnet9():
    X, y = learnable_cifar()
    np.random.seed(0)
    model = ResNet9()
    data = loader(X, y, batch_size=8, shuffle=True)
    _, first_loss = simple_ml.train_cifar10(model, data, n_epochs=1)
    acc, last_loss = simple_ml.train_cifar10(model, data, n_epochs=4, lr=0.003)
    assert last_loss < first_loss / 2 and acc >= 0.8, (first_loss, last_loss, acc)


def test_train_cifar10_is_deterministic():
    X, y = learnable_cifar(16)

    def run():
        np.random.seed(0)
        model = tiny_net()
        out = simple_ml.train_cifar10(model, loader(X, y, shuffle=True), n_epochs=2)
        return out, host_params(model)

    (out1, params1), (out2, params2) = run(), run()
    assert out1 == out2
    for p, q in zip(params1, params2):
        np.testing.assert_array_equal(p, q)


# ----- LanguageModel and simple_ml's PTB loops -------------------------------------------------


@pytest.mark.parametrize("seq_model", ["rnn", "lstm"])
def test_language_model_draws_embedding_then_sequence_model_then_linear(seq_model, device):
    from needle.apps.models import LanguageModel

    np.random.seed(5)
    lm = LanguageModel(6, 11, 4, num_layers=2, seq_model=seq_model, device=device)
    np.random.seed(5)
    embedding = nn.Embedding(11, 6, device=device)
    stack = (nn.RNN if seq_model == "rnn" else nn.LSTM)(6, 4, 2, device=device)
    linear = nn.Linear(4, 11, device=device)
    for mine, ref in zip(lm.parameters(), [*embedding.parameters(), *stack.parameters(),
                                          *linear.parameters()]):
        np.testing.assert_array_equal(mine.numpy(), ref.numpy())
    x = ndl.Tensor(np.array([[1, 2, 3], [4, 5, 10]]), device=device, dtype="float32")
    logits, h = lm(x)
    assert logits.shape == (6, 11)
    h_n = h[0] if seq_model == "lstm" else h
    assert h_n.shape == (2, 3, 4)


@pytest.mark.parametrize("seq_model", ["rnn", "lstm", "transformer"])
@pytest.mark.parametrize("seq_len", [1, 2, 5])
def test_language_model_gives_every_parameter_a_gradient(seq_model, seq_len, device):
    """After output.backward() every parameter has a .grad, however short the sequence
    (the zero initial state is multiplied by W_hh, as in the course and PyTorch)."""
    from needle.apps.models import LanguageModel

    np.random.seed(6)
    width = 8 if seq_model == "transformer" else 6
    lm = LanguageModel(width, 11, 8, num_layers=2, seq_model=seq_model, seq_len=5,
                       device=device)
    tokens = np.random.randint(0, 11, (seq_len, 3))
    logits, _ = lm(ndl.Tensor(tokens, device=device, dtype="float32"))
    ndl.ops.summation(logits).backward()
    missing = [name for name, p in lm.named_parameters() if p.grad is None]
    assert missing == []


def test_a_transformer_language_model_may_have_a_wider_mlp_than_its_embedding(device):
    """(A course-port audit.) The hw4_extra notebook's LanguageModel(20, vocab,
    hidden_size=32, seq_model='transformer') was refused: the transformer keeps the
    embedding width (hidden_size is its MLP's), so the Linear layer reads embedding_size."""
    from needle.apps.models import LanguageModel

    np.random.seed(0)
    lm = LanguageModel(20, 11, hidden_size=32, num_layers=1, seq_model="transformer",
                       seq_len=20, device=device)
    assert lm.linear.weight.shape == (20, 11)
    logits, _ = lm(ndl.Tensor(np.random.randint(0, 11, (5, 3)), device=device,
                              dtype="float32"))
    assert logits.shape == (15, 11)
    ndl.ops.summation(logits).backward()
    assert all(p.grad is not None for p in lm.parameters())


def test_language_model_refuses_other_sequence_models():
    from needle.apps.models import LanguageModel

    with pytest.raises(ValueError, match="seq_model must be 'rnn', 'lstm' or 'transformer', "
                                         "got 'gru'"):
        LanguageModel(4, 10, 4, seq_model="gru")


def ptb_data(n_tokens=161, bs=4, vocab=7):
    """Batchified token ids (nbatch, bs) as course code makes them, float32."""
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, vocab, n_tokens)
    nbatch = n_tokens // bs
    return tokens[:nbatch * bs].reshape(bs, nbatch).T.astype(np.float32)


def test_epoch_general_ptb_matches_a_recomputation_and_carries_the_state(device):
    from needle.apps.models import LanguageModel

    data = ptb_data()
    np.random.seed(0)
    lm = LanguageModel(5, 7, 6, seq_model="lstm", device=device)
    acc, loss = simple_ml.evaluate_ptb(lm, data, seq_len=8, device=device)
    # independently: the same windows, the state carried over, per-token loss averaged
    h, total, correct, count = None, 0.0, 0, 0
    for i in range(0, data.shape[0] - 1, 8):
        n = min(8, data.shape[0] - 1 - i)
        x = ndl.Tensor(data[i:i + n], device=device, dtype="float32")
        y = data[i + 1:i + 1 + n].reshape(-1).astype(np.int64)
        with ndl.no_grad():
            logits, h = lm(x, h)
        z = logits.numpy().astype(np.float64)
        total += np_softmax_loss(z, y) * len(y)
        correct += int((z.argmax(1) == y).sum())
        count += len(y)
    assert acc == pytest.approx(correct / count)
    assert loss == pytest.approx(total / count, rel=1e-5)
    assert not lm.training


def test_train_ptb_learns_and_clips(device, monkeypatch):
    from needle.apps.models import LanguageModel

    data = ptb_data()
    np.random.seed(0)
    lm = LanguageModel(5, 7, 6, seq_model="rnn", device=device)
    clipped = []
    original = nn.utils.clip_grad_norm_
    monkeypatch.setattr(nn.utils, "clip_grad_norm_",
                        lambda params, max_norm: clipped.append(max_norm) or original(params,
                                                                                      max_norm))
    before = simple_ml.evaluate_ptb(lm, data, seq_len=8, device=device)[1]
    simple_ml.train_ptb(lm, data, seq_len=8, n_epochs=3, lr=1.0, clip=0.5, device=device)
    after = simple_ml.evaluate_ptb(lm, data, seq_len=8, device=device)[1]
    assert after < before
    assert clipped and set(clipped) == {0.5}


def test_language_model_names_the_shape_it_expects(device):
    """1-d ids were "not enough values to unpack (expected 2, got 1)"."""
    from needle.apps.models import LanguageModel

    lm = LanguageModel(8, 10, 16, 1, "lstm", device=device)
    with pytest.raises(ValueError, match=r"LanguageModel: expected token ids of shape \(T, B\), "
                                         r"found \(3,\)"):
        lm(ndl.Tensor(np.array([1, 2, 3]), device=device))

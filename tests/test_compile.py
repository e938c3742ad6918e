"""ndl.compile: compiled steps are bit-equal to eager steps (every recipe, every device).

Each recipe is built twice from one numpy seed, and the same batches are fed to an eager step
and to its compiled twin (recorded at the first call, replayed after): losses, parameters,
buffers (BatchNorm's running statistics), optimizer state and the device generator's next
draw must be equal to the bit. Every recipe trains with Dropout > 0, so the replayed draws
must come from the same generator in the same order. The limits (what raises, what
retraces) are in test_compile_limits.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.apps.mlp_resnet import MLPResNet
from needle.apps.mnist_cnn import MNISTConvNet
from needle.apps.models import LanguageModel, ResNet9

STEPS = 20
# ResNet9 (431,946 parameters, 32x32 images) is the slow one on torch's cpu convolutions:
# 6 steps there, everywhere (the first records the program, the other 5 replay it; the
# program is the same at every replay). jax's time is its compilation of each op's shapes,
# paid once whatever the number of steps.
STEPS_OF = {"resnet9": 6}


def _recipe(name: str, device):
    """(model, optimizer, batches, language model?) of a small recipe, seeded."""
    np.random.seed(0)
    rng = np.random.default_rng(1)
    if name == "mlp":
        model = MLPResNet(12, hidden_dim=16, num_blocks=2, num_classes=5, drop_prob=0.3,
                          device=device)
        xs = rng.standard_normal((STEPS, 8, 12)).astype(np.float32)
        ys = rng.integers(0, 5, (STEPS, 8))
    elif name == "cnn":
        model = MNISTConvNet(widths=(2, 3), num_classes=4, device=device)
        xs = rng.standard_normal((STEPS, 3, 784)).astype(np.float32)
        ys = rng.integers(0, 4, (STEPS, 3))
    elif name == "resnet9":
        model = ResNet9(device=device)
        xs = rng.standard_normal((STEPS, 2, 3, 32, 32)).astype(np.float32)
        ys = rng.integers(0, 10, (STEPS, 2))
    else:  # language models: (T, B) token ids and the next tokens
        kind = {"lstm": "lstm", "transformer": "transformer"}[name]
        model = LanguageModel(8, 11, 8, num_layers=2, seq_model=kind, seq_len=4,
                              device=device)
        for m in model.descendants():  # the transformer's own Dropouts (p=0 by default)
            if isinstance(m, nn.Dropout):
                m.p = 0.2
        tokens = rng.integers(0, 11, (STEPS, 5, 3))
        xs, ys = tokens[:, :4], tokens[:, 1:].reshape(STEPS, -1)
    params = model.parameters()
    opt = (ndl.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3) if name == "cnn"
           else ndl.optim.Adam(params, lr=0.01, weight_decay=1e-3))
    return model, opt, xs, ys, name in ("lstm", "transformer")


def _step_fn(model, opt, lm: bool, create_graph: bool):
    loss_fn, drop = nn.SoftmaxLoss(), nn.Dropout(0.25)

    def step(x, y, h=None):
        opt.reset_grad()
        if lm:
            logits, h = model(x, h)
        else:
            logits = model(x)
        loss = loss_fn(drop(logits), y)
        loss.backward(create_graph=create_graph)
        opt.step()
        if lm:
            return loss, h
        return loss

    return step


def _state(model, opt, device) -> list[np.ndarray]:
    out = [t.numpy() for t in model.state_dict().values()]
    for i in sorted(opt.state):
        out += [device.to_numpy(a) for _, a in sorted(opt.state[i].items())]
    out.append(device.to_numpy(device.random((3,))))  # the generator's next draw
    return out


def _train(name: str, device, compiled: bool, steps: int, create_graph: bool):
    model, opt, xs, ys, lm = _recipe(name, device)
    device.manual_seed(7)
    step = _step_fn(model, opt, lm, create_graph)
    if compiled:
        step = ndl.compile(step)
    losses, h = [], None
    for i in range(steps):
        x = ndl.Tensor(xs[i], device=device, requires_grad=False)
        y = ndl.Tensor(ys[i], device=device, requires_grad=False)
        if lm:
            loss, h = step(x, y, h)
            if name == "lstm":
                h = tuple(t.detach() for t in h)
            else:
                h = None  # the transformer's "state" is zeros
        else:
            loss = step(x, y)
        losses.append(loss.numpy())
    if compiled:
        assert step.captures == (2 if name == "lstm" else 1)  # LSTM: once without h
    return losses, _state(model, opt, device)


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet9", "lstm", "transformer"])
def test_compiled_training_is_bit_equal_to_eager(name, device):
    steps = STEPS_OF.get(name, STEPS)
    create_graph = name in ("mlp", "lstm")  # both backward engines: the course's and the fast
    eager = _train(name, device, False, steps, create_graph)
    compiled = _train(name, device, True, steps, create_graph)
    for i, (a, b) in enumerate(zip(eager[0], compiled[0])):
        assert np.array_equal(a, b), f"loss of step {i}: eager {a}, compiled {b}"
    assert len(eager[1]) == len(compiled[1])
    for i, (a, b) in enumerate(zip(eager[1], compiled[1])):
        assert a.dtype == b.dtype and np.array_equal(a, b), f"state entry {i} differs"
    assert not np.array_equal(eager[0][0], eager[0][-1])  # it trained


def _forward_backward(model, loss_fn, drop):
    def step(x, y):
        loss = loss_fn(drop(model(x)), y)
        loss.backward(create_graph=False)
        return loss

    return step


@pytest.mark.parametrize("kind", ["torch:cuda", "cuda"])
def test_a_cuda_graph_replay_is_bit_equal_to_eager(kind):
    """torch:cuda and cuda with `cuda_graph=True`: a forward and backward (the optimizer
    stepping outside) recorded at the first call, replayed as usual at the second, captured
    as one CUDA graph at the third and replayed as one after (only where the library sees a
    GPU); the Dropouts draw, so the generators must advance as eager's. On cuda the graph's
    products call cuBLAS directly where eager goes through cupy, which may pick another
    kernel: there the graph agrees to float32 rounding (test_cublas_direct.py prints which
    products are bit-equal)."""
    if kind == "torch:cuda":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("no CUDA GPU for torch here")
        device = ndl.backends.torch("cuda")
    else:
        device = ndl.cuda()
        if not device.enabled():
            pytest.skip(device.unavailable_reason())
    results, p = [], 0.25
    for compiled in (False, True):
        model, opt, xs, ys, _ = _recipe("mlp", device)
        for m in model.descendants():
            if isinstance(m, nn.Dropout):
                m.p = p
        device.manual_seed(7)
        step = _forward_backward(model, nn.SoftmaxLoss(), nn.Dropout(p))
        if compiled:
            step = ndl.compile(step, cuda_graph=True)
        losses = []
        for x, y in zip(xs[:8], ys[:8]):
            opt.reset_grad()
            losses.append(step(ndl.Tensor(x, device=device, requires_grad=False),
                               ndl.Tensor(y, device=device, requires_grad=False)).numpy())
            opt.step()
        results.append((losses, _state(model, opt, device)))
        if compiled:
            graphed = next(iter(step.cache.values()))[0][0]
            assert type(graphed).__name__ == "Graphed" and graphed.graph is not None
    for a, b in zip(results[0][0] + results[0][1], results[1][0] + results[1][1]):
        if kind == "cuda" and np.asarray(a).dtype.kind == "f":  # (the generator: exact)
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
        else:
            assert np.array_equal(a, b)


class _FailingCapture:
    """A stand-in for a backends CUDA-graph module whose capture fails midway, as a real one
    does at an operation stream capture refuses: the step's Python has run (replacing
    BatchNorm's running statistics and the gradients), and nothing was written into the
    arrays the graph holds."""

    calls: list = []

    @staticmethod
    def unavailable_reason(device):
        return ""

    @staticmethod
    def copy_into(dst, src):  # the first copy back into a held array: the capture fails
        _FailingCapture.calls.append("copy")
        raise RuntimeError("operation not permitted when stream is capturing")

    @staticmethod
    def clone(array):
        return array.copy()

    class CudaGraph:
        def __init__(self, device, run, generators):
            run()


def test_a_failed_cuda_graph_capture_warns_restores_and_replays_as_usual(monkeypatch):
    """(cpu, with the capture faked) after a capture that fails, the parameters, BatchNorm's
    running statistics and gradients are the ones from before it, a warning names the error,
    and every later call replays as usual: training stays bit-equal to eager."""
    from needle.compiled import cuda_graph

    _FailingCapture.calls.clear()
    device = ndl.cpu()
    results = []
    for compiled in (False, True):
        model, opt, xs, ys, _ = _recipe("mlp", device)
        for m in model.descendants():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
        step = _forward_backward(model, nn.SoftmaxLoss(), nn.Dropout(0.0))
        if compiled:
            monkeypatch.setattr(cuda_graph, "_graphs_of", lambda device: _FailingCapture)
            step = ndl.compile(step, cuda_graph=True)
        losses = []
        for i, (x, y) in enumerate(zip(xs[:5], ys[:5])):
            opt.reset_grad()
            args = (ndl.Tensor(x, device=device, requires_grad=False),
                    ndl.Tensor(y, device=device, requires_grad=False))
            if compiled and i == 2:  # the third call captures
                with pytest.warns(UserWarning, match="capture failed.*stream is capturing"):
                    losses.append(step(*args).numpy())
            else:
                losses.append(step(*args).numpy())
            opt.step()
        results.append((losses, _state(model, opt, device)))
        if compiled:
            graphed = next(iter(step.cache.values()))[0][0]
            assert graphed.failed and graphed.graph is None
    assert _FailingCapture.calls  # the capture's Python did replace the running statistics
    for a, b in zip(results[0][0] + results[0][1], results[1][0] + results[1][1]):
        assert np.array_equal(a, b)


def test_cuda_graph_refused_warns_and_replays_as_usual(device):
    """An optimizer's step inside the step (its Python would be frozen in a graph), or a
    device that is not a GPU's: a warning says why, and the program replays as usual."""
    model, opt, xs, ys, _ = _recipe("mlp", device)
    x, y = (ndl.Tensor(a[0], device=device, requires_grad=False) for a in (xs, ys))
    step = ndl.compile(_step_fn(model, opt, False, False), cuda_graph=True)
    with pytest.warns(UserWarning, match="optimizer's step"):
        step(x, y)
    step(x, y)
    assert step.captures == 1
    if device.kind != "cuda" and not (device.kind == "torch" and "cuda" in str(device.native)):
        step = ndl.compile(_forward_backward(model, nn.SoftmaxLoss(), nn.Dropout(0.25)),
                           cuda_graph=True)
        with pytest.warns(UserWarning, match="not a CUDA device"):
            step(x, y)

"""No host round trips inside a training step, on any device.

After the first step (which may compile, allocate and seed), a step of every recipe makes no
copy between host and device: nothing goes through the device's conversions (`asarray` of
host data, `from_numpy`, `adopt_numpy`, `to_numpy`), and on strict no array is read by
`bool()`, `float()`, `int()`, numpy or DLPack. The device acts as an accelerator here
(`defers_checks`): index checks wait for the next read, as they do on a GPU. On torch:cuda,
PyTorch's own sync debug mode raises on any synchronising call as well.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import needle as ndl
from needle import nn
from needle.apps.mlp_resnet import MLPResNet
from needle.apps.models import LanguageModel, ResNet9


class Transfers:
    """Counts the host <-> device copies made through the device (and strict's arrays)."""

    def __init__(self, device, monkeypatch):
        self.calls: list[str] = []
        for name in ("from_numpy", "adopt_numpy", "to_numpy", "asarray", "rand", "randn"):
            real = getattr(device, name)
            monkeypatch.setattr(device, name, self._counting(name, real))
        if device.kind == "strict":
            import array_api_strict

            cls = type(array_api_strict.asarray(0))
            for name in ("__bool__", "__float__", "__int__", "__index__", "__array__",
                         "__dlpack__"):
                if hasattr(cls, name):
                    monkeypatch.setattr(cls, name, self._counting(name, getattr(cls, name)))
        monkeypatch.setattr(type(device), "defers_checks", True)
        if device.kind in ("cpu", "strict"):
            monkeypatch.setattr(device, "random", self.quiet(device.random))
        self.armed = False

    def quiet(self, real):
        """`real` with counting off: the host devices' training draws are numpy's global
        state (the course's numbers), host arrays by design."""
        def uncounted(*args, **kwargs):
            armed, self.armed = self.armed, False
            try:
                return real(*args, **kwargs)
            finally:
                self.armed = armed
        return uncounted

    def _counting(self, name, real):
        def counted(*args, **kwargs):
            if self.armed:
                self.calls.append(name)
            return real(*args, **kwargs)
        return counted


def recipes(device):
    """name -> (model, optimizer, loss function of the model) with inputs made beforehand."""
    rng = np.random.default_rng(0)

    def labels(n, k):
        return ndl.Tensor(rng.integers(0, k, n), device=device, requires_grad=False)

    def images(*shape):
        return ndl.Tensor(rng.random(shape, dtype=np.float32), device=device,
                          requires_grad=False)

    ndl.manual_seed(0)
    mlp = MLPResNet(12, 8, device=device)
    x_mlp, y_mlp = images(6, 12), labels(6, 10)
    resnet = ResNet9(device=device)
    x_img, y_img = images(2, 3, 32, 32), labels(2, 10)
    lstm = LanguageModel(6, 11, 6, seq_model="lstm", seq_len=5, device=device)
    tf = LanguageModel(8, 11, 8, seq_model="transformer", seq_len=5, device=device)
    tokens = ndl.Tensor(rng.integers(0, 11, (5, 3)), device=device, requires_grad=False)
    y_tok = labels(15, 11)
    loss = nn.SoftmaxLoss()
    return {
        "mlp": (mlp, ndl.optim.Adam(mlp.parameters(), lr=1e-3, weight_decay=1e-3),
                lambda m: loss(m(x_mlp), y_mlp)),
        "resnet9": (resnet, ndl.optim.SGD(resnet.parameters(), lr=0.01, momentum=0.9),
                    lambda m: loss(m(x_img), y_img)),
        "lstm": (lstm, ndl.optim.SGD(lstm.parameters(), lr=4.0),
                 lambda m: loss(m(tokens)[0], y_tok)),
        "transformer": (tf, ndl.optim.Adam(tf.parameters(), lr=1e-3),
                        lambda m: loss(m(tokens)[0], y_tok)),
    }


@pytest.mark.parametrize("recipe", ["mlp", "resnet9", "lstm", "transformer"])
@pytest.mark.parametrize("create_graph", [False, True])
def test_a_training_step_makes_no_host_transfer(recipe, create_graph, device, monkeypatch):
    if device.kind == "strict" and device.index == 0:
        device = ndl.strict(1)  # arrays made without device= land elsewhere and show up
    model, opt, loss_of = recipes(device)[recipe]
    for m in model.descendants():
        if isinstance(m, nn.Dropout):
            m.p = 0.2  # draws every step
    counter = Transfers(device, monkeypatch)
    model.train()

    def step():
        opt.reset_grad()
        loss = loss_of(model)
        loss.backward(create_graph=create_graph)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    step()  # the first step may set things up
    sync_debug = None
    if device.kind == "torch" and device.index.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
        sync_debug = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
    counter.armed = True
    try:
        loss = step()
    finally:
        counter.armed = False
        if sync_debug is not None:
            torch.cuda.set_sync_debug_mode(sync_debug)
    assert counter.calls == [], f"{recipe} on {device}: host transfers {counter.calls}"
    assert math.isfinite(float(loss.numpy()))  # the read after the step is where checks go

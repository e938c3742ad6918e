"""ndl.nn.Module: discovery, modes, state_dict / load_state_dict, to(), repr."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import nn


def T(a, device, dtype="float32") -> ndl.Tensor:
    return ndl.Tensor(np.asarray(a), device=device, dtype=dtype, requires_grad=False)


class Block(nn.Module):
    """A module with parameters in a list, a dict and a tuple, and a shared weight."""

    def __init__(self, device):
        super().__init__()
        self.first = nn.Linear(2, 3, device=device)
        self.layers = [nn.ReLU(), nn.Sequential(nn.Linear(3, 3, device=device))]
        self.heads = {"a": nn.Linear(3, 1, device=device), "norm": nn.BatchNorm1d(3,
                                                                                  device=device)}
        self.pair = (nn.Parameter(ndl.init.ones(2, device=device)), 7)
        self.tied = self.first.weight  # the same Parameter under a second name

    def forward(self, x):
        return self.heads["a"](self.layers[1](self.layers[0](self.first(x))))


def model(device, seed=0) -> nn.Module:
    np.random.seed(seed)
    return nn.Sequential(nn.Linear(3, 4, device=device), nn.ReLU(),
                         nn.Residual(nn.Sequential(nn.Linear(4, 4, device=device),
                                                   nn.BatchNorm1d(4, device=device))),
                         nn.Dropout(0.2), nn.Linear(4, 2, device=device))


def test_parameters_in_insertion_order_each_once(device):
    b = Block(device)
    expected = [b.first.weight, b.first.bias, b.layers[1].modules[0].weight,
                b.layers[1].modules[0].bias, b.heads["a"].weight, b.heads["a"].bias,
                b.heads["norm"].weight, b.heads["norm"].bias, b.pair[0]]
    assert [id(p) for p in b.parameters()] == [id(p) for p in expected]
    assert all(isinstance(p, nn.Parameter) for p in b.parameters())
    assert [n for n, _ in b.named_parameters()] == [
        "first.weight", "first.bias", "layers.1.modules.0.weight", "layers.1.modules.0.bias",
        "heads.a.weight", "heads.a.bias", "heads.norm.weight", "heads.norm.bias", "pair.0"]
    assert [n for n, _ in b.named_buffers()] == ["heads.norm.running_mean",
                                                 "heads.norm.running_var"]


def test_children_and_descendants(device):
    b = Block(device)
    inner = b.layers[1].modules[0]
    assert b._children() == [b.first, b.layers[0], b.layers[1], inner, b.heads["a"],
                             b.heads["norm"]]
    assert b.children() == [b.first, b.layers[0], b.layers[1], b.heads["a"], b.heads["norm"]]
    assert [n for n, _ in b.named_children()] == ["first", "layers.0", "layers.1", "heads.a",
                                                  "heads.norm"]


def test_train_and_eval_reach_every_descendant(device):
    b = Block(device)
    assert b.training and all(m.training for m in b._children())
    assert b.eval() is b
    assert not b.training and not any(m.training for m in b._children())
    b.train()
    assert b.training and all(m.training for m in b._children())


def test_repr_is_pytorch_like(device):
    assert repr(model(device)) == """Sequential(
  (0): Linear(in_features=3, out_features=4, bias=True)
  (1): ReLU()
  (2): Residual(
    (fn): Sequential(
      (0): Linear(in_features=4, out_features=4, bias=True)
      (1): BatchNorm1d(4, eps=1e-05, momentum=0.1)
    )
  )
  (3): Dropout(p=0.2)
  (4): Linear(in_features=4, out_features=2, bias=True)
)"""
    assert repr(nn.Linear(3, 4, bias=False, device=device)) == (
        "Linear(in_features=3, out_features=4, bias=False)")
    assert repr(nn.LayerNorm1d(5, device=device)) == "LayerNorm1d(5, eps=1e-05)"


def test_state_dict_has_parameters_and_buffers_detached(device):
    m = model(device)
    state = m.state_dict()
    assert list(state) == [
        "modules.0.weight", "modules.0.bias", "modules.2.fn.modules.0.weight",
        "modules.2.fn.modules.0.bias", "modules.2.fn.modules.1.weight",
        "modules.2.fn.modules.1.bias", "modules.2.fn.modules.1.running_mean",
        "modules.2.fn.modules.1.running_var", "modules.4.weight", "modules.4.bias"]
    for value in state.values():
        assert type(value) is ndl.Tensor and not value.requires_grad and value.op is None


def test_load_state_dict_into_a_fresh_model(device):
    trained, fresh = model(device, seed=1), model(device, seed=2)
    x = T(np.random.default_rng(0).standard_normal((5, 3)), device)
    trained(x)  # moves the running statistics
    trained.eval()
    fresh.eval()
    params = fresh.parameters()
    state = {k: (v.numpy() if i % 2 else v) for i, (k, v) in
             enumerate(trained.state_dict().items())}  # Tensors and numpy arrays both work
    fresh.load_state_dict(state)
    assert [id(p) for p in fresh.parameters()] == [id(p) for p in params]
    for p in fresh.parameters():
        assert p.dtype == "float32" and p.device == device and isinstance(p, nn.Parameter)
    np.testing.assert_array_equal(fresh(x).numpy(), trained(x).numpy())


def test_load_state_dict_casts_to_the_parameter_dtype(device):
    layer = nn.Linear(2, 2, device=device)
    layer.load_state_dict({"weight": np.eye(2), "bias": np.array([[0.5, 1.0]])})
    assert layer.weight.dtype == "float32" and layer.bias.dtype == "float32"
    np.testing.assert_array_equal(layer.weight.numpy(), np.eye(2))


def test_load_state_dict_reports_every_problem_and_changes_nothing(device):
    m = model(device)
    before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    state = {k: v.numpy() for k, v in model(device, seed=5).state_dict().items()}
    del state["modules.0.bias"]
    state["modules.9.weight"] = np.zeros(3)
    state["modules.4.weight"] = np.zeros((2, 4))
    with pytest.raises(ValueError) as info:
        m.load_state_dict(state)
    message = str(info.value)
    assert "missing keys: ['modules.0.bias']" in message
    assert "unexpected keys: ['modules.9.weight']" in message
    assert "'modules.4.weight': expected (4, 2), found (2, 4)" in message
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    # strict=False tolerates missing and unexpected keys, never a shape mismatch
    with pytest.raises(ValueError, match="shape mismatch") as info:
        m.load_state_dict(state, strict=False)
    assert "missing" not in str(info.value)
    state["modules.4.weight"] = np.zeros((4, 2))
    m.load_state_dict(state, strict=False)
    np.testing.assert_array_equal(m.modules[4].weight.numpy(), np.zeros((4, 2)))
    np.testing.assert_array_equal(m.modules[0].bias.numpy(), before["modules.0.bias"])


def test_to_moves_parameters_and_buffers_in_place(device):
    m = model(ndl.cpu(), seed=3)
    x = np.random.default_rng(1).standard_normal((4, 3))
    m.eval()
    expected = m(T(x, ndl.cpu())).numpy()
    params = m.parameters()
    assert m.to(device) is m
    assert [id(p) for p in m.parameters()] == [id(p) for p in params]
    assert all(t.device == device for t in m.state_dict().values())
    np.testing.assert_allclose(m(T(x, device)).numpy(), expected, rtol=1e-5)


def test_module_without_forward_says_so():
    with pytest.raises(NotImplementedError, match="Block2 does not define forward"):
        type("Block2", (nn.Module,), {})()(1)

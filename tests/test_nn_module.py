"""ndl.nn.Module: discovery, modes, state_dict / load_state_dict, to(), repr."""

from __future__ import annotations

import warnings

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
    assert b.descendants() == [b.first, b.layers[0], b.layers[1], inner, b.heads["a"],
                               b.heads["norm"]]
    assert [n for n, _ in b.named_descendants()] == ["first", "layers.0", "layers.1",
                                                     "layers.1.modules.0", "heads.a",
                                                     "heads.norm"]
    assert b.children() == [b.first, b.layers[0], b.layers[1], b.heads["a"], b.heads["norm"]]
    assert [n for n, _ in b.named_children()] == ["first", "layers.0", "layers.1", "heads.a",
                                                  "heads.norm"]
    assert not hasattr(b, "_children")  # renamed: it returned descendants, not children


def test_shared_and_cyclic_modules_are_walked_once(device):
    shared = nn.Linear(2, 2, device=device)
    outer = nn.Sequential(shared, nn.ReLU(), shared)
    shared.owner = outer  # a back reference: a cycle through the tree
    assert outer.descendants() == [shared, outer.modules[1]]
    assert outer.children() == [shared, outer.modules[1]]
    assert list(outer.state_dict()) == ["modules.0.weight", "modules.0.bias"]
    assert outer.eval() is outer and not shared.training


def test_train_and_eval_reach_every_descendant(device):
    b = Block(device)
    assert b.training and all(m.training for m in b.descendants())
    assert b.eval() is b
    assert not b.training and not any(m.training for m in b.descendants())
    b.train()
    assert b.training and all(m.training for m in b.descendants())


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



def test_repr_lists_a_shared_module_at_each_place(device):
    """As PyTorch: a module held twice is printed at both places; it counts once elsewhere."""
    shared = nn.Linear(2, 2, device=device)
    seq = nn.Sequential(shared, nn.ReLU(), shared)
    assert repr(seq) == """Sequential(
  (0): Linear(in_features=2, out_features=2, bias=True)
  (1): ReLU()
  (2): Linear(in_features=2, out_features=2, bias=True)
)"""
    assert len(seq.parameters()) == 2 and len(seq.children()) == 2
    pair = nn.Module()
    pair.first, pair.second, pair.same = shared, [shared, nn.Tanh()], pair
    assert repr(pair) == """Module(
  (first): Linear(in_features=2, out_features=2, bias=True)
  (second.0): Linear(in_features=2, out_features=2, bias=True)
  (second.1): Tanh()
)"""


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


# ----- buffers ---------------------------------------------------------------------------
class Memo(nn.Module):
    """A layer that keeps its last input as a plain attribute, and a registered count."""

    def __init__(self, device):
        super().__init__()
        self.scale = nn.Parameter(ndl.init.ones(2, device=device))
        self.register_buffer("count", ndl.init.zeros(1, device=device))
        self.register_buffer("cache", ndl.init.zeros(2, device=device), persistent=False)
        self.fixed = ndl.init.ones(2, device=device)  # a plain Tensor attribute

    def forward(self, x):
        self.last = x
        return x * self.scale


def test_plain_tensor_attributes_are_neither_parameters_nor_buffers(device):
    m = Memo(device)
    m(T(np.ones((3, 2)), device))
    assert [n for n, _ in m.named_parameters()] == ["scale"]
    assert [n for n, _ in m.named_buffers()] == ["count", "cache"]
    assert list(m.state_dict()) == ["scale", "count"]  # no "fixed", no "last"
    m.load_state_dict({"scale": np.full(2, 3.0), "count": np.array([4.0])})  # strict: enough
    np.testing.assert_array_equal(m.count.numpy(), [4.0])


def test_registered_buffers_load_keep_identity_and_move(device):
    m = Memo(ndl.cpu())
    count, cache, fixed = m.count, m.cache, m.fixed
    m.load_state_dict({"scale": np.full(2, 2.0), "count": np.array([7.0])})
    assert m.count is count and m.count.dtype == "float32"
    assert m.to(device) is m
    assert m.count is count and count.device == device and cache.device == device
    assert fixed.device == ndl.cpu()  # not a buffer: left where it was
    np.testing.assert_array_equal(m.state_dict()["count"].numpy(), [7.0])


def test_buffer_reassignment_follows_pytorch(device):
    m = Memo(device)
    m.count = T([5.0], device)  # a new Tensor: still the buffer
    np.testing.assert_array_equal(m.state_dict()["count"].numpy(), [5.0])
    with pytest.raises(TypeError, match=r"Memo: cannot assign float to buffer 'count'"):
        m.count = 1.0
    m.count = None  # an empty slot: not in state_dict, but still registered
    assert list(m.state_dict()) == ["scale"]
    m.count = T([1.0], device)
    assert list(m.state_dict()) == ["scale", "count"]
    m.count = nn.Parameter(T([2.0], device))  # a Parameter replaces the buffer
    assert [n for n, _ in m.named_parameters()] == ["scale", "count"]
    assert [n for n, _ in m.named_buffers()] == ["cache"]
    del m.cache
    m.cache = T([0.0, 0.0], device)  # after del, a plain attribute again
    assert [n for n, _ in m.named_buffers()] == []


@pytest.mark.parametrize("name, value, error, message", [
    (3, None, TypeError, r"the name must be a str, found int"),
    ("a.b", None, ValueError, r"must be an identifier \(no dots\), found 'a.b'"),
    ("", None, ValueError, r"must be an identifier"),
    ("scale", None, ValueError, r"Memo already has an attribute 'scale'"),
    ("train", None, ValueError, r"already has an attribute 'train'"),
    ("x", np.zeros(2), TypeError, r"buffer 'x' must be a Tensor or None, found ndarray"),
    ("x", "param", TypeError, r"'x' is a Parameter; assign Parameters as attributes"),
])
def test_register_buffer_rejects_bad_names_and_values(name, value, error, message, device):
    m = Memo(device)
    if isinstance(value, str):
        value = nn.Parameter(T([1.0], device))
    with pytest.raises(error, match=message):
        m.register_buffer(name, value)
    m.register_buffer("count", T([9.0], device))  # re-registering a buffer replaces it
    np.testing.assert_array_equal(m.count.numpy(), [9.0])


def test_register_buffer_works_without_module_init(device):
    class Bare(nn.Module):
        def __init__(self):  # the course's code sometimes skips super().__init__()
            self.register_buffer("stat", ndl.init.ones(2, device=device))

    assert list(Bare().state_dict()) == ["stat"]


def test_batchnorm_running_stats_are_buffers_restored_in_place(device):
    bn = nn.BatchNorm1d(3, device=device)
    mean, var = bn.running_mean, bn.running_var
    assert bn.buffers() == [mean, var]
    bn.last = T(np.ones((2, 3)), device)  # course code may keep Tensors around: not state
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var"]
    bn.load_state_dict({"weight": np.ones(3), "bias": np.zeros(3),
                        "running_mean": np.array([1.0, 2.0, 3.0]), "running_var": np.ones(3)})
    assert bn.running_mean is mean and bn.running_var is var
    np.testing.assert_array_equal(mean.numpy(), [1.0, 2.0, 3.0])
    bn(T(np.arange(6.0).reshape(2, 3), device))  # training updates the same Tensors
    assert bn.running_mean is mean
    np.testing.assert_allclose(mean.numpy(), [1.05, 2.05, 3.05], rtol=1e-6)


def test_deepcopy_and_pickle_keep_buffers_separate(device):
    import copy
    import pickle

    m = Memo(device)
    twin = copy.deepcopy(m)
    twin.count.data = T([3.0], device)
    assert [n for n, _ in twin.named_buffers()] == ["count", "cache"]
    np.testing.assert_array_equal(m.count.numpy(), [0.0])
    np.testing.assert_array_equal(twin.state_dict()["count"].numpy(), [3.0])
    bn = nn.BatchNorm1d(2, device=device)
    bn.running_mean.data = T([1.0, 2.0], device)
    copied = pickle.loads(pickle.dumps(bn))
    assert [n for n, _ in copied.named_buffers()] == ["running_mean", "running_var"]
    assert copied.running_mean is not bn.running_mean
    np.testing.assert_array_equal(copied.running_mean.numpy(), [1.0, 2.0])
    copied(T(np.ones((2, 2)), device))  # updates the copy's statistics only
    np.testing.assert_array_equal(bn.running_mean.numpy(), [1.0, 2.0])


def test_a_parameter_is_true_as_in_the_course(device):
    """Course code tests `if self.bias:`; a Tensor's truth is PyTorch's (its value, or an
    error for several elements), which skipped a one-element bias of 0 (Linear(n, 1)) and
    raised for the others. A Parameter is always true, as the course's Tensors are."""
    for shape in ((1, 1), (1, 4)):
        bias = ndl.nn.Parameter(ndl.init.zeros(*shape, device=device))
        assert bias
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(ndl.init.zeros(1, 4, device=device))
    assert not ndl.init.zeros(1, 1, device=device)



def test_a_tensor_over_a_parameter_warns(device):
    """`layer.weight = layer.weight.detach()` (a plain Tensor) silently took the weight out
    of parameters() and state_dict(): untrained and unsaved. The course's hw4 tests load
    PyTorch's weights this way (`cell.W_ih = ndl.Tensor(...)`), so it is allowed, where
    PyTorch raises, with a warning that says what it does."""
    lin = nn.Linear(3, 2, device=device)
    new = lin.weight.detach() * 2.0
    with pytest.warns(UserWarning, match=r"Linear.weight: a plain Tensor replaces a Parameter, "
                                         r"so it leaves parameters\(\) and state_dict\(\)"):
        lin.weight = new
    assert lin.weight is new and [n for n, _ in lin.named_parameters()] == ["bias"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lin.weight = nn.Parameter(new)  # a Parameter, or None, is quiet
        lin.bias = None
    assert [n for n, _ in lin.named_parameters()] == ["weight"]


def test_module_to_a_device_name_is_a_type_error():
    with pytest.raises(TypeError, match="device must be a needle Device .* got str 'cpu'"):
        nn.Linear(2, 2).to("cpu")


def test_named_modules_apply_requires_grad_and_zero_grad(device):
    """PyTorch's names: named_modules() starts with ("", self); apply() visits children
    before their parent, in order; requires_grad_(False) freezes; zero_grad() clears."""
    model = nn.Sequential(nn.Linear(2, 3, device=device),
                          nn.Sequential(nn.ReLU(), nn.Linear(3, 1, device=device)))
    names = [n for n, _ in model.named_modules()]
    assert names == ["", "modules.0", "modules.1", "modules.1.modules.0", "modules.1.modules.1"]
    seen = []
    assert model.apply(lambda m: seen.append(type(m).__name__)) is model
    assert seen == ["Linear", "ReLU", "Linear", "Sequential", "Sequential"]
    x = ndl.Tensor(np.ones((4, 2), dtype=np.float32), device=device, requires_grad=False)
    model(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=False)  # PyTorch's zeros
    assert all(p.grad is not None and not p.grad.numpy().any() for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(TypeError, match="Sequential: requires_grad must be True or False"):
        model.requires_grad_("no")  # (a string is true to Python)
    assert model.requires_grad_(False) is model
    assert not any(p.requires_grad for p in model.parameters())
    assert not model(x).requires_grad

"""PyTorch's nn names: ModuleList, ModuleDict, CrossEntropyLoss, MSELoss and Flatten's
start_dim/end_dim."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import nn


def T(a, device, dtype="float32", requires_grad=False) -> ndl.Tensor:
    return ndl.Tensor(np.asarray(a), device=device, dtype=dtype, requires_grad=requires_grad)


class Stack(nn.Module):
    """Linear layers in a ModuleList, heads in a ModuleDict."""

    def __init__(self, device, sizes=(3, 4, 2)):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(a, b, device=device)
                                     for a, b in zip(sizes, sizes[1:])])
        self.heads = nn.ModuleDict({"a": nn.Linear(sizes[-1], 2, device=device),
                                    "b": nn.Linear(sizes[-1], 1, device=device)})

    def forward(self, x):
        for layer in self.layers:
            x = ndl.ops.relu(layer(x))
        return self.heads["a"](x)


def _numpy_forward(model, x):
    """Stack's forward in numpy, from its parameters (Linear: x W + b, W of shape (in, out))."""
    for layer in model.layers:
        x = np.maximum(x @ layer.weight.numpy() + layer.bias.numpy().reshape(-1), 0)
    head = model.heads["a"]
    return x @ head.weight.numpy() + head.bias.numpy().reshape(-1)


# ----- ModuleList ----------------------------------------------------------------------------
def test_module_list_is_a_list_of_modules(device):
    a, b, c, d = (nn.Linear(2, 2, device=device) for _ in range(4))
    ml = nn.ModuleList([a, b])
    assert len(ml) == 2 and ml[0] is a and ml[-1] is b and list(ml) == [a, b]
    assert ml.append(c) is ml and list(ml) == [a, b, c]
    ml.extend([d])
    ml.insert(1, nn.ReLU())
    assert [type(m).__name__ for m in ml] == ["Linear", "ReLU", "Linear", "Linear", "Linear"]
    ml[1] = nn.Tanh()
    assert isinstance(ml[1], nn.Tanh)
    part = ml[1:4]
    assert isinstance(part, nn.ModuleList) and list(part) == [ml[1], b, c]
    del ml[1]
    assert list(ml) == [a, b, c, d]
    ml[1:3] = [c, b]
    assert list(ml) == [a, c, b, d]
    assert ml.pop() is d and list(ml) == [a, c, b]
    ml.insert(-10, d)  # as a list's insert: at the front
    assert list(ml) == [d, a, c, b]
    assert len(nn.ModuleList()) == 0 and list(nn.ModuleList(None)) == []
    assert ml[np.int64(1)] is a
    joined = ml + nn.ModuleList([a])
    assert isinstance(joined, nn.ModuleList) and list(joined) == [d, a, c, b, a]
    assert list(ml) == [d, a, c, b]
    ml += [c]
    assert list(ml) == [d, a, c, b, c]


def test_module_list_errors(device):
    lin = nn.Linear(2, 2, device=device)
    with pytest.raises(TypeError, match="ModuleList: item 1 must be a Module, found int"):
        nn.ModuleList([lin, 3])
    ml = nn.ModuleList([lin])
    with pytest.raises(TypeError, match="must be a Module, found str"):
        ml.append("relu")
    with pytest.raises(TypeError, match="must be a Module, found Parameter"):
        ml[0] = lin.weight
    with pytest.raises(TypeError, match="must be a Module, found NoneType"):
        ml.insert(0, None)
    with pytest.raises(TypeError, match="must be a Module, found float"):
        ml.extend([nn.ReLU(), 1.0])
    assert list(ml) == [lin]  # nothing added by the failed extend
    with pytest.raises(IndexError, match="index 1 out of range for 1 modules"):
        ml[1]
    with pytest.raises(IndexError, match="index -2"):
        ml[-2] = nn.ReLU()
    with pytest.raises(TypeError, match="integers or slices, found str"):
        ml["0"]
    with pytest.raises(NotImplementedError, match="ModuleList does not define forward"):
        ml(T([[1.0, 2.0]], device))


def test_module_list_parameters_modes_and_keys_as_pytorch(device):
    torch = pytest.importorskip("torch")
    model = Stack(device)
    shared = model.layers[0]
    model.layers.append(shared)  # the same module twice: its parameters once
    names = [n for n, _ in model.named_parameters()]
    assert names == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                     "heads.a.weight", "heads.a.bias", "heads.b.weight", "heads.b.bias"]
    assert len(model.parameters()) == len({id(p) for p in model.parameters()}) == 8
    expected = [p for m in (*model.layers[:2], model.heads["a"], model.heads["b"])
                for p in (m.weight, m.bias)]
    assert all(p is q for p, q in zip(model.parameters(), expected))

    ref = torch.nn.Module()  # PyTorch's keys for the same structure
    ref.layers = torch.nn.ModuleList([torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)])
    ref.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 2), "b": torch.nn.Linear(2, 1)})
    assert list(model.state_dict()) == list(ref.state_dict())
    assert [n for n, _ in model.named_children()] == ["layers", "heads"]

    model.eval()
    assert not model.layers.training and not any(m.training for m in model.descendants())
    model.layers.train()
    assert all(m.training for m in model.layers) and not model.heads["b"].training


def test_containers_move_with_to(device):
    model = Stack(ndl.cpu())
    model.to(device)
    assert all(p.device == device for p in model.parameters())
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(model(T(x, device)).numpy(), _numpy_forward(model, x),
                               rtol=1e-5, atol=1e-6)


def test_containers_state_dict_round_trip(device):
    np.random.seed(0)
    src = Stack(device)
    np.random.seed(1)
    dst = Stack(device)
    x = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    assert not np.allclose(src(T(x, device)).numpy(), dst(T(x, device)).numpy())
    dst.load_state_dict(src.state_dict())
    np.testing.assert_array_equal(src(T(x, device)).numpy(), dst(T(x, device)).numpy())
    state = src.state_dict()
    del state["layers.1.bias"]
    with pytest.raises(ValueError, match=r"missing keys: \['layers.1.bias'\]"):
        dst.load_state_dict(state)


def test_container_repr_as_pytorch():
    ml = nn.ModuleList([nn.ReLU(), nn.ModuleDict({"t": nn.Tanh()})])
    assert repr(ml) == ("ModuleList(\n  (0): ReLU()\n  (1): ModuleDict(\n    (t): Tanh()\n"
                        "  )\n)")
    assert repr(nn.ModuleList()) == "ModuleList()"


# ----- ModuleDict ----------------------------------------------------------------------------
def test_module_dict_is_a_dict_of_modules(device):
    a, b, c = (nn.Linear(2, 2, device=device) for _ in range(3))
    md = nn.ModuleDict({"a": a, "b": b})
    assert list(md) == md.keys() == ["a", "b"] and md.values() == [a, b] and len(md) == 2
    assert "a" in md and "c" not in md and 1 not in md and md["b"] is b
    md["c"] = c
    md["a"] = nn.ReLU()  # an old key keeps its place
    assert md.keys() == ["a", "b", "c"] and isinstance(md["a"], nn.ReLU)
    assert [n for n, _ in md.named_parameters()] == ["b.weight", "b.bias", "c.weight",
                                                      "c.bias"]
    del md["b"]
    assert md.pop("c") is c and md.items() == [("a", md["a"])]
    md.update([("x", a), ("y", b)])
    assert md.keys() == ["a", "x", "y"]
    other = nn.ModuleDict(nn.ModuleDict({"z": c}))  # another ModuleDict, as a mapping
    md.update(other)
    assert md.keys() == ["a", "x", "y", "z"] and md["z"] is c
    md.clear()
    assert len(md) == 0 and md.parameters() == []
    device_key = nn.ModuleDict({"device": a})  # an attribute name `to()` uses, no attribute here
    device_key.to(device)
    assert device_key["device"] is a


def test_module_dict_errors(device):
    lin = nn.Linear(2, 2, device=device)
    with pytest.raises(TypeError, match="ModuleDict keys must be strings, found int"):
        nn.ModuleDict({1: lin})
    with pytest.raises(TypeError, match="the value for 'a' must be a Module, found list"):
        nn.ModuleDict({"a": [lin]})
    md = nn.ModuleDict({"a": lin})
    for bad in ("train", "training", "forward", "_buffers"):  # (PyTorch: KeyError too)
        with pytest.raises(KeyError, match=f"'{bad}' is an attribute of ModuleDict"):
            md[bad] = nn.ReLU()
    for bad in ("a.b", ""):
        with pytest.raises(KeyError, match="non-empty and contain no '.'"):
            md[bad] = nn.ReLU()
    with pytest.raises(KeyError):
        md["missing"]
    with pytest.raises(KeyError):
        del md["missing"]
    with pytest.raises(TypeError, match=r"expected \(key, Module\) pairs, found str"):
        md.update(["ab"])
    assert md.keys() == ["a"] and md.training  # unchanged by the refused keys


# ----- the losses ----------------------------------------------------------------------------
def _logits_and_labels(device, n=6, k=4, seed=0):
    rng = np.random.default_rng(seed)
    z = (rng.standard_normal((n, k)) * 3).astype(np.float32)
    y = rng.integers(0, k, n)
    return z, y


def _numpy_cross_entropy(z, y):
    z = z.astype(np.float64)
    shifted = z - z.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(y)), y], np.exp(logp)


def test_cross_entropy_mean_is_softmax_loss_to_the_bit(device):
    z, y = _logits_and_labels(device)
    assert issubclass(nn.CrossEntropyLoss, nn.SoftmaxLoss)
    outs, grads = [], []
    for loss_fn in (nn.SoftmaxLoss(), nn.CrossEntropyLoss()):
        x = T(z, device, requires_grad=True)
        loss = loss_fn(x, T(y, device, dtype="int64"))
        loss.backward()
        outs.append(loss.numpy())
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(grads[0], grads[1])
    np.testing.assert_allclose(outs[1], _numpy_cross_entropy(z, y)[0].mean(), rtol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_reductions_match_numpy(reduction, device):
    z, y = _logits_and_labels(device)
    per_sample, probs = _numpy_cross_entropy(z, y)
    onehot = np.eye(z.shape[1])[y]
    want = {"mean": per_sample.mean(), "sum": per_sample.sum(), "none": per_sample}[reduction]
    x = T(z, device, requires_grad=True)
    loss = nn.CrossEntropyLoss(reduction=reduction)(x, T(y, device, dtype="int64"))
    assert loss.shape == (() if reduction != "none" else (len(y),))
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-5, atol=1e-6)
    # d/dz of sum(w_i loss_i) = w_i (softmax(z_i) - onehot(y_i))
    weights = np.linspace(0.5, 2.0, len(y)).astype(np.float32)
    if reduction == "none":
        (loss * T(weights, device)).sum().backward()
    else:
        loss.backward()
    scale = {"mean": np.full(len(y), 1 / len(y)), "sum": np.ones(len(y)), "none": weights}
    np.testing.assert_allclose(x.grad.numpy(), scale[reduction][:, None] * (probs - onehot),
                               rtol=1e-5, atol=1e-6)


def test_cross_entropy_per_sample_with_masked_logits(device):
    # a -inf logit of another class (a mask) is no NaN: -inf * 0 was, in logsoftmax * onehot
    z = np.array([[0.0, -np.inf, 1.0], [2.0, 0.5, -np.inf]], np.float32)
    y = np.array([0, 1])
    x = T(z, device, requires_grad=True)
    loss = nn.CrossEntropyLoss(reduction="none")(x, T(y, device, "int64"))
    want = [np.log(1 + np.e), np.log(np.exp(2.0) + np.exp(0.5)) - 0.5]  # by hand
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-6)
    loss.sum().backward()
    p = [[1 / (1 + np.e), 0, np.e / (1 + np.e)],
         [np.exp(2) / (np.exp(2) + np.exp(0.5)), np.exp(0.5) / (np.exp(2) + np.exp(0.5)), 0]]
    np.testing.assert_allclose(x.grad.numpy(), np.array(p) - np.eye(3)[y], rtol=1e-6,
                               atol=1e-7)


def test_float16_losses_reduce_in_float32(device):
    # 90,000 squares of 0.5 sum to 22,500 (fine), but the count is inf as a float16; a sum
    # over 70,000 samples of log 2 is 48,520: a float16 70,000 was inf
    try:
        device.dtype("float16")
    except TypeError:
        pytest.skip(f"{device} has no float16")
    ones = T(np.ones((300, 300)), device, "float16")
    assert float(nn.MSELoss()(ones, ones * 0.5).numpy()) == 0.25
    z, y = T(np.zeros((70000, 2)), device, "float16"), T(np.zeros(70000), device, "int64")
    total = nn.CrossEntropyLoss(reduction="sum")(z, y)
    assert total.dtype == "float16"
    np.testing.assert_allclose(float(total.numpy()), 70000 * np.log(2), rtol=1e-3)


def test_cross_entropy_matches_pytorch(device):
    torch = pytest.importorskip("torch")
    z, y = _logits_and_labels(device, n=5, k=7, seed=3)
    for reduction in ("mean", "sum", "none"):
        ref = torch.nn.CrossEntropyLoss(reduction=reduction)(torch.tensor(z),
                                                             torch.tensor(y))
        got = nn.CrossEntropyLoss(reduction=reduction)(T(z, device), T(y, device, "int64"))
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def test_cross_entropy_errors_and_empty_batch(device):
    for name, value in (("weight", T([1.0, 2.0], device)), ("ignore_index", 0),
                        ("label_smoothing", 0.1), ("size_average", True),
                        ("reduce", False), ("ignore_index", True)):
        with pytest.raises(ValueError, match=f"CrossEntropyLoss: {name}=.* is not supported"):
            nn.CrossEntropyLoss(**{name: value})
    nn.CrossEntropyLoss(weight=None, ignore_index=-100, label_smoothing=0, reduction="mean")
    with pytest.raises(ValueError, match=r"reduction must be one of \('mean', 'sum', "
                                         r"'none'\), found 'avg'"):
        nn.CrossEntropyLoss(reduction="avg")
    loss_fn = nn.CrossEntropyLoss()
    with pytest.raises(ValueError, match="found 'batchmean'"):  # checked when set, too
        loss_fn.reduction = "batchmean"
    z, y = _logits_and_labels(device, n=3, k=2)
    with pytest.raises(ValueError, match="CrossEntropyLoss.*labels"):
        loss_fn(T(z, device), T([0, 1, 2], device, "int64"))  # 2 is no class of 2
    with pytest.raises(ValueError, match=r"CrossEntropyLoss: expected labels of shape \(3,\)"):
        loss_fn(T(z, device), T([0, 1], device, "int64"))
    empty = (T(np.zeros((0, 3)), device), T(np.zeros(0), device, "int64"))
    assert nn.CrossEntropyLoss(reduction="sum")(*empty).numpy() == 0.0  # as PyTorch
    assert np.isnan(nn.CrossEntropyLoss()(*empty).numpy())
    assert nn.CrossEntropyLoss(reduction="none")(*empty).shape == (0,)
    assert repr(nn.CrossEntropyLoss(reduction="sum")) == "CrossEntropyLoss(reduction='sum')"


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_matches_numpy(reduction, device):
    rng = np.random.default_rng(4)
    p, t = (rng.standard_normal((4, 3)).astype(np.float32) for _ in range(2))
    x = T(p, device, requires_grad=True)
    loss = nn.MSELoss(reduction)(x, T(t, device))
    d = p.astype(np.float64) - t
    want = {"mean": (d**2).mean(), "sum": (d**2).sum(), "none": d**2}[reduction]
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-5, atol=1e-7)
    loss.sum().backward()
    scale = 1 / d.size if reduction == "mean" else 1.0
    np.testing.assert_allclose(x.grad.numpy(), 2 * d * scale, rtol=1e-5, atol=1e-7)


def test_mse_loss_matches_pytorch(device):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    p, t = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(2))
    for reduction in ("mean", "sum", "none"):
        ref = torch.nn.MSELoss(reduction=reduction)(torch.tensor(p), torch.tensor(t))
        got = nn.MSELoss(reduction=reduction)(T(p, device), T(t, device))
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-7)


def test_mse_loss_errors(device):
    loss_fn = nn.MSELoss()
    with pytest.raises(ValueError, match=r"prediction of shape \(4, 1\) and target of shape "
                                         r"\(4,\) differ"):
        loss_fn(T(np.zeros((4, 1)), device), T(np.zeros(4), device))
    with pytest.raises(TypeError, match="expected the target as a Tensor, found ndarray"):
        loss_fn(T(np.zeros(4), device), np.zeros(4))
    with pytest.raises(ValueError, match="reduction must be one of"):
        nn.MSELoss("elementwise_mean")
    assert np.isnan(loss_fn(T(np.zeros(0), device), T(np.zeros(0), device)).numpy())
    assert nn.MSELoss("sum")(T(np.zeros(0), device), T(np.zeros(0), device)).numpy() == 0.0


# ----- Flatten(start_dim, end_dim) -----------------------------------------------------------
X4 = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5) / 10 - 6


@pytest.mark.parametrize("args,shape", [((), (2, 60)), ((1, -1), (2, 60)), ((0,), (120,)),
                                        ((2,), (2, 3, 20)), ((0, 1), (6, 4, 5)),
                                        ((-3, -2), (2, 12, 5)), ((1, 2), (2, 12, 5)),
                                        ((3, 3), (2, 3, 4, 5)), ((0, -1), (120,))])
def test_flatten_start_and_end_dims_as_pytorch(args, shape, device):
    layer = nn.Flatten(*args)
    got = layer(T(X4, device))
    assert got.shape == shape
    np.testing.assert_array_equal(got.numpy(), X4.reshape(shape))
    keywords = dict(zip(("start_dim", "end_dim"), args))
    assert nn.Flatten(**keywords)(T(X4, device)).shape == shape


def test_flatten_default_is_the_courses(device):
    # all but the first axis: (N,) becomes (N, 1), where PyTorch's refuses a 1-d input
    assert nn.Flatten()(T(np.arange(3.0), device)).shape == (3, 1)
    assert nn.Flatten()(T(np.ones((4, 2)), device)).shape == (4, 2)
    layer = nn.Flatten()
    assert (layer.start_dim, layer.end_dim) == (1, -1)
    assert repr(layer) == "Flatten(start_dim=1, end_dim=-1)"
    assert repr(nn.Flatten(0, 2)) == "Flatten(start_dim=0, end_dim=2)"
    with pytest.raises(ValueError, match=r"Flatten expects at least 1 dimension"):
        layer(T(np.float32(2.0), device))


def test_flatten_gradient(device):
    from needle.testing import check_gradients
    check_gradients(nn.Flatten(1, 2), X4, device=device)
    check_gradients(nn.Flatten(0, -2), X4, device=device)


def test_flatten_errors_name_flatten(device):
    with pytest.raises(TypeError, match=r"Flatten: start_dim must be an integer, found 1.5"):
        nn.Flatten(1.5)
    with pytest.raises(TypeError, match=r"Flatten: end_dim must be an integer, found True"):
        nn.Flatten(0, True)
    with pytest.raises(ValueError, match="Flatten: start_dim 2 comes after end_dim 1"):
        nn.Flatten(2, 1)
    with pytest.raises(ValueError, match="Flatten: start_dim -1 comes after end_dim -2"):
        nn.Flatten(-1, -2)
    with pytest.raises(TypeError, match=r"Flatten\.__init__\(\) takes from 1 to 3"):
        nn.Flatten(0, 1, 2)
    x = T(X4, device)
    with pytest.raises(ValueError, match=r"Flatten: axis 4 is out of range -4..3 for shape "
                                         r"\(2, 3, 4, 5\)"):
        nn.Flatten(4)(x)
    with pytest.raises(ValueError, match=r"Flatten: start_dim 3 comes after end_dim -2 for "
                                         r"shape \(2, 3, 4, 5\)"):
        nn.Flatten(3, -2)(x)


# ----- ndl.compile -------------------------------------------------------------------------
def _same(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_compiled_step_over_a_module_list_matches_eager(device):
    rng = np.random.default_rng(6)
    batches = [(T(rng.standard_normal((4, 3)), device), T(rng.integers(0, 2, 4), device,
                "int64"), T(rng.standard_normal((4, 4)), device)) for _ in range(4)]
    results = []
    for compiled in (False, True):
        np.random.seed(0)
        model = Stack(device)
        opt = ndl.optim.SGD(model.parameters(), lr=0.1)

        def step(x, y, t, model=model, opt=opt):
            opt.reset_grad()
            loss = nn.CrossEntropyLoss()(model(x), y) + nn.MSELoss()(model.layers[0](x), t)
            loss.backward()
            opt.step()
            return loss
        run = ndl.compile(step) if compiled else step
        losses = [run(*batch) for batch in batches]
        results.append((losses, model.parameters()))
        if compiled:
            assert run.captures == 1
    _same(results[0][0], results[1][0])
    _same(results[0][1], results[1][1])


def test_replacing_an_item_after_recording_records_again(device):
    """An item replaced (or added) after the step was recorded: the replay would run the old
    module's operations; the container's guard makes the next call record again."""
    np.random.seed(0)
    model = Stack(device)
    x = T(np.random.default_rng(7).standard_normal((2, 3)), device)
    step = ndl.compile(lambda x: model(x))
    _same([step(x), step(x)], [model(x)] * 2)
    assert step.captures == 1
    model.layers[1] = nn.Linear(4, 2, device=device)  # new weights
    out = step(x)
    np.testing.assert_allclose(out.numpy(), _numpy_forward(model, x.numpy()), rtol=1e-5,
                               atol=1e-6)
    _same([out, step(x)], [model(x)] * 2)
    assert step.captures == 2
    model.layers.insert(1, nn.Linear(4, 4, device=device))
    _same([step(x)], [model(x)])
    model.heads["a"] = nn.Linear(2, 2, device=device)
    _same([step(x)], [model(x)])
    assert step.captures == 4

    # a container the step only reads (never calls), held by its closure
    layers = nn.ModuleList([nn.Linear(3, 3, device=device), nn.ReLU()])

    def chain(x):
        for layer in layers:
            x = layer(x)
        return x
    run = ndl.compile(chain)
    _same([run(x), run(x)], [chain(x)] * 2)
    layers[0] = nn.Linear(3, 3, device=device)
    _same([run(x)], [chain(x)])
    layers.append(nn.Tanh())
    _same([run(x)], [chain(x)])
    del layers[2]
    _same([run(x)], [chain(x)])
    assert run.captures == 4

    def joined(x):  # a list made by `+` reads the container too
        for layer in layers + [nn.Tanh()]:
            x = layer(x)
        return x
    run_joined = ndl.compile(joined)
    _same([run_joined(x), run_joined(x)], [joined(x)] * 2)
    layers.append(nn.Linear(3, 3, device=device))
    _same([run_joined(x)], [joined(x)])
    assert run_joined.captures == 2

    relu = nn.ReLU()  # containers built inside the step: recorded once, then replayed

    def built(x):
        stack = nn.ModuleList([relu]).extend([relu])
        stack.insert(0, relu)
        heads = nn.ModuleDict({"r": stack[0]})
        return heads["r"](x) + len(stack)
    again = ndl.compile(built)
    _same([again(x) for _ in range(3)], [built(x)] * 3)
    assert again.captures == 1


def test_containers_copy_and_pickle(device):
    import copy
    import pickle
    model = Stack(device)
    x = T(np.ones((2, 3)), device)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert list(clone.state_dict()) == list(model.state_dict())
        assert clone.layers[0].weight is not model.layers[0].weight
        np.testing.assert_array_equal(clone(x).numpy(), model(x).numpy())


def test_compiled_per_sample_cross_entropy_matches_eager(device):
    # the targets' flat indices are computed on the device inside the recorded step
    rng = np.random.default_rng(7)
    z = rng.standard_normal((5, 4)).astype(np.float32)
    lin = nn.Linear(4, 4, device=device)
    loss_fn = nn.CrossEntropyLoss(reduction="none")

    def step(x, y):
        return loss_fn(lin(x), y)
    run = ndl.compile(step)
    for labels in ([0, 1, 2, 3, 0], [3, 3, 1, 0, 2]):
        x, y = T(z, device), T(labels, device, "int64")
        np.testing.assert_array_equal(run(x, y).numpy(), step(x, y).numpy())
    assert run.captures == 1


def test_a_flatten_pickled_before_its_arguments_existed_still_runs(device):
    # an unpickled Module skips __init__: the course's Flatten had no start_dim or end_dim
    import pickle

    old = nn.Flatten()
    del old.__dict__["start_dim"], old.__dict__["end_dim"]  # (as such a pickle holds it)
    back = pickle.loads(pickle.dumps(old))
    assert back(T(np.ones((2, 3, 4)), device)).shape == (2, 12)
    assert repr(back) == repr(nn.Flatten())

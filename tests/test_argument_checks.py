"""Bad arguments to constructors and setters: a clear TypeError or ValueError naming them,
the same on every device, where they trained nothing, gave NaN or wrong numbers silently,
or failed later in each library's own words (the input-validation audit)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import needle as ndl
from needle import init, nn, optim
from needle.data import DataLoader, NDArrayDataset


def tensor(a, device, dtype="float32"):
    return ndl.Tensor(np.asarray(a), device=device, dtype=dtype)


def other_than(device):
    return ndl.cpu() if device == ndl.strict() else ndl.strict()


# ----- optimizers ----------------------------------------------------------------------------
@pytest.mark.parametrize("make", [optim.SGD, optim.Adam], ids=["sgd", "adam"])
def test_optimizers_refuse_a_single_tensor_a_module_or_a_non_iterable(make, device):
    """list(tensor) walks its rows: SGD(layer.weight) trained nothing (PyTorch refuses it)."""
    layer = nn.Linear(3, 2, device=device)
    name = make.__name__
    for params, kind in ((layer.weight, "Parameter"), (tensor([1.0, 2.0], device), "Tensor"),
                         (layer, "Linear"), (nn.Sequential(layer), "Sequential"),
                         (None, "NoneType"), (3, "int")):
        with pytest.raises(TypeError, match=rf"{name}: the params argument should be an "
                           rf"iterable of Tensors \(.*module.parameters\(\).*\), but got {kind}$"):
            make(params, lr=1.0)
    assert make([layer.weight], lr=1.0).params == [layer.weight]


@pytest.mark.parametrize("make", [optim.SGD, optim.Adam], ids=["sgd", "adam"])
def test_hyperparameters_are_checked_when_assigned_after_construction(make, device):
    """`opt.lr = -1.0` made the weights climb; a string failed at step() in each library's
    words, None with a raw TypeError. The value is unchanged after the error."""
    w = nn.Parameter(np.ones((3, 2)), device=device, dtype="float32")
    opt = make([w], lr=0.5)
    name = make.__name__
    bad = [("lr", -1.0, ValueError, rf"{name}: lr must be >= 0.0, found -1.0"),
           ("lr", float("inf"), ValueError, rf"{name}: lr must be finite, found inf"),
           ("lr", "a", TypeError, rf"{name}: lr must be a real number, found str"),
           ("lr", None, TypeError, rf"{name}: lr must be a real number, found NoneType"),
           ("weight_decay", -0.1, ValueError, rf"{name}: weight_decay must be >= 0.0"),
           ("weight_decay", float("inf"), ValueError, "weight_decay must be finite")]
    bad.append(("momentum", 1.5, ValueError, r"SGD: momentum must be in \[0.0, 1.0\), found 1.5")
               if make is optim.SGD else ("eps", -1e-8, ValueError, "Adam: eps must be >= 0.0"))
    for attr, value, error, message in bad:
        before = getattr(opt, attr)
        with pytest.raises(error, match=message):
            setattr(opt, attr, value)
        assert getattr(opt, attr) == before
    opt.lr = np.float32(0.25)  # numpy's scalars are still taken, as floats
    assert type(opt.lr) is float and opt.lr == 0.25
    with pytest.raises(ValueError, match=rf"{name}: lr must be finite, found inf"):
        make([w], lr=float("inf"))
    w.grad = tensor(np.ones((3, 2)), device)
    opt.step()
    assert np.all(w.numpy() < 1)  # downhill


def test_a_hyperparameter_set_inside_a_compiled_step_is_checked_first(device):
    w = nn.Parameter(np.ones(2), device=device, dtype="float32")
    opt = optim.SGD([w], lr=0.1)

    @ndl.compile
    def step(lr):
        opt.reset_grad()
        (w * w).sum().backward()
        opt.lr = lr
        opt.step()

    with pytest.raises(ValueError, match="SGD: lr must be >= 0.0, found -1.0"):
        step(-1.0)
    step(0.25)
    assert opt.lr == 0.25 and np.allclose(w.numpy(), 0.5)


@pytest.mark.parametrize("make", [optim.SGD, optim.Adam], ids=["sgd", "adam"])
@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_optimizers_refuse_integer_and_bool_parameters(make, dtype, device):
    """jax turned an int32 parameter into float32 silently, the others failed at step()."""
    params = [nn.Parameter(np.ones(2), device=device, dtype="float32"),
              tensor([1, 0], device, dtype)]
    with pytest.raises(TypeError, match=rf"{make.__name__}: parameter 1 has dtype {dtype}: "
                       "only floating-point parameters"):
        make(params, lr=0.1)


# ----- normalisation -------------------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda **kw: nn.BatchNorm1d(3, **kw),
                                  lambda **kw: nn.BatchNorm2d(3, **kw),
                                  lambda **kw: nn.LayerNorm1d(3, **kw)],
                         ids=["BatchNorm1d", "BatchNorm2d", "LayerNorm1d"])
def test_norm_layers_check_eps_and_momentum(make, device):
    """eps < 0 gave NaN (BatchNorm in eval mode, LayerNorm), momentum 2 extrapolated the
    running statistics, eps "a" failed at the first forward."""
    name = type(make(device=device)).__name__
    with pytest.raises(ValueError, match=rf"{name}: eps must be >= 0.0, found -1.0"):
        make(eps=-1.0, device=device)
    with pytest.raises(TypeError, match=rf"{name}: eps must be a real number, found str"):
        make(eps="a", device=device)
    assert make(eps=np.float32(0.5), device=device).eps == 0.5
    if name != "LayerNorm1d":
        for bad in (2.0, -0.1):
            with pytest.raises(ValueError, match=rf"{name}: momentum must be in \[0.0, 1.0\], "
                               rf"found {bad}"):
                make(momentum=bad, device=device)
        with pytest.raises(TypeError, match=rf"{name}: momentum must be a real number"):
            make(momentum=None, device=device)
        assert make(momentum=1, device=device).momentum == 1.0


@pytest.mark.parametrize("make", [lambda: nn.BatchNorm1d(3), lambda: nn.BatchNorm2d(3),
                                  lambda: nn.LayerNorm1d(3), lambda: nn.Dropout(0.1)],
                         ids=["BatchNorm1d", "BatchNorm2d", "LayerNorm1d", "Dropout"])
def test_layer_settings_are_checked_when_assigned_after_construction(make):
    """`bn.eps = -1.0`, `bn.momentum = 2` or `drop.p = 1.5` after construction were taken
    (NaN, extrapolated statistics, a division by 0 at the next forward); each is now the
    constructor's error, and a good value is kept as a float."""
    layer = make()
    name = type(layer).__name__
    bad = {"eps": -1.0, "momentum": 2.0, "p": 1.5}
    good = {"eps": np.float32(0.5), "momentum": 1, "p": np.float64(0.25)}
    settings = [k for k in bad if k in vars(layer)]
    assert settings  # the layer's settings live in its __dict__ (pickle and copy see them)
    for key in settings:
        before = getattr(layer, key)
        with pytest.raises(ValueError, match=rf"{name}: {key} must be"):
            setattr(layer, key, bad[key])
        assert getattr(layer, key) == before
        setattr(layer, key, good[key])
        assert type(getattr(layer, key)) is float and getattr(layer, key) == float(good[key])


def test_norm_ops_refuse_a_negative_eps(device):
    x, w, b = tensor(np.ones((2, 3)), device), tensor(np.ones(3), device), tensor(np.zeros(3),
                                                                                 device)
    with pytest.raises(ValueError, match=r"normalize: eps must be >= 0.0, found -1.0"):
        ndl.normalize(x, (1,), eps=-1)
    with pytest.raises(ValueError, match=r"layer_norm: eps must be >= 0.0, found -1.0"):
        ndl.layer_norm(x, w, b, -1)
    with pytest.raises(ValueError, match="batch_norm: eps must be positive in training, got -1"):
        ndl.batch_norm(x, w, b, -1)
    with pytest.raises(TypeError, match="layer_norm: eps must be a real number, found str"):
        ndl.layer_norm(x, w, b, "a")
    x = tensor([[1.0, 2.0, 3.0]], device)
    assert np.all(np.isfinite(ndl.layer_norm(x, w, b, 0.0).numpy()))  # eps 0 stays allowed


# ----- initialisers --------------------------------------------------------------------------
@pytest.mark.parametrize("draw", [
    lambda **kw: init.rand(3, 2, **kw), lambda **kw: init.randn(3, 2, **kw),
    lambda **kw: init.kaiming_uniform(3, 2, **kw), lambda **kw: init.kaiming_normal(3, 2, **kw),
    lambda **kw: init.xavier_uniform(3, 2, **kw), lambda **kw: init.xavier_normal(3, 2, **kw),
    lambda **kw: nn.Linear(3, 2, **kw)],
    ids=["rand", "randn", "kaiming_uniform", "kaiming_normal", "xavier_uniform",
         "xavier_normal", "Linear"])
@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_float_initialisers_refuse_integer_and_bool_dtypes(draw, dtype, device):
    """Linear(dtype="int32") had weights truncated to -1, 0 and 1, dtype="bool" all True;
    nothing is drawn before the error."""
    np.random.seed(0)
    with pytest.raises(TypeError, match=rf"dtype must be a floating one, found {dtype}"):
        draw(device=device, dtype=dtype)
    assert np.random.rand() == np.random.RandomState(0).rand()


def test_the_other_initialisers_keep_any_dtype(device):
    assert init.randb(3, p=0.5, device=device, dtype="int32").dtype == "int32"
    assert init.zeros(2, device=device, dtype="int32").dtype == "int32"
    assert init.ones(2, device=device, dtype="bool").dtype == "bool"
    assert init.constant(2, c=3, device=device, dtype="int32").numpy().tolist() == [3, 3]
    assert init.one_hot(3, [1], device=device, dtype="int32").numpy().tolist() == [[0, 1, 0]]


@pytest.mark.parametrize("draw, message", [
    (lambda d: init.kaiming_uniform(0, 3, device=d), "kaiming_uniform: fan_in must be > 0"),
    (lambda d: init.kaiming_normal(0, 3, device=d), "kaiming_normal: fan_in must be > 0"),
    (lambda d: init.kaiming_uniform(-2, 3, device=d), "fan_in must be >= 0.0, found -2"),
    (lambda d: init.xavier_uniform(0, 0, device=d), r"fan_in \+ fan_out must be > 0"),
    (lambda d: init.xavier_uniform(2, 3, gain=-1, device=d), "xavier_uniform: gain must be >="),
    (lambda d: init.xavier_normal(2, 3, gain=-1, device=d), "xavier_normal: gain must be >="),
    (lambda d: init.rand(3, low=1, high=0, device=d), "rand: low must be <= high"),
    (lambda d: init.rand(3, high=float("inf"), device=d), "rand: high must be finite"),
    (lambda d: init.randn(3, std=-1, device=d), r"randn: std must be >= 0.0, found -1.0"),
    (lambda d: init.randb(3, p=2, device=d), r"randb: p must be in \[0.0, 1.0\], found 2.0"),
    (lambda d: init.randb(3, p=-1, device=d), r"randb: p must be in \[0.0, 1.0\], found -1"),
])
def test_initialisers_refuse_bad_values(draw, message, device):
    """kaiming(0, ...) raised ZeroDivisionError; the others drew silently (low > high
    reversed the interval, std -1 flipped the signs, p 2 gave all True)."""
    with pytest.raises(ValueError, match=message):
        draw(device)


# ----- dropout and softmax -------------------------------------------------------------------
def test_dropout_mask_needs_a_keep_in_0_1(device):
    """keep 2 gave x * 0.5 with nothing dropped, keep 0 NaN."""
    x, draws = tensor([1.0, 1.0], device), tensor([0.1, 0.9], device)
    for keep in (2.0, 0, -1.0, float("nan")):
        with pytest.raises(ValueError, match=r"dropout: keep must be in \(0.0, 1.0\]"):
            ndl.dropout_mask(x, draws, keep)
    assert ndl.dropout_mask(x, draws, 1).numpy().tolist() == [1.0, 1.0]
    for bad in ("a", None):
        with pytest.raises(TypeError, match="Dropout: p must be a real number"):
            nn.Dropout(bad)


def test_softmax_checks_temperature_and_causal(device):
    x = tensor(np.zeros((2, 2)), device)
    for bad in ("a", None):
        with pytest.raises(TypeError, match="softmax: temperature must be a real number"):
            ndl.softmax(x, temperature=bad)
    with pytest.raises(TypeError, match="softmax: causal must be True or False"):
        ndl.softmax(x, causal="no")


def test_causal_attention_needs_as_many_keys_as_queries(device):
    """With more queries than keys the first queries saw no key and attended to every key
    alike (on every device, cpu's and torch's fast softmax too)."""
    with pytest.raises(ValueError, match=r"softmax: a causal mask needs at least as many keys"
                       r".*found shape \(3, 2\)"):
        ndl.softmax(tensor(np.zeros((3, 2)), device), causal=True)
    mha = nn.MultiHeadAttention(causal=True, device=device)
    q, k = tensor(np.zeros((1, 1, 3, 2)), device), tensor(np.zeros((1, 1, 2, 2)), device)
    with pytest.raises(ValueError, match=r"MultiHeadAttention: causal attention needs .*"
                       r"q \(1, 1, 3, 2\), k \(1, 1, 2, 2\)"):
        mha(q, k, k)
    assert nn.MultiHeadAttention(device=device)(q, k, k)[0].shape == (1, 1, 3, 2)


# ----- layers --------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_linear_of_a_1d_input_is_1d(bias, device):
    """A (3,) input gave (1, 2) with a bias (and (2,) without); PyTorch gives (2,)."""
    layer = nn.Linear(3, 2, bias=bias, device=device)
    x = tensor([1.0, 2.0, 3.0], device)
    out = layer(x)
    assert out.shape == (2,)
    np.testing.assert_allclose(out.numpy(), layer(ndl.ops.reshape(x, (1, 3))).numpy()[0], rtol=1e-6)
    out.sum().backward()
    if bias:
        assert layer.bias.grad.shape == (1, 2)


def test_transformer_names_the_devices_of_x_and_the_model(device):
    """Four devices gave four different internal errors."""
    model = nn.Transformer(4, 8, 1, num_head=2, dim_head=2, device=device)
    other = other_than(device)
    with pytest.raises(ValueError, match=re.escape(f"Transformer: x is on {other}, the model "
                                                   f"on {device}; move one of them with .to()")):
        model(tensor(np.ones((3, 2, 4)), other))


def test_attention_and_transformer_layers_name_themselves_for_a_wrong_feature_size(device):
    """The message named the inner LayerNorm1d."""
    x = tensor(np.ones((2, 3, 5)), device)
    with pytest.raises(ValueError, match=r"AttentionLayer: expected q of shape \(B, T, "
                       r"q_features=4\), found \(2, 3, 5\)"):
        nn.AttentionLayer(4, 2, 3, device=device)(x)
    good = tensor(np.ones((2, 3, 4)), device)
    with pytest.raises(ValueError, match=r"AttentionLayer: expected k of shape"):
        nn.AttentionLayer(4, 2, 3, device=device)(good, x)
    with pytest.raises(ValueError, match=r"TransformerLayer: expected x of shape \(B, T, "
                       r"q_features=4\), found \(2, 3, 5\)"):
        nn.TransformerLayer(4, 2, 3, 8, device=device)(x)


@pytest.mark.parametrize("make", [
    lambda bias, d: nn.Linear(3, 2, bias=bias, device=d),
    lambda bias, d: nn.Conv(3, 4, 3, bias=bias, device=d),
    lambda bias, d: nn.RNNCell(3, 4, bias=bias, device=d),
    lambda bias, d: nn.LSTMCell(3, 4, bias=bias, device=d),
    lambda bias, d: nn.RNN(3, 4, bias=bias, device=d),
    lambda bias, d: nn.LSTM(3, 4, bias=bias, device=d)],
    ids=["Linear", "Conv", "RNNCell", "LSTMCell", "RNN", "LSTM"])
def test_bias_flags_must_be_bools(make, device):
    """bias="no" is true to Python: Conv(bias="no") kept a bias."""
    for bad in ("no", None, 0):
        with pytest.raises(TypeError, match=r": bias must be True or False, found"):
            make(bad, device)
    params = lambda m: len(list(m.parameters()))  # noqa: E731
    assert params(make(np.False_, device)) < params(make(np.True_, device))


def test_other_flags_must_be_bools(device):
    with pytest.raises(TypeError, match="MultiHeadAttention: causal must be True or False"):
        nn.MultiHeadAttention(causal="no", device=device)
    with pytest.raises(TypeError, match="Transformer: batch_first must be True or False"):
        nn.Transformer(4, 8, 1, num_head=2, dim_head=2, batch_first="no", device=device)


# ----- data ----------------------------------------------------------------------------------
def test_dataloader_checks_the_dataset_and_shuffle(device):
    """A list failed at the first batch ("only integer scalar arrays can be converted"),
    None at len(), and shuffle="no" shuffled."""
    for bad, kind in (([1, 2, 3], "list"), (None, "NoneType"), ({0: 1}, "dict"),
                      ((1, 2), "tuple")):
        with pytest.raises(TypeError, match=rf"DataLoader: dataset must be a Dataset .*got "
                           rf"{kind}; wrap .* in ndl.data.NDArrayDataset"):
            DataLoader(bad, device=device)
    data = NDArrayDataset(np.arange(4.0))
    with pytest.raises(TypeError, match="DataLoader: shuffle must be True or False, found 'no'"):
        DataLoader(data, shuffle="no", device=device)
    assert DataLoader(data, shuffle=np.False_, device=device).shuffle is False
    batches = list(DataLoader(np.arange(4.0), batch_size=2, device=device))  # arrays still do
    assert [b[0].numpy().tolist() for b in batches] == [[0.0, 1.0], [2.0, 3.0]]


def test_dataloader_batches_a_tensor_by_rows(device):
    """As PyTorch's DataLoader over a tensor: a Tensor dataset failed at the first batch
    ("tensor indices must be ints, slices or ..., got ndarray")."""
    x = tensor(np.arange(10.0).reshape(5, 2), device)
    batches = list(DataLoader(x, batch_size=2, device=device))
    assert [len(b) for b in batches] == [1, 1, 1]
    assert [b[0].numpy().tolist() for b in batches] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]],
                                                        [[8, 9]]]
    assert batches[0][0].device == device and batches[0][0].dtype == "float32"
    other = ndl.cpu() if device != ndl.cpu() else ndl.strict()  # the tensor's device,
    x = tensor(np.arange(4.0), other)  # unless another is asked for (as PyTorch keeps it)
    assert next(iter(DataLoader(x, batch_size=2)))[0].device == other
    assert next(iter(DataLoader(x, batch_size=2, device=device)))[0].device == device

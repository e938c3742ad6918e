"""ndl.optim against numpy implementations of the documented update rules."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from needle.kernels import reference_only
from needle.optim.adam import ADAM, adam_portable
from needle.optim.sgd import SGD_STEP, sgd_portable

SHAPES = [(3, 2), (4,)]


def params_on(device, dtype="float64", seed=0, shapes=SHAPES) -> list[nn.Parameter]:
    rng = np.random.default_rng(seed)
    return [nn.Parameter(rng.standard_normal(s), device=device, dtype=dtype) for s in shapes]


def grads_for(step: int, shapes=SHAPES) -> list[np.ndarray]:
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(s) for s in shapes]


def set_grads(params, grads, device, dtype="float64") -> None:
    for p, g in zip(params, grads):
        p.grad = ndl.Tensor(g, device=device, dtype=dtype, requires_grad=False)


def np_sgd(ps, steps, lr, momentum, wd):
    ps, us = [p.copy() for p in ps], [np.zeros_like(p) for p in ps]
    for t in range(steps):
        for p, u, g in zip(ps, us, grads_for(t, [p.shape for p in ps])):
            g = g + wd * p
            u[...] = momentum * u + (1 - momentum) * g
            p -= lr * u
    return ps


def np_adam(ps, steps, lr, b1, b2, eps, wd):
    ps = [p.copy() for p in ps]
    ms, vs = [np.zeros_like(p) for p in ps], [np.zeros_like(p) for p in ps]
    for t in range(1, steps + 1):
        for p, m, v, g in zip(ps, ms, vs, grads_for(t - 1, [p.shape for p in ps])):
            g = g + wd * p
            m[...] = b1 * m + (1 - b1) * g
            v[...] = b2 * v + (1 - b2) * g**2
            p -= lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return ps


def run(opt, params, device, steps=10, dtype="float64", first=0) -> None:
    for t in range(first, first + steps):
        set_grads(params, grads_for(t, [p.shape for p in params]), device, dtype)
        opt.step()


@pytest.mark.parametrize("momentum, wd", [(0.0, 0.0), (0.9, 0.0), (0.0, 0.1), (0.5, 0.01)])
def test_sgd_matches_numpy(momentum, wd, device):
    params = params_on(device)
    start = [p.numpy() for p in params]
    run(optim.SGD(params, lr=0.1, momentum=momentum, weight_decay=wd), params, device)
    for p, ref in zip(params, np_sgd(start, 10, 0.1, momentum, wd)):
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_adam_matches_numpy(wd, device):
    params = params_on(device)
    start = [p.numpy() for p in params]
    opt = optim.Adam(params, lr=0.05, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=wd)
    run(opt, params, device)
    assert opt.t == 10  # once per step(), not per parameter
    for p, ref in zip(params, np_adam(start, 10, 0.05, 0.8, 0.95, 1e-6, wd)):
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-14)


def test_the_courses_state_dicts_u_m_v(device):
    """Course code reads `opt.u[p]` (SGD) and `opt.m[p]`, `opt.v[p]` (Adam): the state as
    {parameter: Tensor}, here checked against the course's recurrences by hand."""
    params = params_on(device)
    sgd, adam = optim.SGD(params, lr=0.0, momentum=0.9), optim.Adam(params, lr=0.0)
    assert sgd.u == {} and adam.m == {} and adam.v == {}
    run(sgd, params, device, steps=3)
    run(adam, params, device, steps=3)
    for k, p in enumerate(params):
        u = m = v = 0.0
        for t in range(3):
            g = grads_for(t)[k]
            u, m, v = 0.9 * u + 0.1 * g, 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g**2
        for got, want in [(sgd.u[p], u), (adam.m[p], m), (adam.v[p], v)]:
            assert isinstance(got, ndl.Tensor) and got.device == device
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    assert list(sgd.u) == params
    assert optim.SGD(params, lr=0.1).u == {}  # no momentum, no state (as PyTorch)
    other = ndl.cpu() if device != ndl.cpu() else ndl.strict()
    for p in params:  # the state moves at the next step: until then it is on its own device
        p.data = p.data.to(other)
    for got in adam.m.values():
        assert got.device == device and (got + 1.0).device == device
    with pytest.raises(AttributeError, match="'SGD' object has no attribute 'm'"):
        getattr(sgd, "m")  # noqa: B009 (the attribute read is the test)


@pytest.mark.parametrize("make", [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: optim.Adam(ps, lr=0.1)], ids=["sgd", "adam"])
def test_step_keeps_dtype_identity_and_grad_and_records_no_graph(make, device):
    params = params_on(device, dtype="float32")
    opt = make(params)
    start = [p.numpy() for p in params]
    set_grads(params, grads_for(0), device, dtype="float64")  # float64 grads, float32 params
    grads = [(p.grad, p.grad._realize(), p.grad.numpy()) for p in params]
    opt.step()
    for p, s, (grad, array, values) in zip(params, start, grads):
        assert p.dtype == "float32" and p.device == device
        assert p.op is None and p.inputs == () and p.requires_grad
        assert p.grad is grad and p.grad._realize() is array
        np.testing.assert_array_equal(p.grad.numpy(), values)
        assert not np.array_equal(p.numpy(), s)
    assert all(a.dtype == params[0]._realize().dtype
               for s in opt.state.values() for a in s.values())


def test_parameters_without_grad_are_skipped(device):
    params = params_on(device)
    before = params[1].numpy()
    opt = optim.Adam(params)
    params[0].grad = ndl.Tensor(np.ones(SHAPES[0]), device=device, requires_grad=False)
    opt.step()
    np.testing.assert_array_equal(params[1].numpy(), before)
    assert list(opt.state) == [0]


def test_reset_grad_and_zero_grad(device):
    params = params_on(device)
    opt = optim.SGD(params)
    for clear in (opt.reset_grad, opt.zero_grad):
        set_grads(params, grads_for(0), device)
        clear()
        assert all(p.grad is None for p in params)


def test_training_a_linear_model_lowers_the_loss(device):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 8, device=device), nn.ReLU(),
                          nn.Linear(8, 3, device=device))
    rng = np.random.default_rng(0)
    x = ndl.Tensor(rng.standard_normal((32, 4)), device=device, dtype="float32")
    y = ndl.Tensor(rng.integers(0, 3, 32), device=device, requires_grad=False)
    opt = optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.numpy().item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("make, message", [
    (lambda ps: optim.SGD(ps, lr=-0.1), r"SGD: lr must be >= 0.0, found -0.1"),
    (lambda ps: optim.SGD(ps, momentum=1.0), r"momentum must be in \[0.0, 1.0\), found 1.0"),
    (lambda ps: optim.SGD(ps, weight_decay=-1), r"weight_decay must be >= 0.0, found -1.0"),
    (lambda ps: optim.Adam(ps, lr=-1e-3), r"Adam: lr must be >= 0.0, found -0.001"),
    (lambda ps: optim.Adam(ps, beta1=1.0), r"beta1 must be in \[0.0, 1.0\), found 1.0"),
    (lambda ps: optim.Adam(ps, beta2=-0.5), r"beta2 must be in \[0.0, 1.0\), found -0.5"),
    (lambda ps: optim.Adam(ps, weight_decay=-0.1), r"weight_decay must be >= 0.0"),
])
def test_bad_hyperparameters_raise(make, message, device):
    with pytest.raises(ValueError, match=message):
        make(params_on(device))



def test_adam_betas_is_pytorchs_spelling_of_beta1_and_beta2(device):
    ours, theirs = params_on(device), params_on(device)
    course = optim.Adam(ours, lr=0.05, beta1=0.8, beta2=0.95, eps=1e-6)
    torch_style = optim.Adam(theirs, lr=0.05, betas=(0.8, 0.95), eps=1e-6)
    assert (torch_style.beta1, torch_style.beta2) == (0.8, 0.95)
    assert torch_style.state_dict()["hyperparameters"] == course.state_dict()["hyperparameters"]
    run(course, ours, device)
    run(torch_style, theirs, device)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # the same updates, to the bit
    assert not np.array_equal(ours[0].numpy(), params_on(device)[0].numpy())  # (they moved)
    default = optim.Adam(params_on(device), betas=[np.float32(0.5), 0.9])  # a list too
    assert (default.beta1, default.beta2) == (0.5, 0.9) and type(default.beta1) is float
    assert (optim.Adam(params_on(device)).beta1, optim.Adam(params_on(device)).beta2) == (
        0.9, 0.999)  # the course's defaults


@pytest.mark.parametrize("kwargs, error, message", [
    ({"betas": (0.9, 0.99), "beta1": 0.9}, TypeError, "give one spelling, not betas and beta1"),
    ({"betas": (0.9, 0.99), "beta1": 0.8, "beta2": 0.9}, TypeError, "betas and beta1 and beta2"),
    ({"betas": (0.9,)}, ValueError, r"betas must be a tuple of 2 numbers \(beta1, beta2\), "
                                    r"found 1: \(0.9,\)"),
    ({"betas": (0.9, 0.99, 0.1)}, ValueError, "betas must be a tuple of 2 numbers"),
    ({"betas": (0.9, 1.0)}, ValueError, r"Adam: betas\[1\] must be in \[0.0, 1.0\), found 1.0"),
    ({"betas": (-0.1, 0.9)}, ValueError, r"betas\[0\] must be in"),
    ({"betas": ("0.9", 0.9)}, TypeError, r"betas\[0\] must be a real number"),
    ({"betas": 0.9}, TypeError, r"betas must be a tuple \(beta1, beta2\), found float"),
])
def test_adam_bad_betas_raise_naming_them(kwargs, error, message, device):
    with pytest.raises(error, match=message):
        optim.Adam(params_on(device), **kwargs)


class Real:
    """A number of the user's own: anything with __float__ is taken as a real number."""

    def __float__(self) -> float:
        return 0.25


@pytest.mark.parametrize("make", [optim.SGD, optim.Adam], ids=["sgd", "adam"])
def test_hyperparameters_take_any_real_number_as_a_float(make, device):
    """numpy scalars (float32 too), fractions and objects with __float__ are real numbers:
    stored as Python floats, by the constructor and by assignment (a schedule's np.cos)."""
    from fractions import Fraction

    for lr in (np.float32(0.25), np.float64(0.25), np.int64(1), Fraction(1, 4), Real(),
               np.array(0.25)):
        params = params_on(device, dtype="float32")
        opt = make(params, lr=lr, weight_decay=np.float32(0.5))
        assert type(opt.lr) is float and opt.lr == float(lr) and type(opt.weight_decay) is float
        opt.lr = np.float64(0.125)  # as a schedule computed with numpy sets it
        assert type(opt.lr) is float and opt.lr == 0.125
        set_grads(params, grads_for(0), device, "float32")
        opt.step()
        assert all(p.dtype == "float32" for p in params)
        assert all(type(v) is float for v in opt.state_dict()["hyperparameters"].values())
    for bad in (True, np.True_, 1j, np.complex64(1), "0.1", None, np.array([0.1, 0.2])):
        with pytest.raises(TypeError, match=f"{make.__name__}: lr must be a real number, "
                           f"found {type(bad).__name__}"):
            make(params_on(device), lr=bad)


@pytest.mark.parametrize("make", [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: optim.Adam(ps, lr=0.1)], ids=["sgd", "adam"])
def test_state_dict_round_trips_exactly(make, device):
    params = params_on(device)
    opt = make(params)
    run(opt, params, device, steps=3)
    copies = [nn.Parameter(p, device=device) for p in params]
    restored = make(copies)
    restored.load_state_dict(opt.state_dict())
    assert restored.t == opt.t == 3
    for t in (3, 4):
        set_grads(params, grads_for(t), device)
        set_grads(copies, grads_for(t), device)
        opt.step()
        restored.step()
    for a, b in zip(params, copies):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_load_state_dict_reports_problems_and_changes_nothing(device):
    params = params_on(device)
    opt = optim.Adam(params, lr=0.1)
    run(opt, params, device, steps=2)
    state = opt.state_dict()
    target = optim.Adam(params_on(device), lr=0.3)
    state["state"][0]["m"] = np.zeros((2, 3))
    state["state"][1]["w"] = np.zeros(4)
    state["state"][5] = {}
    state["hyperparameters"]["lr"] = -1.0
    with pytest.raises(ValueError) as info:
        target.load_state_dict(state)
    message = str(info.value)
    assert "parameter 0: state 'm' has shape (2, 3), expected (3, 2)" in message
    assert "parameter 1: unexpected state 'w'" in message
    assert "state for parameter 5, but there are 2 parameters" in message
    assert "lr must be >= 0.0, found -1.0" in message
    assert target.t == 0 and target.state == {} and target.lr == 0.3


def test_load_state_dict_checks_the_parameters_count_and_shapes(device):
    """(An optimizer audit.) A state of 2 parameters loaded into an optimizer of 3 (and an
    SGD without momentum, which has no state, into anything); PyTorch refuses it."""
    params = params_on(device)
    opt = optim.Adam(params, lr=0.1)
    run(opt, params, device, steps=1)
    state = opt.state_dict()
    assert state["shapes"] == [(3, 2), (4,)]
    more = optim.Adam(params_on(device, shapes=[(3, 2), (4,), (5,)]))
    with pytest.raises(ValueError, match="the state is of 2 parameters, this optimizer has 3"):
        more.load_state_dict(state)
    plain = optim.SGD(params_on(device, shapes=[(3, 2), (5,)]))
    with pytest.raises(ValueError, match=r"parameter 1 has shape \(5,\), the state's \(4,\)"):
        plain.load_state_dict(optim.SGD(params_on(device)).state_dict())
    del state["shapes"]  # an older checkpoint's: loads as before
    optim.Adam(params_on(device)).load_state_dict(state)


def test_a_parameter_replaced_by_another_shape_is_named(device):
    """(An optimizer audit.) Old moments were broadcast into the new shape on strict and jax
    and gave each library's raw error elsewhere."""
    for shapes in ([(3,)], [(3,), (4,)], [BIG]):
        params = params_on(device, "float32", shapes=shapes)
        opt = optim.Adam(params, lr=1.0)
        set_grads(params, [np.ones(s) for s in shapes], device, "float32")
        opt.step()
        params[0].data = ndl.Tensor(np.zeros((2, 3)), device=device, dtype="float32")
        set_grads(params, [np.ones((2, 3))] + [np.ones(s) for s in shapes[1:]], device,
                  "float32")
        with pytest.raises(ValueError, match=r"parameter 0 has shape \(2, 3\), but its state "
                                             r"'m' has shape \(\d+(, \d+)?,?\)"):
            opt.step()


def test_empty_and_repeated_parameter_lists_are_refused():
    """(An optimizer audit.) A parameter listed twice was updated once (PyTorch and the
    course update it twice; PyTorch warns that it will be an error)."""
    w = nn.Parameter(np.ones(3))
    with pytest.raises(ValueError, match="SGD: parameter 2 is parameter 0 again"):
        optim.SGD([w, nn.Parameter(np.ones(2)), w])
    with pytest.raises(ValueError, match="Adam got an empty parameter list"):
        optim.Adam([])


def test_pytorchs_step_closure_and_zero_grad_to_zeros(device):
    params = params_on(device)
    opt = optim.SGD(params, lr=0.5)

    def closure():
        opt.zero_grad()
        loss = sum((p * p).sum() for p in params)
        loss.backward()
        return loss
    before = [p.numpy().copy() for p in params]
    with ndl.no_grad():  # (step turns grad mode on for the closure, as PyTorch's)
        loss = opt.step(closure)
    assert float(loss.numpy()) == pytest.approx(sum((b * b).sum() for b in before))
    for p, b in zip(params, before):  # p - 0.5 * 2p
        np.testing.assert_allclose(p.numpy(), 0.0 * b, atol=1e-12)
    assert opt.step() is None
    opt.zero_grad(set_to_none=False)
    for p in params:
        assert p.grad.dtype == p.dtype and not p.grad.numpy().any() and p.grad.shape == p.shape
    opt.zero_grad()
    assert all(p.grad is None for p in params)


# ----- big parameters: updated one by one, outside the flat buffer -----------------------
BIG = (181, 190)  # 34390 elements, above Optimizer.flat_max_size (32768)
MIXED = [(3, 2), BIG, (4,), (5,)]  # small ones flat together, the big one on its own
RULES = {
    "sgd": (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
            lambda ps, steps: np_sgd(ps, steps, 0.1, 0.9, 0.01)),
    "adam": (lambda ps: optim.Adam(ps, lr=0.05, beta1=0.8, beta2=0.95, eps=1e-6,
                                   weight_decay=0.05),
             lambda ps, steps: np_adam(ps, steps, 0.05, 0.8, 0.95, 1e-6, 0.05)),
}


def spy_updates(opt) -> list[int]:
    """Record the size of the array each update gets (one per flat group, one per big
    parameter, those handed over together by `_update_many`), whether the device's kernel
    updates in place (cpu) or not."""
    sizes, update, update_many, inside = [], opt._update, opt._update_many, []

    def recording(param, grad, state):
        if not inside:
            sizes.append(int(np.prod(param.shape)))
        return update(param, grad, state)

    def recording_many(params, grads, states):
        sizes.extend(int(np.prod(p.shape)) for p in params)
        inside.append(1)
        try:
            return update_many(params, grads, states)
        finally:
            inside.pop()

    opt._update, opt._update_many = recording, recording_many
    return sizes


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("shapes", [[BIG], MIXED], ids=["big", "mixed"])
def test_big_parameters_are_updated_alone_and_match_numpy(rule, shapes, device):
    make, reference = RULES[rule]
    assert np.prod(BIG) > optim.Optimizer.flat_max_size
    params = params_on(device, shapes=shapes)
    start = [p.numpy() for p in params]
    opt = make(params)
    sizes = spy_updates(opt)
    run(opt, params, device, steps=4)
    small = sum(int(np.prod(s)) for s in shapes if s != BIG)
    if device.multi_tensor_updates:  # (torch's GPUs) every parameter a foreach operand
        assert sizes == [int(np.prod(s)) for s in shapes] * 4
    else:
        assert sizes == ([int(np.prod(BIG))] + ([small] if small else [])) * 4
    for p, ref in zip(params, reference(start, 4)):
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-14)
    for name in opt.state_names:
        assert [opt.state[i][name].shape for i in range(len(params))] == shapes


@pytest.mark.parametrize("rule", RULES)
def test_the_big_parameters_of_a_device_are_updated_in_one_call(rule, device):
    """Two big parameters of one device and dtype are handed to one _update_many call per
    step (on torch: foreach ops), the small ones flat together; the numbers are numpy's."""
    make, reference = RULES[rule]
    shapes = [BIG, (3, 2), (200, 170), (4,)]
    params = params_on(device, shapes=shapes)
    start = [p.numpy() for p in params]
    opt = make(params)
    calls, many = [], opt._update_many
    opt._update_many = lambda ps, gs, ss: (calls.append([int(np.prod(p.shape)) for p in ps]),
                                           many(ps, gs, ss))[1]
    run(opt, params, device, steps=3)
    if device.multi_tensor_updates:  # (torch's GPUs) the small ones in the same call
        assert calls == [[int(np.prod(s)) for s in shapes]] * 3
    else:
        assert calls == [[int(np.prod(BIG)), 200 * 170]] * 3
    for p, ref in zip(params, reference(start, 3)):
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-14)
    for name in opt.state_names:
        assert [opt.state[i][name].shape for i in range(len(params))] == shapes


@pytest.mark.parametrize("rule", RULES)
def test_flat_max_size_set_on_the_instance_splits_groups(rule, device):
    make, reference = RULES[rule]
    params = params_on(device, shapes=MIXED[:1] + MIXED[2:])  # (3, 2), (4,), (5,)
    start = [p.numpy() for p in params]
    opt = make(params)
    opt.flat_max_size = 4  # (3, 2) and (5,) now count as big, (4,) is a group of one
    sizes = spy_updates(opt)
    run(opt, params, device, steps=3)
    assert sizes == ([6, 4, 5] if device.multi_tensor_updates else [6, 5, 4]) * 3
    for p, ref in zip(params, reference(start, 3)):
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("rule", RULES)
def test_multi_tensor_devices_make_no_flat_arrays(rule, device, monkeypatch):
    """Where a device's multi-tensor updates beat a flat array (`multi_tensor_updates`:
    torch's GPUs, set here on every device) every parameter goes to one `_update_many`
    call, none to a flat array, with the flat path's numbers to the bit."""
    make, _ = RULES[rule]
    params = params_on(device, shapes=MIXED)
    flat = [nn.Parameter(p, device=device) for p in params]
    run(make(flat), flat, device, steps=3)
    monkeypatch.setattr(type(device), "multi_tensor_updates", True)
    opt = make(params)
    sizes = spy_updates(opt)
    run(opt, params, device, steps=3)
    assert sizes == [int(np.prod(s)) for s in MIXED] * 3 and opt._flat == {}
    for a, b in zip(params, flat):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("rule", RULES)
def test_state_dict_round_trips_with_big_parameters(rule, device):
    make, _ = RULES[rule]
    params = params_on(device, shapes=MIXED)
    opt = make(params)
    run(opt, params, device, steps=2)
    copies = [nn.Parameter(p, device=device) for p in params]
    restored = make(copies)
    restored.load_state_dict(opt.state_dict())
    run(opt, params, device, steps=2, first=2)
    run(restored, copies, device, steps=2, first=2)
    for a, b in zip(params, copies):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_flat_cache_is_explicit_per_group_and_never_stale(device, monkeypatch):
    # (flat arrays on every device: torch's GPUs hand every parameter to foreach updates)
    monkeypatch.setattr(type(device), "multi_tensor_updates", False)
    shapes = [(3, 2), (4,)]
    params = params_on(device, shapes=shapes) + params_on(device, "float32", 1, shapes)
    opt = optim.SGD(params, lr=0.1, momentum=0.5)
    assert opt._flat == {}  # an explicit, empty cache from the start
    for t in range(2):
        for p, g in zip(params, grads_for(t, shapes) * 2):
            p.grad = ndl.Tensor(g, device=device, requires_grad=False)
        opt.step()
    assert len(opt._flat) == 2  # float64 and float32 groups each keep their flat arrays
    assert sorted(group.indices for group in opt._flat.values()) == [(0, 1), (2, 3)]
    # replacing a parameter's data (load_state_dict on a model does) or the optimizer's
    # state invalidates the cache: the next step must use the new arrays
    params[0].data = ndl.Tensor(np.zeros((3, 2)), device=device)
    opt.load_state_dict(opt.state_dict())
    assert opt._flat == {}
    u = [opt.state[i]["u"] for i in (0, 1)]
    expected = [p - 0.1 * (0.5 * device.to_numpy(s) + 0.5 * g) for p, s, g in
                zip([np.zeros((3, 2)), params[1].numpy()], u, grads_for(2, shapes))]
    for p, g in zip(params, grads_for(2, shapes) * 2):
        p.grad = ndl.Tensor(g, device=device, requires_grad=False)
    opt.step()
    for p, ref in zip(params[:2], expected):
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-14)



@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("direction", ["to", "from"])
def test_state_follows_parameters_that_module_to_moved(rule, direction, device):
    """`Module.to()` after steps: the next step (and state_dict) first moves each moved
    parameter's state to its new device, an exact copy, so the updates are those of the state
    loaded there by load_state_dict; flat groups and big parameters alike."""
    make, _ = RULES[rule]
    home, away = (ndl.cpu(), device) if direction == "to" else (device, ndl.cpu())
    params = params_on(home, shapes=MIXED)
    model = nn.Module()
    model.params = params
    opt = make(params)
    run(opt, params, home, steps=2)
    copies = [nn.Parameter(p.numpy(), device=away) for p in params]
    reference = make(copies)
    reference.load_state_dict(opt.state_dict())
    model.to(away)
    for entry in opt.state_dict()["state"].values():
        assert all(t.device == away and away.owns(t._array) for t in entry.values())
    run(opt, params, away, steps=2, first=2)
    run(reference, copies, away, steps=2, first=2)
    for i, (a, b) in enumerate(zip(params, copies)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        for name in opt.state_names:
            assert away.owns(opt.state[i][name])
            np.testing.assert_array_equal(away.to_numpy(opt.state[i][name]),
                                          away.to_numpy(reference.state[i][name]))


# ----- the devices' in-place kernels (cpu, cuda) --------------------------------------
IN_PLACE_RULES = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1),
    "sgd-momentum-wd": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "adam": lambda ps: optim.Adam(ps, lr=0.05),
    "adam-wd": lambda ps: optim.Adam(ps, lr=0.05, beta1=0.8, beta2=0.95, eps=1e-6,
                                     weight_decay=0.05),
}
# 150000 elements: above flat_max_size, and two chunks and part of a third of the kernel
CHUNKED = [(3, 2), (300, 500), (4,), (5,)]


def has_in_place_kernels(device) -> bool:
    """Whether the device's optimizer kernels update in place (cpu, cuda, torch)."""
    return device.kind in ADAM.fast and device.kind in SGD_STEP.fast


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rule", IN_PLACE_RULES)
def test_in_place_kernels_give_the_portable_rules_numbers_to_the_bit(rule, dtype, device):
    # the cpu's chunked numpy kernels, cuda's one-kernel updates (compiled without contracted
    # multiply-adds) and torch's in-place ops against the portable rule on the same device
    from needle.backends.optimizer_updates import CHUNK

    assert 2 * CHUNK < 300 * 500 < 3 * CHUNK  # whole chunks and a partial one (cpu)
    if not has_in_place_kernels(device):
        pytest.skip(f"{device} updates with the portable rule only")
    cpu = device
    results = []
    for portable in (False, True):
        with reference_only(ADAM, SGD_STEP) if portable else contextlib.nullcontext():
            params = params_on(cpu, dtype, shapes=CHUNKED)
            opt = IN_PLACE_RULES[rule](params)
            run(opt, params, cpu, steps=3, dtype=dtype)
        results.append([p.numpy() for p in params] +
                       [cpu.to_numpy(a) for s in opt.state.values() for a in s.values()])
    assert len(results[0]) == len(results[1])
    for got, expected in zip(*results):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("rule", IN_PLACE_RULES)
def test_in_place_updates_touch_only_the_optimizers_own_arrays(rule, device):
    if not has_in_place_kernels(device):
        pytest.skip(f"{device} updates with the portable rule only")
    cpu = device
    params = params_on(cpu, shapes=CHUNKED)
    # the parameters share their arrays with other tensors, as after `p.data = other`
    others = [ndl.Tensor(p.numpy(), device=cpu) for p in params]
    for p, other in zip(params, others):
        p.data = other
        assert p._array is other._array
    before = [o.numpy() for o in others]
    opt = IN_PLACE_RULES[rule](params)
    set_grads(params, grads_for(0, CHUNKED), cpu)
    grads = [p.grad.numpy() for p in params]
    opt.step()
    for other, b in zip(others, before):
        np.testing.assert_array_equal(other.numpy(), b)  # never written through
    for p, g in zip(params, grads):
        np.testing.assert_array_equal(p.grad.numpy(), g)  # .grad is never modified
    big = params[1]._array
    run(opt, params, cpu, steps=2, first=1)
    assert params[1]._array is big  # from the second step on: in place, no new array


def test_in_place_kernels_update_copies_of_arrays_they_cannot_update():
    from needle.backends.optimizer_updates import adam_cpu, sgd_cpu

    p = np.zeros((4, 3))[:, :2]  # a strided view: not contiguous
    g = np.ones((4, 2))
    hyper = {"lr": 0.1, "momentum": 0.5, "weight_decay": 0.01}
    new_p, u = sgd_cpu(p, g, None, **hyper)
    assert new_p is not p and (p == 0).all()  # a copy updated, the view left alone
    for got, expected in zip((new_p, u), sgd_portable(p, g, None, **hyper)):
        np.testing.assert_array_equal(got, expected)
    frozen = np.zeros((4, 2))
    frozen.flags.writeable = False
    m, v = np.full((4, 2), 0.5), np.full((4, 2), 0.25)
    hyper = {"lr_t": 0.1, "beta1": 0.9, "beta2": 0.99, "eps_t": 1e-8, "weight_decay": 0.01}
    expected = adam_portable(frozen, g, m.copy(), v.copy(), **hyper)
    got = adam_cpu(frozen, g, m, v, **hyper)
    assert got[0] is not frozen and (frozen == 0).all()
    assert got[1] is m and got[2] is v  # the optimizer's own state: updated in place
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_torch_in_place_updates_copy_a_tensor_that_is_not_contiguous():
    torch = pytest.importorskip("torch")
    from needle.backends.optimizer_updates_torch import adam_torch, sgd_torch

    p = torch.zeros((4, 3))[:, :2]  # a strided view: not contiguous
    g = torch.ones((4, 2))
    hyper = {"lr": 0.1, "momentum": 0.5, "weight_decay": 0.01}
    u = torch.full((4, 3), 0.5)[:, 1:]
    expected = sgd_portable(p, g, u.clone(), **hyper)
    new_p, new_u = sgd_torch(p, g, u, **hyper)
    assert new_p is not p and (p == 0).all() and (u == 0.5).all()
    for got, want in zip((new_p, new_u), expected):
        assert torch.equal(got, want)
    m, v = torch.full((4, 2), 0.5), torch.full((4, 2), 0.25)
    hyper = {"lr_t": 0.1, "beta1": 0.9, "beta2": 0.99, "eps_t": 1e-8, "weight_decay": 0.01}
    expected = adam_portable(p, g, m.clone(), v.clone(), **hyper)
    got = adam_torch(p, g, m, v, **hyper)
    assert got[0] is not p and (p == 0).all() and (g == 1).all()
    assert got[1] is m and got[2] is v  # the optimizer's own state: updated in place
    for a, b in zip(got, expected):
        assert torch.equal(a, b)


def test_torch_in_place_updates_keep_a_permuted_layout():
    """A tensor whose elements fill its memory in another order of its axes (torch's conv
    weights, (C_out, C_in, K, K) in memory) is updated in place, its layout kept, with the
    portable rule's numbers; an expanded one (stride 0) is copied first."""
    torch = pytest.importorskip("torch")
    from needle.backends.optimizer_updates_torch import adam_torch, sgd_torch

    def permuted(values):
        return values.permute(3, 2, 0, 1).contiguous().permute(2, 3, 1, 0)

    rng = np.random.default_rng(0)
    p0, g0 = (torch.as_tensor(rng.standard_normal((3, 3, 2, 4)), dtype=torch.float32)
              for _ in range(2))
    hyper = {"lr": 0.1, "momentum": 0.5, "weight_decay": 0.01}
    p, g, u = permuted(p0), permuted(g0), permuted(torch.full((3, 3, 2, 4), 0.5))
    expected = sgd_portable(p0, g0, torch.full((3, 3, 2, 4), 0.5), **hyper)
    new_p, new_u = sgd_torch(p, g, u, **hyper)
    assert new_p is p and new_u is u and p.stride() == permuted(p0).stride()
    for got, want in zip((new_p, new_u), expected):
        assert torch.equal(got, want)
    p = permuted(p0)
    hyper = {"lr_t": 0.1, "beta1": 0.9, "beta2": 0.99, "eps_t": 1e-8, "weight_decay": 0.01}
    expected = adam_portable(p0, g0, None, None, **hyper)
    got = adam_torch(p, g, None, None, **hyper)
    assert got[0] is p and all(a.stride() == p.stride() for a in got)  # state laid out alike
    for a, b in zip(got, expected):
        assert torch.equal(a, b)
    wide = torch.zeros(4).expand(3, 4)  # stride 0: one element seen three times
    assert sgd_torch(wide, torch.ones(3, 4), None, lr=0.1, momentum=0.0,
                     weight_decay=0.0)[0] is not wide and (wide == 0).all()


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("shapes", [[BIG], MIXED], ids=["big", "mixed"])
def test_step_never_changes_arrays_it_did_not_make(rule, shapes, device):
    """The update rules' in-place operators (Adam's `+=`, `*=`, `/=`) touch only arrays the
    optimizer made itself: the parameters' first arrays and every gradient keep their values.
    The portable rule rebinds every result (on jax, whose arrays are immutable, the same lines
    fall back to `a = a + b`), so there an old parameter or state array keeps its values too;
    the cpu device's kernels update the optimizer's own copies in place, as PyTorch does."""
    params = params_on(device, shapes=shapes)
    opt = RULES[rule][0](params)
    seen = [(p._array, device.to_numpy(p._array)) for p in params]
    for step in range(3):
        set_grads(params, grads_for(step, shapes), device)
        arrays = [p.grad._array for p in params]
        if not has_in_place_kernels(device):
            arrays += [p._array for p in params]
            arrays += [a for state in opt.state.values() for a in state.values()]
        seen += [(a, device.to_numpy(a)) for a in arrays]
        opt.step()
    for array, before in seen:
        np.testing.assert_array_equal(device.to_numpy(array), before)


def _adam_reference(grads_per_step, lr=0.1, b1=0.9, b2=0.999, eps=1e-8):
    """numpy's Adam with PyTorch's per-parameter step: [parameter after the steps] for
    grads_per_step[s][j], the gradient of parameter j at step s (None: no gradient)."""
    n = len(grads_per_step[0])
    p, m, v, t = [np.zeros(3) for _ in range(n)], [0.0] * n, [0.0] * n, [0] * n
    for grads in grads_per_step:
        for j, g in enumerate(grads):
            if g is None:
                continue
            t[j] += 1
            m[j] = b1 * m[j] + (1 - b1) * g
            v[j] = b2 * v[j] + (1 - b2) * g * g
            p[j] = p[j] - lr * (m[j] / (1 - b1 ** t[j])) / (np.sqrt(v[j] / (1 - b2 ** t[j]))
                                                            + eps)
    return p


@pytest.mark.parametrize("big", [False, True], ids=["flat", "big"])
def test_adam_bias_correction_counts_each_parameters_own_updates(big, device):
    """A parameter first given a gradient at step 4 (a layer unfrozen during fine-tuning)
    took the step-4 bias correction: its first update was 0.058 instead of lr = 0.1, as
    PyTorch (a step count per parameter) gives. The counts are saved and restored."""
    opt_cls = optim.Adam
    if big:  # the parameters' own arrays, not one flat array
        opt_cls = type("BigAdam", (optim.Adam,), {"flat_max_size": 0})
    ps = [nn.Parameter(ndl.Tensor(np.zeros(3), device=device, dtype="float64"))
          for _ in range(4)]
    opt = opt_cls(ps, lr=0.1)
    g = np.array([1.0, -2.0, 0.5])
    # parameters 1 and 3 lag alike: one flat group of two, kept from step to step
    schedule = ([(g, None, None, None)] * 3 + [(g, g, None, -g), (g, g, 2 * g, g)]
                + [(g, None, g, None)])
    for grads in schedule:
        for p, gr in zip(ps, grads):
            p.grad = None if gr is None else ndl.Tensor(gr, device=device, dtype="float64")
        opt.step()
    for p, ref in zip(ps, _adam_reference(schedule)):
        np.testing.assert_allclose(p.numpy(), ref, rtol=1e-12, atol=1e-15)
    assert abs(ps[1].numpy()[0] - -0.1 * 2) < 0.02  # (about lr a step, not 0.058)
    saved = opt.state_dict()
    assert opt.t == 6 and saved["steps"] == {0: 6, 1: 2, 2: 2, 3: 2}
    assert not opt._flat  # the last step's groups were of one: no flat copies left behind
    again = opt_cls(ps, lr=0.1)
    again.load_state_dict(saved)
    assert again.state_dict()["steps"] == saved["steps"]
    old = {k: v for k, v in saved.items() if k != "steps"}  # an older checkpoint: t each
    again.load_state_dict(old)
    assert again.state_dict()["steps"] == {0: 6, 1: 6, 2: 6, 3: 6}
    with pytest.raises(ValueError, match=r"steps of parameter 1 must be an int in \[0, t\]"):
        again.load_state_dict({**saved, "steps": {0: 6, 1: 7, 2: 2, 3: 2}})
    with pytest.raises(ValueError, match=r"no steps for parameters \[2\], which have state"):
        again.load_state_dict({**saved, "steps": {0: 6, 1: 2, 3: 2}})


def test_optimizer_state_counts_may_be_numpy_integers(device):
    """A state_dict read back through numpy holds t (and Adam's steps) as np.int64, which
    load_state_dict refused ("t must be an int >= 0, found np.int64(3)")."""
    ps = params_on(device)
    opt = optim.Adam(ps, lr=0.1)
    for step in range(3):
        set_grads(ps, grads_for(step), device)
        opt.step()
    saved = opt.state_dict()
    saved["t"] = np.int64(saved["t"])
    saved["steps"] = {i: np.int32(n) for i, n in saved["steps"].items()}
    again = optim.Adam(ps, lr=0.1)
    again.load_state_dict(saved)
    assert again.t == 3 and type(again.t) is int and again.state_dict()["steps"] == {0: 3, 1: 3}
    for bad in (True, 2.0, -1):
        with pytest.raises(ValueError, match="t must be an int >= 0"):
            again.load_state_dict({**saved, "t": bad})


@pytest.mark.parametrize("kind", ["flat", "big"])
def test_float16_parameters_update_in_float32_as_pytorchs(kind, device):
    """(Two audits.) A float16 gradient above 256 made Adam's v inf for good (the parameter
    never moved again), and eps=1e-7 folded into the bias correction became 0 (0/0 = NaN
    for a zero gradient); PyTorch computes in float32 and stores float16."""
    torch = pytest.importorskip("torch")
    if device.kind == "strict":
        pytest.skip("strict has no float16")
    n = 2 if kind == "flat" else BIG[0] * BIG[1]
    extra = [nn.Parameter(np.ones(3), device=device, dtype="float16")] if kind == "flat" else []
    p = nn.Parameter(np.ones(n), device=device, dtype="float16")
    opt = optim.Adam([p, *extra], lr=0.1, eps=1e-7)
    ref = torch.nn.Parameter(torch.ones(n, dtype=torch.float16))
    ref_opt = torch.optim.Adam([ref], lr=0.1, eps=1e-7)
    for g in (300.0, 1.0, 0.0, 1.0):
        grad = np.full(n, g)
        grad[1] = 0.0
        p.grad = ndl.Tensor(grad, device=device, dtype="float16")
        for e in extra:
            e.grad = ndl.Tensor(np.ones(3), device=device, dtype="float16")
        ref.grad = torch.tensor(grad, dtype=torch.float16)
        opt.step()
        ref_opt.step()
    assert p.dtype == "float16" and opt.state[0]["v"].dtype == p._array.dtype
    got, want = p.numpy().astype(np.float64), ref.detach().numpy().astype(np.float64)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=2e-3)  # (float16: 1e-3 apart near 1)


def test_pytorch_momentum_is_needles_with_lr_over_one_minus_m(device):
    """The README's recipe: torch's SGD(lr, momentum=m, weight_decay) is needle's
    SGD(lr / (1 - m), momentum=m, weight_decay) (the course averages its momentum)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    w0, targets = rng.standard_normal((3, 2)), rng.standard_normal((6, 5, 2))
    xs = rng.standard_normal((6, 5, 3))
    lr, m, wd = 0.05, 0.9, 0.01
    w = ndl.nn.Parameter(w0, device=device, dtype="float64")
    opt = optim.SGD([w], lr=lr / (1 - m), momentum=m, weight_decay=wd)
    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=lr, momentum=m, weight_decay=wd)
    for x, t in zip(xs, targets):
        opt.reset_grad()
        ((ndl.Tensor(x, device=device, dtype="float64") @ w
          - ndl.Tensor(t, device=device, dtype="float64")) ** 2).sum().backward()
        opt.step()
        topt.zero_grad()
        ((torch.tensor(x) @ tw - torch.tensor(t)) ** 2).sum().backward()
        topt.step()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-12, atol=1e-12)

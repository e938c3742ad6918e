"""ndl.compile's audit findings: each case either matches the eager step to the bit or
raises a clear error; none gives silently different numbers."""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn


def _const(values, device, dtype=np.float32):
    return ndl.Tensor(np.asarray(values, dtype=dtype), device=device, requires_grad=False)


def _batches(device, n: int = 5, rows: int = 4, scale=None):
    rng = np.random.default_rng(1)
    return [(_const(rng.standard_normal((rows, 3)) * (1 if scale is None else scale[i]),
                    device),
             _const(rng.integers(0, 2, rows), device, np.int64)) for i in range(n)]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        x, y = (v.numpy() if isinstance(v, ndl.Tensor) else np.asarray(v) for v in (x, y))
        assert x.dtype == y.dtype and np.array_equal(x, y), (x, y)


def _both(device, build, drive):
    """[(drive's results, parameters after)] for `build(model, opt)` run eagerly, then
    compiled (from the same seeds); and the compiled step."""
    out = []
    for compiled in (False, True):
        np.random.seed(0)
        model = nn.Linear(3, 2, device=device)
        opt = ndl.optim.SGD(model.parameters(), lr=0.1)
        run = build(model, opt)
        if compiled:
            run = ndl.compile(run)
        out.append((drive(run, model, opt), [p.numpy() for p in model.parameters()]))
    (eager, p_eager), (compiled, p_compiled) = out
    _same(eager, compiled)
    _same(p_eager, p_compiled)
    return run


# ----- 1: a Tensor argument sharing its data with a parameter, a closure or an argument -----
def test_anchor_weights_sharing_the_parameters_arrays_are_read_from_the_arguments(device):
    # FedProx: state_dict()'s values share the parameters' arrays at the first call (the
    # compiled step read the parameters for them: the proximal term was 0 at every call)
    def build(model, opt):
        def step(x, y, w0, b0):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(x), y)
            prox = ((model.weight - w0) ** 2).sum() + ((model.bias - b0) ** 2).sum()
            (loss + prox * 0.5).backward()
            opt.step()
            return prox
        return step

    def drive(run, model, opt):
        w0, b0 = model.state_dict().values()
        return [run(x, y, w0, b0) for x, y in _batches(device)]

    run = _both(device, build, drive)
    assert run.captures == 1


def test_two_arguments_sharing_an_array_are_told_apart(device):
    g = ndl.compile(lambda a, b: a * 2 + b)
    x = _const([1.0, 1.0], device)
    assert g(x, x.detach()).numpy().tolist() == [3.0, 3.0]
    p, q = _const([10.0, 10.0], device), _const([100.0, 100.0], device)
    assert g(p, q).numpy().tolist() == [120.0, 120.0]
    assert g(q, q.detach()).numpy().tolist() == [300.0, 300.0]
    from needle.autograd import array_function

    @array_function
    def double(a):
        return a * 2

    # the shared array itself, not through a Tensor: either argument's at replay
    raw = ndl.compile(lambda a, b: ndl.Tensor.make_const(double(a._array), device=device) + b)
    with pytest.raises(ndl.CompileError, match="several Tensors"):
        raw(x, x.detach())
    assert raw(p, q).numpy().tolist() == [120.0, 120.0]


def test_an_argument_the_step_also_reads_from_outside_records_again(device):
    w = _const([1.0, 1.0], device)
    f = ndl.compile(lambda a: a + w)  # called with w itself first
    assert f(w).numpy().tolist() == [2.0, 2.0]
    z = _const([0.0, 0.0], device)
    assert f(z).numpy().tolist() == [1.0, 1.0] and f.captures == 2
    assert f(w).numpy().tolist() == [2.0, 2.0]  # (the later program serves both)
    np.random.seed(0)
    lin = nn.Linear(2, 2, device=device)
    x = _const([[1.0, 2.0]], device)
    g = ndl.compile(lambda weight: lin(x) + weight.sum())  # a parameter as an argument
    other = _const(np.zeros((2, 2)), device)
    g(lin.weight)
    _same([g(other), g(lin.weight)], [lin(x) + other.sum(), lin(x) + lin.weight.sum()])


# ----- 2, 3: a value read to the host and returned ------------------------------------------
def test_a_returned_host_read_replays_on_every_device(device):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(3, 4, device=device), nn.ReLU(),
                          nn.Linear(4, 2, device=device))
    predict = ndl.compile(lambda x: model(x).numpy())
    total = ndl.compile(lambda x: x.sum().item())
    for x, _ in _batches(device, 3):
        out = predict(x)
        assert isinstance(out, np.ndarray) and np.array_equal(out, model(x).numpy())
        assert total(x) == x.sum().item()
    assert predict.captures == total.captures == 1


def test_a_returned_host_read_also_used_inside_the_step_raises(device):
    np.random.seed(0)
    lin = nn.Linear(3, 1, device=device)
    opt = ndl.optim.SGD(lin.parameters(), lr=0.1)
    x = _batches(device, 1)[0][0]

    @ndl.compile
    def train(x):
        opt.reset_grad()
        loss = (lin(x) ** 2).sum()
        loss.backward()
        lval = loss.item()  # read here
        opt.lr = 0.1 if lval < 1.0 else 0.01  # and used: it would be frozen
        opt.step()
        return lval

    with pytest.raises(ndl.CompileError, match="test_compile_audit.py:.*loss.item()"):
        train(x)

    def scaled(x):
        v = x.sum().item()
        return v, x / v

    with pytest.raises(ndl.CompileError, match="after"):
        ndl.compile(scaled)(x)
    with pytest.raises(ndl.CompileError, match="also holds the number"):  # (2 * v: frozen)
        ndl.compile(lambda x: (lambda v: (v, 2 * v))(x.sum().item()))(x)

    def both(x):  # reads at the end of the step are fine, several of them too
        s, m = x.sum(), (x * x).sum(axes=(0,))
        return s.item(), m.numpy()

    step = ndl.compile(both)
    for x, _ in _batches(device, 3):
        _same(step(x), both(x))
    assert step.captures == 1


# ----- 4: a copy, made inside the step, of a Tensor made before it ---------------------------
def test_a_copy_of_a_parameter_made_inside_the_step_reads_it_at_replay(device):
    other = ndl.strict() if device.kind == "cpu" else ndl.cpu()

    def build(model, opt):
        def step(x, y):
            snap = ndl.Tensor(model.weight, requires_grad=False)  # before the update
            moved = model.bias.to(other)
            opt.reset_grad()
            nn.SoftmaxLoss()(model(x), y).backward()
            opt.step()
            return snap, moved
        return step

    def drive(run, model, opt):
        return [t for x, y in _batches(device) for t in run(x, y)]

    _both(device, build, drive)


def test_one_hot_of_labels_made_before_the_step(device):
    labels = _const([0, 1, 2], device, np.int64)
    f = lambda x: x * ndl.init.one_hot(4, labels, device=device)  # noqa: E731
    step = ndl.compile(f)
    for x in (_const(np.ones((3, 4)), device), _const(np.full((3, 4), 2.0), device)):
        _same([step(x)], [f(x)])
    labels.data = _const([3, 3, 0], device, np.int64)  # new data: read at replay
    x = _const(np.ones((3, 4)), device)
    _same([step(x)], [f(x)])


# ----- 5: a gradient read while it is None ----------------------------------------------------
def test_gradients_accumulated_by_hand_across_calls(device):
    def build(model, opt):
        def micro(x, y):  # backward overwrites .grad: add the old one back
            old = [p.grad for p in model.parameters()]
            loss = nn.SoftmaxLoss()(model(x), y)
            loss.backward(create_graph=False)
            for p, g in zip(model.parameters(), old):
                if g is not None:
                    p.grad = p.grad + g
            return loss
        return micro

    def drive(run, model, opt):
        out = []
        for i, (x, y) in enumerate(_batches(device, 7)):
            out.append(run(x, y))
            if i % 3 == 2:
                opt.step()
                opt.reset_grad()
        return out

    _both(device, build, drive)


def test_a_gradient_read_as_none_after_an_update_raises_if_it_is_set_at_replay(device):
    np.random.seed(0)
    lin = nn.Linear(3, 2, device=device)
    opt = ndl.optim.SGD(lin.parameters(), lr=0.1)
    x = _batches(device, 1)[0][0]

    @ndl.compile
    def step(x):
        opt.step()  # (replayed: what it leaves in .grad is not the step's to know)
        return x * 2 if lin.weight.grad is None else x

    step(x)
    lin(x).sum().backward()
    with pytest.raises(RuntimeError, match="None"):
        step(x)


# ----- 6: a result holding Tensors in another kind of object -------------------------------
def test_a_result_holding_tensors_in_an_object_raises_naming_its_type(device):
    @dataclass
    class Out:
        loss: ndl.Tensor

    with pytest.raises(ndl.CompileError, match="Out"):
        ndl.compile(lambda x: Out(x * 2))(_const([1.0, 2.0], device))
    with pytest.raises(ndl.CompileError, match="set"):
        ndl.compile(lambda x: {x * 2})(_const([1.0, 2.0], device))
    step = ndl.compile(lambda x: (x * 2)._array)  # an array the step computed: replayed
    for v in ([1.0, 2.0], [5.0, 6.0]):
        x = _const(v, device)
        assert np.array_equal(device.to_numpy(step(x)), (x * 2).numpy())


# ----- 7: a read through DLPack -------------------------------------------------------------
def test_a_read_through_dlpack_inside_the_step_raises(device):
    x = _const([1.0, 2.0], device)
    with pytest.raises(ndl.CompileError, match="DLPack"):
        ndl.compile(lambda x: x / float(x.__dlpack__() is not None))(x)
    if device.kind == "cpu":
        with pytest.raises(ndl.CompileError, match="DLPack"):
            ndl.compile(lambda x: x / float(np.from_dlpack(x).max()))(x)
    assert np.from_dlpack(_const([1.0, 2.0], ndl.cpu())).tolist() == [1.0, 2.0]  # outside


# ----- 8: signatures of floats -----------------------------------------------------------------
def test_negative_zero_and_nan_arguments():
    f = lambda x, s: x / s  # noqa: E731
    step = ndl.compile(f)
    x = _const([1.0, 2.0], ndl.cpu())
    with np.errstate(divide="ignore", invalid="ignore"):
        assert step(x, -0.0).numpy().tolist() == [-math.inf, -math.inf]
        assert step(x, 0.0).numpy().tolist() == [math.inf, math.inf]
        assert step.captures == 2
        for _ in range(3):
            assert np.isnan(step(x, float("nan")).numpy()).all()
        assert step.captures == 3  # NaN is one signature
        assert step(x, np.float32(-0.0)).numpy().tolist() == [-math.inf, -math.inf]
        assert step(x, np.float32(0.0)).numpy().tolist() == [math.inf, math.inf]
        assert step.captures == 5


# ----- 11b: objects as arguments -------------------------------------------------------------
def test_an_object_argument_holding_tensors_is_refused_and_namedtuples_are_tuples(device):
    g = lambda b: b.x * 2  # noqa: E731

    class Batch:
        pass

    b = Batch()
    b.x = _const([1.0, 2.0], device)
    with pytest.raises(ndl.CompileError, match="Batch"):
        ndl.compile(g)(b)
    NT = namedtuple("NT", "x")
    step = ndl.compile(g)
    for v in range(4):
        batch = NT(_const([float(v), 1.0], device))
        _same([step(batch)], [g(batch)])
    assert step.captures == 1
    np.random.seed(0)
    lin = nn.Linear(2, 2, device=device)
    apply = ndl.compile(lambda m, x: m(x))  # a Module argument is still keyed by identity
    x = _const([[1.0, 2.0]], device)
    _same([apply(lin, x), apply(lin, x)], [lin(x), lin(x)])


# ----- a Module's attributes assigned between calls -------------------------------------------
def test_module_attributes_assigned_between_calls_record_again(device):
    """Replays kept the Parameters, buffers and settings read when recording:
    `lin.weight = Parameter(...)`, `bn.running_mean = Tensor(...)`, `bn.eps = 10` and
    `drop.p = 0.5` after the first calls were silently ignored. Each now records again and
    the replay matches the eager call; a plain Tensor attribute kept by forward does not."""
    x = _const(np.arange(6.0).reshape(3, 2) / 7, device)
    lin = nn.Linear(2, 2, device=device)
    bn = nn.BatchNorm1d(2, device=device)
    bn.eval()
    model = nn.Sequential(lin, bn)
    step = ndl.compile(lambda x: model(x))
    step(x), step(x)
    assert step.captures == 1
    changes = [lambda: setattr(lin, "weight", nn.Parameter(_const([[1.0, 2.0], [3.0, 4.0]],
                                                                    device))),
               lambda: setattr(bn, "running_mean", _const([0.5, -0.5], device)),
               lambda: setattr(bn, "eps", 10.0)]
    for n, change in enumerate(changes, start=2):
        change()
        _same([step(x)], [model(x)])
        assert step.captures == n
        _same([step(x)], [model(x)])  # and then replays
        assert step.captures == n
    lin.kept = x * 2.0  # a plain Tensor attribute: no new recording
    step(x)
    assert step.captures == len(changes) + 1


def test_dropout_p_set_after_the_first_calls_is_used(device):
    drop = nn.Dropout(0.0)
    x = _const(np.ones((8, 8)), device)
    step = ndl.compile(lambda x: drop(x) * 1.0)
    assert step(x).numpy().sum() == 64.0
    drop.p = 0.5  # was replayed as p = 0: no entry zeroed
    out = step(x).numpy()
    assert set(np.unique(out)) <= {0.0, 2.0} and (out == 0).any() and step.captures == 2


# ----- the second compile audit: what a replay could not repeat ------------------------------
def test_backward_into_a_graph_built_before_the_step_raises(device):
    """A loss step compiled alone, the model's forward run eagerly outside: replays sent the
    first call's gradients back through the outside graph (losses 0.576/0.882 instead of
    0.571/0.953 by the fourth step). A replay cannot differentiate through it: an error."""
    lin = nn.Linear(3, 2, device=device)
    step = ndl.compile(lambda logits, y: nn.SoftmaxLoss()(logits, y).backward())
    x, y = _batches(device, n=1)[0]
    with pytest.raises(ndl.CompileError, match=r"reaches Affine's output, made before the "
                                               r"step .* Run that forward inside the step"):
        step(lin(x), y)
    z = lin(x).detach()  # detached (a leaf that requires grad), an ordinary argument
    z.requires_grad = True
    step(z, y)
    assert z.grad is not None and z.grad.shape == z.shape


def test_a_setting_assigned_after_the_step_called_the_module_records_again(device):
    """`out = drop(x); drop.p = next_p` (a schedule for the next call): replays kept p = 0
    and drew nothing. The guard reads the Module's assignments as they were at its first
    call, so the next call records again: eager's numbers (and draws)."""
    drop = nn.Dropout(0.0)

    def step(x, next_p):
        out = drop(x) * 1.0
        drop.p = next_p
        return out
    x = _const(np.ones((8, 8)), device)
    outs = []
    for run in (step, ndl.compile(step)):
        drop.p = 0.0
        ndl.manual_seed(3)
        outs.append([run(x, 0.5).numpy() for _ in range(3)])
    for eager, compiled in zip(*outs):
        np.testing.assert_array_equal(eager, compiled)
    assert (outs[1][1] == 0).any()  # the second call dropped

    class Lazy(nn.Module):  # a value cached at the first call: one more recording, then
        def __init__(self):  # replays (the cache is a constant, valid at every replay)
            super().__init__()
            self.scale, self.mask = None, None

        def forward(self, x):
            if self.scale is None:
                self.scale = 2.0
                self.mask = ndl.Tensor(np.ones(x.shape), device=x.device, dtype="float32",
                                       requires_grad=False)
            return x * self.mask * self.scale
    lazy = Lazy()
    compiled = ndl.compile(lambda x: lazy(x))
    for _ in range(4):
        _same([compiled(x)], [x * 2.0])
    assert compiled.captures == 2


def test_a_tensor_made_in_the_step_kept_on_a_module_raises(device):
    """An RNN keeping its hidden state as `self.h = h.detach()`: replays left the recording's
    state there and every call after computed from it (sums -0.50, -1.04 instead of -1.99,
    -2.71). An error that says to return the state instead."""
    class Stateful(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3, device=device)
            self.h = None

        def forward(self, x):
            h = self.lin(x) if self.h is None else self.lin(x) + self.h
            self.h = h.detach()
            return h
    m = Stateful()
    with pytest.raises(ndl.CompileError, match=r"a Tensor the step computed \(or an argument\) "
                                               r"is kept as Stateful.h .* Return it from the"):
        ndl.compile(lambda x: m(x).sum())(_batches(device, n=1)[0][0])


def test_an_argument_also_read_deep_in_a_closure_records_again(device):
    """The step read W four containers down its closure and was called with W, then with
    another Tensor: the closure's read became the argument (60 instead of 44). The search
    for what the step can reach now goes 6 levels down (and warns where it stops)."""
    w = _const(np.ones((2, 2)), device)
    cfg = {"a": {"b": {"c": {"ref": w}}}}

    def step(x):
        return (x * 2.0 + cfg["a"]["b"]["c"]["ref"]).sum()
    compiled = ndl.compile(step)
    other = _const(np.full((2, 2), 5.0), device)
    for x in (w, other, w):
        _same([compiled(x)], [step(x)])


def test_a_draw_kept_on_a_module_raises_and_an_unchanged_setting_replays(device):
    """A draw kept on a Module (`self.noise = init.randn(...)`) stayed the recording's at
    every replay, silently; assigning a setting its same value at every call recorded the
    step again at every call (20 captures for 20 calls)."""
    class Noisy(nn.Module):
        def forward(self, x):
            self.noise = ndl.init.randn(*x.shape, device=x.device, requires_grad=False)
            return x + self.noise
    noisy = Noisy()
    x = _const(np.ones((2, 2)), device)
    with pytest.raises(ndl.CompileError, match="kept as Noisy.noise"):
        ndl.compile(lambda x: noisy(x).sum())(x)
    drop, lin = nn.Dropout(0.0), nn.Linear(2, 2, device=device)

    @ndl.compile
    def step(x):
        out = drop(lin(x))
        drop.p = 0.0  # the same value each call
        return out
    for _ in range(5):
        step(x)
    assert step.captures == 1


def test_arguments_and_programs_are_freed_without_the_garbage_collector(device):
    """signature()'s recursive closure made a cycle holding each call's argument Tensors
    (56 batches of 2 MB alive before gc ran, +119 MB); a program's scope held a bound method
    of the program, so an evicted program waited for gc too."""
    import gc
    import weakref

    lin = nn.Linear(3, 2, device=device)
    step = ndl.compile(lambda x: lin(x).sum())
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        x = _const(np.ones((2, 3)), device)
        step(x)
        step(x)
        arg = weakref.ref(x)
        del x
        assert arg() is None
        programs = [weakref.ref(p) for p in step.programs()]
        del step
        assert all(p() is None for p in programs)
    finally:
        if was_enabled:
            gc.enable()


def test_what_depends_on_the_arguments_is_varying_and_a_mutated_list_records_again(device):
    """(The fourth review.) A one-hot of the labels kept on a Module stayed the recording's
    (array functions and device calls on the step's data were taken for constants), while a
    helper of constants cached on a Module was refused; a list changed in place and
    assigned back was taken as no change (4.0 replayed where eager gave 12.0); the same
    numpy scalar assigned at every call recorded at every call."""
    class Keep(nn.Module):
        def forward(self, x, y):
            self.y1h = ndl.init.one_hot(3, y, device=device)
            return (x * self.y1h).sum()
    keep = Keep()
    x = _const(np.ones((2, 3)), device)
    y = _const([0, 1], device, np.int64)
    with pytest.raises(ndl.CompileError, match="kept as Keep.y1h"):
        ndl.compile(lambda x, y: keep(x, y))(x, y)

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = [1.0]

        def forward(self, x):
            self.k = np.float64(2.0)  # the same numpy scalar each call: no change
            return x * self.s[0] * self.k
    m = Scaled()
    step = ndl.compile(lambda x: m(x).sum())
    for _ in range(3):
        step(x)
    assert step.captures == 2  # (k's first assignment came after m's first call)
    s = m.s
    s[0] = 3.0
    m.s = s
    _same([step(x)], [m(x).sum()])

    class Zero(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = np.array(1.0)  # a 0-d array: mutable, unlike a numpy scalar

        def forward(self, x):
            return x * float(self.c)
    z = Zero()
    step = ndl.compile(lambda x: z(x).sum())
    step(x)
    c = z.c
    c[()] = 5.0
    z.c = c
    _same([step(x)], [z(x).sum()])


_OPT = None
_MODEL = None
_BETA = 0.5


def _global_step(x, y):
    _OPT.reset_grad()
    loss = nn.SoftmaxLoss()(_MODEL(x), y) * _BETA
    loss.backward()
    _OPT.step()
    return loss


def test_a_global_or_closure_variable_rebound_after_the_recording_records_again(device):
    """(A port audit.) A step naming a global optimizer kept replaying the old Adam after
    `opt = SGD(...)`, trained the old model after `model = ...`, and froze a coefficient
    (`beta` annealed in a closure or a global) at its first value."""
    global _OPT, _MODEL, _BETA
    rng = np.random.default_rng(0)
    x = _const(rng.standard_normal((4, 5)), device)
    y = _const([0, 1, 2, 1], device, np.int64)

    def run(compiled):
        global _OPT, _MODEL, _BETA
        np.random.seed(1)
        _MODEL, _BETA = nn.Linear(5, 3, device=device), 0.5
        _OPT = ndl.optim.Adam(_MODEL.parameters(), lr=0.01)
        step = ndl.compile(_global_step) if compiled else _global_step
        losses = [step(x, y)]
        _OPT = ndl.optim.SGD(_MODEL.parameters(), lr=0.1)  # a new optimizer: fine-tuning
        losses.append(step(x, y))
        _BETA = 0.25  # annealed
        losses.append(step(x, y))
        old = _MODEL
        _MODEL = nn.Linear(5, 3, device=device)  # a new model (and its optimizer)
        _OPT = ndl.optim.SGD(_MODEL.parameters(), lr=0.1)
        losses += [step(x, y), step(x, y)]
        return losses, [p.numpy() for m in (old, _MODEL) for p in m.parameters()], step
    eager, eager_weights, _ = run(False)
    compiled, compiled_weights, step = run(True)
    _same(compiled, eager)
    for a, b in zip(compiled_weights, eager_weights):
        np.testing.assert_array_equal(a, b)
    assert step.captures == 4  # (the last call replays: nothing was rebound)

    beta = 1.0
    m = nn.Linear(5, 3, device=device)

    def closure_step(x):
        return (m(x) * beta).sum()
    f = ndl.compile(closure_step)
    first = f(x).numpy()
    beta = 2.0
    np.testing.assert_allclose(f(x).numpy(), 2 * first, rtol=1e-6)
    assert f.captures == 2
    beta = 2.0  # (an equal float: no new recording)
    f(x)
    assert f.captures == 2


def test_module_to_where_nothing_moves_and_numpy_objects_without_shape(device):
    """(A review.) Module.to() assigned `device` on every call, which recorded a compiled
    step again each time; reassigning a numpy ufunc on a Module raised AttributeError."""
    m = nn.Module()
    m.f = np.tanh
    m.f = np.exp  # (no .shape: not a number, a change)
    t = nn.Transformer(8, 16, 1, num_head=2, dim_head=4, device=device)
    step = ndl.compile(lambda x: t(x)[0].sum())
    x = _const(np.ones((3, 2, 8)), device)
    for _ in range(3):
        t.to(device)
        step(x)
    assert step.captures == 1 and t.device is device


step = None  # (a global named as an attribute the step uses: `opt.step()`)
_K = np.float64(0.5)


def test_globals_sharing_an_attributes_name_or_equal_numpy_scalars_record_once(device):
    """(A review.) The name guards took every name in the code (attributes too), so a loop
    `for step in range(n)` around a step calling `opt.step()` recorded at every call; an
    equal numpy scalar assigned again recorded again."""
    global step, _K
    m = nn.Linear(3, 2, device=device)
    opt = ndl.optim.SGD(m.parameters(), lr=0.1)

    def train(x):
        opt.reset_grad()
        loss = (m(x) * _K).sum()
        loss.backward()
        opt.step()
        return loss
    f = ndl.compile(train)
    x = _const(np.ones((2, 3)), device)
    for step in range(4):  # noqa: B007 (the global named step changes)
        _K = np.float64(0.5)  # (an equal scalar, a new object)
        f(x)
    assert f.captures == 1
    _K = np.float64(0.25)
    f(x)
    assert f.captures == 2


_CALLS = 0


def test_third_audit_iterators_deep_objects_and_global_stores_are_compile_errors(device):
    """(A third audit.) An iterator argument (a DataLoader's) replayed its first batch
    forever; an object holding Tensors two levels down replayed the recorded ones; a step
    assigning a global (`global t; t += 1`) froze it at its recorded value."""
    x = _const(np.ones((2, 3)), device)
    f = ndl.compile(lambda it: next(it).sum())
    with pytest.raises(ndl.CompileError, match="is an iterator: a replay would not draw"):
        f(iter([x, x]))

    class Batch:
        def __init__(self, x):
            self.items = [[x]]
    g = ndl.compile(lambda b: b.items[0][0].sum())
    with pytest.raises(ndl.CompileError, match="of type Batch holds Tensors"):
        g(Batch(x))

    def counting(x):
        global _CALLS
        _CALLS += 1
        return x.sum() * _CALLS
    with pytest.raises(ndl.CompileError, match="assigned the global or nonlocal variable"):
        ndl.compile(counting)(x)
    total = 0

    def closing(x):
        nonlocal total
        total += 1
        return x.sum()
    with pytest.raises(ndl.CompileError, match="variable.*total"):
        ndl.compile(closing)(x)

    count = 0

    def bumping(x):  # (a review: a nested function's nonlocal of the enclosing scope)
        def bump():
            nonlocal count
            count += 1
        bump()
        return x.sum()
    with pytest.raises(ndl.CompileError, match="variable.*count"):
        ndl.compile(bumping)(x)

    def own_cells(x):  # (a local captured by a lambda is the step's own: fine)
        k = 2.0
        scale = lambda t: t * k  # noqa: E731
        return scale(x).sum()
    np.testing.assert_array_equal(ndl.compile(own_cells)(x).numpy(), 12.0)

    np.random.seed(0)  # (a review: an optimizer or a holder of the model and optimizer as
    model = nn.Linear(3, 2, device=device)  # an argument is the step's own state: fine)
    opt = ndl.optim.Adam(model.parameters(), lr=0.1)

    class Trainer:
        def __init__(self):
            self.model, self.opt, self.device = model, opt, device

    def train(t, o, x):
        o.reset_grad()
        loss = t.model(x).sum()
        loss.backward()
        o.step()
        return loss
    s = ndl.compile(train)
    for _ in range(3):
        s(Trainer(), opt, x)
    vocab = type("Vocab", (), {})()
    vocab.words = [str(i) for i in range(100000)]  # (searched once, when recorded)
    ndl.compile(lambda v, x: x.sum())(vocab, x)

    class Holder:  # (a review: a Tensor after 8 other attributes, and beside an optimizer)
        def __init__(self):
            for i in range(8):
                setattr(self, f"a{i}", i)
            self.optimizer, self.x = opt, x
    with pytest.raises(ndl.CompileError, match="of type Holder holds Tensors"):
        ndl.compile(lambda h: h.x.sum())(Holder())

    class State:  # (a review: a Tensor set on an argument after the recording, by the step
        h = None  # itself, the RNN-state pattern, replayed the recorded one)

    def carry(st, x):
        out = x.sum() if st.h is None else (x + st.h).sum()
        st.h = x.detach()
        return out
    c, st = ndl.compile(carry), State()
    c(st, x)
    with pytest.raises(ndl.CompileError, match="of type State holds Tensors"):
        c(st, x)


def test_third_audit_guards_modes_cells_seeds_leaves_and_keys(device):
    """(A third audit.) model.eval() inside the step dropped the guard on its attributes; an
    LSTM's cells, used but never called, were not guarded; ndl.manual_seed inside the step
    was not replayed; a non-leaf argument after a leaf one replayed without its graph;
    dict keys 1, 1.0 and True shared a program."""
    np.random.seed(0)
    lin = nn.Linear(3, 2, device=device)
    x = _const(np.ones((2, 3)), device)

    def evaluate(x):
        lin.eval()
        return lin(x).sum()
    f = ndl.compile(evaluate)
    f(x)
    lin.weight = nn.Parameter(np.full((3, 2), 2.0), device=device, dtype="float32")
    _same([f(x)], [evaluate(x)])

    lstm = nn.LSTM(3, 2, device=device)
    seq = _const(np.ones((4, 1, 3)), device)
    g = ndl.compile(lambda s: lstm(s)[0].sum())
    g(seq)
    cell = lstm.lstm_cells[0]
    cell.W_hh = nn.Parameter(np.full(tuple(cell.W_hh.shape), 0.5), device=device,
                             dtype="float32")
    _same([g(seq)], [lstm(seq)[0].sum()])

    drop = nn.Dropout(0.5)

    def seeded(x):
        ndl.manual_seed(3)
        return drop(x)
    h = ndl.compile(seeded)
    _same([h(x) for _ in range(3)], [seeded(x) for _ in range(3)])
    assert h.captures == 1

    w = ndl.Tensor(np.ones((2, 3)), device=device, dtype="float32")
    k = ndl.compile(lambda a: (a * a).sum().backward())
    k(w)  # a leaf: recorded
    with pytest.raises(ndl.CompileError, match="made before the step"):
        k(w * 2.0)  # its graph is outside the step: recorded again, and refused
    keyed = ndl.compile(lambda d: x.sum() * float(len(repr(next(iter(d))))))
    assert [keyed({key: 0}).numpy().item() for key in (1, 1.0, True)] == [6.0, 18.0, 24.0]


def test_a_step_recorded_at_every_call_says_so_once(device):
    """(A third audit.) A step whose guards fail at every call (a GAN's requires_grad set
    inside it, an attribute changed each call) recorded at every call, slower than eagerly,
    silently: after 2 * max_cache + 1 recordings of one signature it warns, once."""
    lin = nn.Linear(3, 2, device=device)
    x = _const(np.ones((2, 3)), device)

    def step(x):
        out = lin(x).sum()
        lin.k = object()  # a new setting after the call: the next call records again
        return out
    f = ndl.compile(step, max_cache=2)
    with pytest.warns(RuntimeWarning, match="recorded 5 times in a row for the same arguments"):
        for _ in range(5):
            f(x)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            f(x)
    assert f.captures == 8

    k = 0.0

    def annealed(x):  # (a review: k changed once an epoch records once an epoch, replays
        return lin(x).sum() * k  # in between: no warning, however many epochs)
    g = ndl.compile(annealed, max_cache=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for epoch in range(8):
            k = float(epoch)
            for _ in range(10):
                g(x)
    assert g.captures == 8

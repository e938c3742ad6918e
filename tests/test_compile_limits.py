"""ndl.compile's limits: each is a clear error at the first call or a retrace, never a wrong
number. Results are compared with the same calls made eagerly, to the bit."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.autograd import graph


def _model(device, p: float = 0.3):
    np.random.seed(3)
    model = nn.Sequential(nn.Linear(3, 5, device=device), nn.ReLU(), nn.Dropout(p),
                          nn.Linear(5, 2, device=device))
    return model, ndl.optim.Adam(model.parameters(), lr=0.01)


def _batches(device, n: int = 6, batch: int = 4):
    rng = np.random.default_rng(5)
    return [(ndl.Tensor(rng.standard_normal((batch, 3)).astype(np.float32), device=device,
                        requires_grad=False),
             ndl.Tensor(rng.integers(0, 2, batch), device=device, requires_grad=False))
            for _ in range(n)]


def _train_step(model, opt):
    loss_fn = nn.SoftmaxLoss()

    def step(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def _params(model) -> list[np.ndarray]:
    return [p.numpy() for p in model.parameters()]


def _line_of(marker: str) -> int:
    """The line number of this file holding `marker` (where a test expects an error)."""
    with open(__file__) as f:
        for n, line in enumerate(f, 1):
            if marker in line and "_line_of" not in line:
                return n
    raise AssertionError(marker)


def _twins(device, drive, build=_train_step, p: float = 0.3):
    """`drive(run, model, opt)` with `run = build(model, opt)` called eagerly, then with it
    compiled, from the same seeds: [(drive's result, parameters after, run)] for both."""
    out = []
    for compiled in (False, True):
        model, opt = _model(device, p)
        device.manual_seed(11)
        run = build(model, opt)
        if compiled:
            run = ndl.compile(run)
        out.append((drive(run, model, opt), _params(model), run))
    return out


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        x, y = (v.numpy() if isinstance(v, ndl.Tensor) else np.asarray(v) for v in (x, y))
        assert x.dtype == y.dtype and np.array_equal(x, y)


def _compiled_matches_eager(device, drive, build=_train_step):
    """`_twins`, asserting that drive's results and the parameters after are the same both
    ways, to the bit; the compiled run (for its `captures`)."""
    (eager, p_eager, _), (compiled, p_compiled, run) = _twins(device, drive, build)
    _assert_same(eager, compiled)
    _assert_same(p_eager, p_compiled)
    return run


# ----- signatures --------------------------------------------------------------------------
def test_a_new_signature_records_again_and_the_cache_is_bounded(device):
    model, opt = _model(device)
    step = ndl.compile(_train_step(model, opt), max_cache=2)
    small, large = _batches(device, 2, 4), _batches(device, 2, 7)
    step(*small[0])
    step(*small[1])
    assert step.captures == 1
    step(*large[0])  # another batch size: recorded again
    assert step.captures == 2
    step(*small[0])  # both kept
    step(*large[1])
    assert step.captures == 2
    x, y = _batches(device, 1, 2)[0]
    step(x, y)  # a third shape evicts the least recently used (batch 4)
    step(*small[1])
    assert step.captures == 4 and len(step.programs()) == 2


class _Trainer:
    """A step as a method: each instance trains its own model."""

    def __init__(self, device, p: float = 0.3):
        self.model, self.opt = _model(device, p)
        self.loss_fn = nn.SoftmaxLoss()

    def step(self, x, y):
        self.opt.reset_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss


def _compiled_trainer(equal_instances: bool = False, max_cache: int = 8) -> type:
    """A fresh class whose `step` is `_Trainer.step` compiled as a method; with
    `equal_instances`, all its instances compare (and hash) equal."""

    class Compiled(_Trainer):
        step = ndl.compile(_Trainer.step, max_cache=max_cache)

    if equal_instances:
        Compiled.__eq__ = lambda self, other: isinstance(other, Compiled)
        Compiled.__hash__ = lambda self: 0
    return Compiled


@pytest.mark.parametrize("equal_instances", [False, True], ids=["plain", "equal"])
def test_a_compiled_method_binds_each_instance(equal_instances, device):
    # before: Compiled had no __get__, so `m.step(x, y)` called step(x, y), self missing.
    # Instances that compare equal still get their own program: self is keyed by identity
    batches = _batches(device)
    cls = _compiled_trainer(equal_instances)
    results, params = {}, {}
    for kind, trainer in (("eager", _Trainer), ("compiled", cls)):
        device.manual_seed(11)
        a = trainer(device)
        b = trainer(device, p=0.5)  # the same first weights, another dropout rate
        results[kind] = [m.step(x, y) for x, y in batches for m in (a, b)]
        params[kind] = _params(a.model) + _params(b.model)
    _assert_same(results["eager"], results["compiled"])
    _assert_same(params["eager"], params["compiled"])
    assert not np.array_equal(_params(a.model)[0], _params(b.model)[0])  # trained apart
    # one cache for the method, each instance recorded once
    assert a.step.captures == b.step.captures == cls.step.captures == 2
    assert a.step.__self__ is a and a.step.__func__ is cls.step and a.step == a.step
    assert a.step.__name__ == "step" and a.step != b.step
    assert cls.step.__get__(None, cls) is cls.step


def test_a_compiled_method_called_on_the_class_and_its_cache_limit(device):
    import gc
    import weakref

    cls = _compiled_trainer(equal_instances=True, max_cache=3)
    x, y = _batches(device, 1)[0]
    first = cls(device)
    cls.step(first, x, y)  # through the class: the same as first.step(x, y)
    first.step(x, y)  # the same signature: replayed
    assert cls.step.captures == 1
    for m in (cls(device), cls(device), cls(device)):  # max_cache=3: `first` is dropped
        m.step(x, y)
    assert cls.step.captures == 4 and len(cls.step.cache) == 3
    gone = weakref.ref(first)  # and let go: the cache keeps at most max_cache instances
    del first
    gc.collect()
    assert gone() is None


def test_static_methods_compiled_either_way_take_no_self(device):
    class Steps:
        @ndl.compile
        @staticmethod
        def double(x):
            return x * 2

        @staticmethod
        @ndl.compile
        def triple(x):
            return x * 3

    x = ndl.Tensor([1.0, 2.0], device=device)
    for steps in (Steps, Steps()):
        assert steps.double(x).numpy().tolist() == [2.0, 4.0]
        assert steps.triple(x).numpy().tolist() == [3.0, 6.0]
    assert Steps.double.captures == Steps.triple.captures == 1


def test_replays_build_no_graph_and_return_constants(device):
    model, opt = _model(device)
    step = ndl.compile(_train_step(model, opt))
    batches = _batches(device, 2)
    step(*batches[0])
    called = []

    def profile(frame, event, arg):
        if event == "call":
            called.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        loss = step(*batches[1])
    finally:
        sys.setprofile(None)
    for name in ("make_from_op", "_evaluate", "gradient", "backward", "find_topo_sort"):
        assert name not in called
    # Values made: the returned loss, and each `.grad` the optimizer reads (as a Tensor)
    assert called.count("_init") == 1 + len(model.parameters())
    assert isinstance(loss, ndl.Tensor) and loss.op is None and not loss.requires_grad


def test_compile_as_a_decorator_and_with_arguments(device):
    model, opt = _model(device)
    loss_fn = nn.SoftmaxLoss()

    @ndl.compile
    def evaluate(x, y):
        return loss_fn(model(x), y)

    @ndl.compile(max_cache=1)
    def logits(x):
        return model(x)

    model.eval()
    with ndl.no_grad():
        x, y = _batches(device, 1)[0]
        assert np.array_equal(evaluate(x, y).numpy(), evaluate(x, y).numpy())
        assert evaluate.captures == 1 and evaluate.__name__ == "evaluate"
        assert np.array_equal(logits(x).numpy(), model(x).numpy())
    with pytest.raises(ValueError, match="max_cache"):
        ndl.compile(lambda x: x, max_cache=0)
    with pytest.raises(TypeError, match="function"):
        ndl.compile(3)


# ----- reads to the host -------------------------------------------------------------------
@pytest.mark.parametrize("read", ["numpy", "item", "float"])
def test_a_read_to_the_host_inside_the_step_raises_naming_the_line(read, device):
    model, opt = _model(device)
    loss_fn = nn.SoftmaxLoss()

    @ndl.compile
    def step(x, y):
        loss = loss_fn(model(x), y)
        if read == "numpy":
            value = loss.numpy()  # host read here
        elif read == "item":
            value = loss.item()  # host read here
        else:
            value = float(loss)  # host read here
        return loss * value

    line = _line_of(f"value = {'float(loss)' if read == 'float' else 'loss.' + read}")
    with pytest.raises(ndl.CompileError, match=rf"test_compile_limits.py:{line} "):
        step(*_batches(device, 1)[0])


def test_python_if_on_a_tensor_raises_naming_the_line(device):
    model, _ = _model(device)

    @ndl.compile
    def step(x):
        out = model(x).sum()
        if out:  # control flow here
            return out
        return -out

    with pytest.raises(ndl.CompileError, match=rf":{_line_of('control flow here')} "):
        step(_batches(device, 1)[0][0])
    with pytest.raises(ndl.CompileError, match="host"):  # `if t.item() > 0` reads the host
        ndl.compile(lambda x: model(x).sum() if model(x).sum().item() > 0 else x)(
            _batches(device, 1)[0][0])


def test_a_value_read_to_the_host_may_be_the_result(device):
    def build(model, opt):
        step = _train_step(model, opt)
        return lambda x, y: step(x, y).item()

    def drive(run, model, opt):
        return [run(x, y) for x, y in _batches(device, 5)]

    (eager, p_eager, _), (compiled, p_compiled, run) = _twins(device, drive, build)
    assert all(type(v) is float for v in compiled) and run.captures == 1
    assert eager == compiled
    _assert_same(p_eager, p_compiled)


def test_course_ndarray_views_inside_the_step_raise(device):
    model, _ = _model(device)
    step = ndl.compile(lambda x: model(x).cached_data)
    with pytest.raises(ndl.CompileError, match="cached_data"):
        step(_batches(device, 1)[0][0])


def test_an_array_computed_outside_the_ops_raises_naming_the_line(device):
    model, _ = _model(device)

    @ndl.compile
    def step(x):
        h = model(x)
        twice = ndl.Tensor.make_const(h._array * 2, device=device)  # raw array here
        return h + twice

    with pytest.raises(ndl.CompileError, match=rf":{_line_of('raw array here')} "):
        step(_batches(device, 1)[0][0])
    assert graph._TRACER is None  # uninstalled after the error


# ----- state changed between calls ---------------------------------------------------------
def test_a_learning_rate_set_between_calls_is_read_at_replay(device):
    def drive(run, model, opt):
        losses = []
        for i, (x, y) in enumerate(_batches(device, 6)):
            opt.lr = 0.05 / (1 + i)  # a schedule outside the step
            losses.append(run(x, y))
        return losses

    run = _compiled_matches_eager(device, drive)
    assert run.captures == 1


def test_a_learning_rate_passed_as_an_argument_records_each_value(device):
    def build(model, opt):
        step = _train_step(model, opt)

        def scheduled(x, y, lr):
            opt.lr = lr  # a Python value inside the step: part of the signature
            return step(x, y)

        return scheduled

    def drive(run, model, opt):
        return [run(x, y, lr) for (x, y), lr in zip(_batches(device, 4), (0.1, 0.1, 0.02, 0.1))]

    run = _compiled_matches_eager(device, drive, build)
    assert run.captures == 2  # one per value


def test_train_and_eval_mode_changes_record_again(device):
    def drive(run, model, opt):
        losses = []
        for i, (x, y) in enumerate(_batches(device, 6)):
            model.train(i % 3 != 2)  # every third step in eval mode: no Dropout
            losses.append(run(x, y))
        return losses

    run = _compiled_matches_eager(device, drive)
    assert run.captures == 2  # one program per mode, both kept


def test_requires_grad_changes_record_again(device):
    def drive(run, model, opt):
        first = model.parameters()[0]
        losses = []
        for i, (x, y) in enumerate(_batches(device, 5)):
            first.requires_grad = i != 2  # frozen for one step: no gradient, no update
            losses.append(run(x, y))
        return losses

    run = _compiled_matches_eager(device, drive)
    assert run.captures == 2


def test_data_of_a_parameter_set_outside_the_step_is_read_at_replay(device):
    def drive(run, model, opt):
        losses = []
        weight = model.parameters()[0]
        for i, (x, y) in enumerate(_batches(device, 5)):
            if i in (2, 3):
                weight.data = weight.data * 0.5  # new data, read by the next replay
            losses.append(run(x, y))
        return losses

    run = _compiled_matches_eager(device, drive)
    assert run.captures == 1


def test_a_parameter_of_another_shape_records_again(device):
    rng = np.random.default_rng(0)
    w = ndl.Tensor(rng.standard_normal((3, 4)).astype(np.float32), device=device)
    x = ndl.Tensor(rng.standard_normal((2, 3)).astype(np.float32), device=device)
    step = ndl.compile(lambda x: (x @ w).relu().sum(axes=(0,)))
    assert step(x).shape == (4,)
    w.data = ndl.Tensor(rng.standard_normal((3, 6)).astype(np.float32), device=device)
    out = step(x)
    assert out.shape == (6,) and step.captures == 2
    assert np.array_equal(out.numpy(), (x @ w).relu().sum(axes=(0,)).numpy())


def test_replacing_a_parameters_data_inside_the_step_is_replayed(device):
    def build(model, opt):
        step, bias = _train_step(model, opt), model.parameters()[1]

        def shrink(x, y):  # a hand-written decay inside the step, through .data
            bias.data = bias.data * 0.9
            return step(x, y)

        return shrink

    def drive(run, model, opt):
        return [run(x, y) for x, y in _batches(device, 4)]

    _compiled_matches_eager(device, drive, build)


def test_replacing_data_without_mark_modified_raises(device):
    model, _ = _model(device)
    bias = model.parameters()[1]

    @ndl.compile
    def step(x):
        out = model(x)
        bias._array = bias._array * 2  # no mark_modified: invisible to the recorder
        return out

    with pytest.raises(ndl.CompileError, match="replaced inside"):
        step(_batches(device, 1)[0][0])


# ----- gradient clipping, reset_grad -------------------------------------------------------
def test_gradient_clipping_and_reset_grad_inside_the_step(device):
    def build(model, opt):
        loss_fn = nn.SoftmaxLoss()

        def clipped(x, y):
            opt.reset_grad()
            loss = loss_fn(model(x), y)
            loss.backward(create_graph=False)
            norm = nn.utils.clip_grad_norm_(iter(model.parameters()), 0.05)  # an iterator
            opt.step()
            return loss, norm

        return clipped

    def drive(run, model, opt):
        return [t for x, y in _batches(device, 5) for t in run(x, y)]

    (eager, p_eager, _), (compiled, p_compiled, run) = _twins(device, drive, build)
    _assert_same(eager, compiled)
    _assert_same(p_eager, p_compiled)
    assert run.captures == 1
    assert float(eager[1]) > 0.05  # the clipping did scale the gradients


def test_a_mode_set_inside_the_step_is_replayed(device):
    def build(model, opt):
        loss_fn = nn.SoftmaxLoss()

        def evaluate(x, y):  # an eval step that leaves the model training
            model.eval()
            loss = loss_fn(model(x), y)
            model.train()
            return loss

        return evaluate

    def drive(run, model, opt):
        with ndl.no_grad():
            return [run(x, y) for x, y in _batches(device, 4)]

    (eager, _, _), (compiled, _, run) = _twins(device, drive, build)
    _assert_same(eager, compiled)
    assert run.captures == 1


def test_a_gradient_from_before_the_step_is_read_at_replay(device):
    rng = np.random.default_rng(2)
    xs = [ndl.Tensor(rng.standard_normal((2, 3)).astype(np.float32), device=device,
                     requires_grad=False) for _ in range(4)]
    results = []
    for compiled in (False, True):
        w = ndl.Tensor(rng.standard_normal((3, 2)).astype(np.float32) * 0 + 1, device=device)
        w.grad = ndl.init.zeros(3, 2, device=device)

        def accumulate(x, w=w):  # gradient accumulation across calls, by hand
            old = w.grad
            (x @ w).relu().sum().backward(create_graph=False)
            w.grad = w.grad + old
            return w.grad

        run = ndl.compile(accumulate) if compiled else accumulate
        results.append([run(x).numpy() for x in xs] + [w.grad.numpy()])
    _assert_same(*results)


def test_bool_of_a_tensor_reads_one_element(device):
    assert bool(ndl.Tensor([2.0], device=device)) and not bool(ndl.Tensor(0.0, device=device))
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(ndl.Tensor([1.0, 2.0], device=device))


def test_an_array_function_is_replayed_and_an_op_holding_a_tensor_is_refused(device):
    from needle.autograd import array_function

    @array_function
    def clipped(a, low: float):  # a raw-array helper of the user's, marked
        return device.xp.maximum(a, low)

    class Shift(ndl.TensorOp):  # an op holding an array (an input of the replay)
        def __init__(self, by):
            self.by = by

        def compute(self, a):
            return a + self.by

        def gradient(self, out_grad, node):
            return out_grad

    rng = np.random.default_rng(4)
    xs = [ndl.Tensor(rng.standard_normal((3,)).astype(np.float32), device=device)
          for _ in range(3)]

    def fn(x):
        return Shift(clipped(x * 2, 0.5))(x)

    step = ndl.compile(fn)
    for x in xs:
        assert np.array_equal(step(x).numpy(), fn(x).numpy())
    assert step.captures == 1

    class Holds(Shift):
        def compute(self, a):
            return a + self.by._array

    with pytest.raises(ndl.CompileError, match="holds a Tensor"):
        ndl.compile(lambda x: Holds(x * 2)(x))(xs[0])


def test_an_integer_read_to_the_host_is_refused_even_when_returned(device):
    # Python shares small ints: `return n` cannot be told from a constant 1 (wrong at replay)
    x = ndl.Tensor(np.array([1, 0, 0]), device=device, requires_grad=False)

    @ndl.compile
    def count(x):
        n = x.sum().item()  # an int read here (1: the same object as the literal below)
        return 1 if n else 0

    with pytest.raises(ndl.CompileError, match=f":{_line_of('an int read here')} "):
        count(x)

"""ndl.optim.lr_scheduler against torch.optim.lr_scheduler step by step, against the
schedules' formulas written out here, through checkpoints and inside ndl.compile."""

from __future__ import annotations

import io
import math
import warnings
from bisect import bisect_right

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from needle.optim import lr_scheduler

STEPS = 25


def _opt(device, lr: float = 0.1, kind: str = "sgd") -> optim.Optimizer:
    """A needle optimizer of one small parameter (its grad None: step() only counts)."""
    p = nn.Parameter(np.zeros(3), device=device)
    return optim.Adam([p], lr=lr) if kind == "adam" else optim.SGD([p], lr=lr)


def _torch_opt(lr: float = 0.1):
    torch = pytest.importorskip("torch")
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=lr)


# (name, needle and torch share the constructor's arguments after the optimizer)
SCHEDULES = {
    "step": ("StepLR", (3,), {"gamma": 0.5}),
    "step-every": ("StepLR", (1,), {"gamma": 0.9}),
    "multistep": ("MultiStepLR", ([2, 5, 5, 9, 30],), {"gamma": 0.5}),
    "exponential": ("ExponentialLR", (0.8,), {}),
    "cosine": ("CosineAnnealingLR", (7,), {"eta_min": 0.001}),
    "cosine-cycles": ("CosineAnnealingLR", (4,), {}),  # 25 steps: past T_max, up and down
    "lambda": ("LambdaLR", (lambda e: 1 / (e + 1) + 0.1 * (e % 3),), {}),
}


def _run(sched, opt, steps: int = STEPS) -> list[float]:
    """The lr after the constructor and after each of `steps` (optimizer, scheduler) steps."""
    lrs = [sched.get_last_lr()[0]]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    return lrs


def _torch_lrs(name: str, lr: float = 0.1, steps: int = STEPS) -> list[float]:
    cls, args, kwargs = SCHEDULES[name]
    torch_opt = _torch_opt(lr)
    sched = getattr(__import__("torch").optim.lr_scheduler, cls)(torch_opt, *args, **kwargs)
    lrs = [sched.get_last_lr()[0]]
    for _ in range(steps):
        torch_opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    return lrs


def _make(name: str, opt, **extra):
    cls, args, kwargs = SCHEDULES[name]
    return getattr(lr_scheduler, cls)(opt, *args, **kwargs, **extra)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedules_match_pytorch_step_by_step(name, device):
    opt = _opt(device)
    sched = _make(name, opt)
    lrs = _run(sched, opt)
    assert lrs == _torch_lrs(name)  # the same floats, not merely close
    assert opt.lr == lrs[-1] and sched.last_epoch == STEPS and sched.base_lrs == [0.1]


def _formula(name: str, base: float, epoch: int) -> float:
    """Each schedule's lr at `epoch`, in closed form (PyTorch's documented formulas)."""
    cls, args, kwargs = SCHEDULES[name]
    if cls == "StepLR":
        return base * kwargs["gamma"] ** (epoch // args[0])
    if cls == "MultiStepLR":
        return base * kwargs["gamma"] ** bisect_right(sorted(args[0]), epoch)
    if cls == "ExponentialLR":
        return base * args[0] ** epoch
    if cls == "CosineAnnealingLR":
        low = kwargs.get("eta_min", 0.0)
        return low + (base - low) * (1 + math.cos(math.pi * epoch / args[0])) / 2
    return base * args[0](epoch)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedules_follow_their_formulas(name, device):
    opt = _opt(device, lr=0.3)
    lrs = _run(_make(name, opt), opt)
    expected = [_formula(name, 0.3, e) for e in range(STEPS + 1)]
    np.testing.assert_allclose(lrs, expected, rtol=1e-12, atol=1e-15)


def test_the_constructor_sets_epoch_0s_lr_and_a_second_scheduler_keeps_base_lrs(device):
    opt = _opt(device, lr=0.2)
    first = lr_scheduler.LambdaLR(opt, lambda e: 0.5 * 0.9**e)
    assert opt.lr == first.get_last_lr()[0] == 0.1 and first.last_epoch == 0
    assert opt.initial_lr == 0.2
    _run(first, opt, 3)
    second = lr_scheduler.StepLR(opt, 2)  # PyTorch's base_lrs: the first one's initial lr
    assert second.base_lrs == [0.2] and second.get_last_lr() == [opt.lr]

    torch = pytest.importorskip("torch")
    t_opt = _torch_opt(0.2)
    t_first = torch.optim.lr_scheduler.LambdaLR(t_opt, lambda e: 0.5 * 0.9**e)
    for _ in range(3):
        t_opt.step()
        t_first.step()
    t_second = torch.optim.lr_scheduler.StepLR(t_opt, 2)
    assert t_second.base_lrs == second.base_lrs and t_second.get_last_lr() == [opt.lr]
    assert _run(second, opt, 6) == [t_second.get_last_lr()[0]] + [
        (t_opt.step(), t_second.step(), t_second.get_last_lr()[0])[2] for _ in range(6)]


@pytest.mark.parametrize("name", ["step", "exponential", "cosine", "multistep", "lambda"])
def test_a_last_epoch_given_resumes_as_pytorchs(name, device):
    """last_epoch=k (with the optimizer's initial_lr set): the constructor's step is k + 1."""
    torch = pytest.importorskip("torch")
    cls, args, kwargs = SCHEDULES[name]
    opt, t_opt = _opt(device), _torch_opt()
    _make(name, opt)
    getattr(torch.optim.lr_scheduler, cls)(t_opt, *args, **kwargs)
    resumed = _make(name, opt, last_epoch=5)
    t_resumed = getattr(torch.optim.lr_scheduler, cls)(t_opt, *args, **kwargs, last_epoch=5)
    assert resumed.last_epoch == t_resumed.last_epoch == 6
    lrs = _run(resumed, opt, 10)
    t_lrs = [t_resumed.get_last_lr()[0]]
    for _ in range(10):
        t_opt.step()
        t_resumed.step()
        t_lrs.append(t_resumed.get_last_lr()[0])
    assert lrs == t_lrs


def test_resuming_without_an_initial_lr_is_refused(device):
    with pytest.raises(ValueError, match="StepLR: last_epoch=3 resumes a schedule, but the "
                                         "optimizer has no initial_lr"):
        lr_scheduler.StepLR(_opt(device), 2, last_epoch=3)


@pytest.mark.parametrize("name", ["step", "multistep", "exponential", "cosine", "lambda"])
def test_the_deprecated_step_epoch_uses_the_closed_form_as_pytorchs(name, device):
    torch = pytest.importorskip("torch")
    cls, args, kwargs = SCHEDULES[name]
    opt, t_opt = _opt(device), _torch_opt()
    sched = _make(name, opt)
    t_sched = getattr(torch.optim.lr_scheduler, cls)(t_opt, *args, **kwargs)
    for epoch in (3, 7, 2, 11, 12):
        opt.step()
        t_opt.step()
        with pytest.warns(UserWarning, match="epoch parameter"):
            sched.step(epoch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t_sched.step(epoch)
        assert sched.last_epoch == epoch and sched.get_last_lr() == t_sched.get_last_lr()
        assert math.isclose(opt.lr, _formula(name, 0.1, epoch), rel_tol=1e-12)


# ----- ReduceLROnPlateau -------------------------------------------------------------------
PLATEAU_METRICS = [1.0, 0.9, 0.95, 0.91, 0.9, 0.92, 0.5, 0.5, 0.49999, 0.6, 0.7, 0.3, 0.3,
                   0.31, 0.32, 0.33, 0.34, 0.2, 0.25, 0.26, 0.27, 0.28, 0.29, 0.3, 0.31]


@pytest.mark.parametrize("kwargs", [
    {},
    {"patience": 1, "factor": 0.5},
    {"patience": 0, "factor": 0.5, "cooldown": 2, "min_lr": 0.02},
    {"mode": "max", "patience": 1, "threshold_mode": "abs", "threshold": 0.01},
    {"patience": 2, "threshold": 0.1, "factor": 0.3, "min_lr": [0.005]},
    {"patience": 0, "factor": 0.9999999, "eps": 1e-3},  # changes below eps are skipped
], ids=["defaults", "patience1", "cooldown-min_lr", "max-abs", "rel-threshold", "eps"])
def test_reduce_lr_on_plateau_matches_pytorch(kwargs, device):
    torch = pytest.importorskip("torch")
    opt, t_opt = _opt(device), _torch_opt()
    sched = lr_scheduler.ReduceLROnPlateau(opt, **kwargs)
    t_sched = torch.optim.lr_scheduler.ReduceLROnPlateau(t_opt, **kwargs)
    for metric in PLATEAU_METRICS:
        opt.step()
        t_opt.step()
        sched.step(metric)
        t_sched.step(metric)
        assert sched.get_last_lr() == t_sched.get_last_lr() == [opt.lr]
        assert (sched.best, sched.num_bad_epochs, sched.cooldown_counter, sched.last_epoch) == (
            t_sched.best, t_sched.num_bad_epochs, t_sched.cooldown_counter,
            t_sched.last_epoch)


def test_reduce_lr_on_plateau_by_hand(device):
    """patience 1: the second epoch in a row without a new best halves lr; cooldown 1 then
    skips counting the epoch after a reduction; a Tensor metric is read as a number."""
    opt = _opt(device, lr=1.0)
    sched = lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1, cooldown=1)
    metrics = [3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0]
    lrs = []
    for m in metrics:
        sched.step(ndl.Tensor(np.float64(m), device=device, requires_grad=False))
        lrs.append(opt.lr)
    # bad epochs: -, -, 1, 2 (halve; cooldown), cooldown, 1, 2 (halve), new best, cooldown
    assert lrs == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25]
    assert sched.best == 1.0


# ----- arguments ---------------------------------------------------------------------------
@pytest.mark.parametrize("make, error, message", [
    (lambda o: lr_scheduler.StepLR(o, 0), ValueError, "StepLR: step_size must be >= 1, found 0"),
    (lambda o: lr_scheduler.StepLR(o, -2), ValueError, "step_size must be >= 1"),
    (lambda o: lr_scheduler.StepLR(o, 2.0), TypeError, "StepLR: step_size must be an integer"),
    (lambda o: lr_scheduler.StepLR(o, 2, gamma=0), ValueError,
     r"StepLR: gamma must be > 0.0, found 0.0"),
    (lambda o: lr_scheduler.ExponentialLR(o, -0.5), ValueError, "gamma must be > 0.0"),
    (lambda o: lr_scheduler.ExponentialLR(o, math.inf), ValueError, "gamma must be finite"),
    (lambda o: lr_scheduler.MultiStepLR(o, [2, 1.5]), TypeError,
     "MultiStepLR: milestones must be an integer"),
    (lambda o: lr_scheduler.MultiStepLR(o, 3), TypeError, "milestones must be a list"),
    (lambda o: lr_scheduler.MultiStepLR(o, [3], gamma="0.1"), TypeError,
     "gamma must be a real number"),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, 0), ValueError, "T_max must be >= 1"),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, 5, eta_min=-1), ValueError,
     "eta_min must be >= 0.0"),
    (lambda o: lr_scheduler.LambdaLR(o, 0.5), TypeError, "lr_lambda must be callable"),
    (lambda o: lr_scheduler.LambdaLR(o, [abs, abs]), ValueError, "expected 1 lr_lambda"),
    (lambda o: lr_scheduler.LambdaLR(o, lambda e: -1.0), ValueError,
     "SGD: lr must be >= 0.0, found -0.1"),
    (lambda o: lr_scheduler.StepLR(o, 2, last_epoch=-2), ValueError,
     "last_epoch must be >= -1"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, mode="minimum"), ValueError,
     r"mode must be one of \('min', 'max'\), found 'minimum'"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, threshold_mode="relative"), ValueError,
     "threshold_mode must be one of"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, factor=1.0), ValueError,
     r"factor must be in \[0.0, 1.0\), found 1.0"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, patience=-1), ValueError,
     "patience must be >= 0"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, min_lr=[0.1, 0.2]), ValueError,
     "min_lr must be a list of 1 learning rate"),
])
def test_bad_arguments_raise_naming_them(make, error, message, device):
    with pytest.raises(error, match=message):
        make(_opt(device))


@pytest.mark.parametrize("cls", [lr_scheduler.StepLR, lr_scheduler.ReduceLROnPlateau])
def test_a_non_optimizer_is_a_type_error(cls):
    for bad in (None, _torch_opt(), [0.1]):
        with pytest.raises(TypeError, match=f"{cls.__name__}: optimizer must be a "
                                            f"needle.optim.Optimizer, found "
                                            f"{type(bad).__name__}"):
            cls(bad, 2) if cls is lr_scheduler.StepLR else cls(bad)


def test_settings_are_checked_when_assigned_and_a_bad_metric_named(device):
    opt = _opt(device)
    sched = lr_scheduler.StepLR(opt, 2)
    with pytest.raises(ValueError, match="gamma must be > 0.0"):
        sched.gamma = 0.0
    sched.gamma = np.float32(0.5)
    assert type(sched.gamma) is float and sched.gamma == 0.5
    plateau = lr_scheduler.ReduceLROnPlateau(opt)
    with pytest.raises(TypeError, match="ReduceLROnPlateau: metrics must be a real number"):
        plateau.step("0.5")


def test_stepping_the_scheduler_before_the_optimizer_warns_as_pytorch(device):
    opt = _opt(device)
    sched = lr_scheduler.ExponentialLR(opt, 0.5)
    with pytest.warns(UserWarning, match=r"before `optimizer.step\(\)`"):
        sched.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step()
        sched.step()  # only the first step is checked
        fine = lr_scheduler.ExponentialLR(opt, 0.5)
        fine.step()  # the optimizer has stepped
    assert sched.get_last_lr() == [0.025]
    got = sched.get_last_lr()
    got[0] = 7.0  # a copy
    assert sched.get_last_lr() == [0.025]


# ----- checkpoints -------------------------------------------------------------------------
class _Warmup:
    """A callable object: LambdaLR saves its attributes (PyTorch's), not its code."""

    def __init__(self, steps: int):
        self.steps = steps

    def __call__(self, epoch: int) -> float:
        return min(1.0, (epoch + 1) / self.steps)


CHECKPOINTED = {
    **{name: (lambda o, name=name: _make(name, o)) for name in SCHEDULES},
    "lambda-object": lambda o: lr_scheduler.LambdaLR(o, _Warmup(6)),
    "plateau": lambda o: lr_scheduler.ReduceLROnPlateau(o, patience=1, factor=0.5,
                                                        cooldown=1),
}


def _advance(sched, opt, steps: int, first: int) -> list[float]:
    lrs = []
    for i in range(first, first + steps):
        opt.step()
        if isinstance(sched, lr_scheduler.ReduceLROnPlateau):
            sched.step(PLATEAU_METRICS[i])
        else:
            sched.step()
        lrs.append(opt.lr)
    return lrs


@pytest.mark.parametrize("name", list(CHECKPOINTED))
def test_a_checkpoint_through_ndl_save_continues_with_the_same_lrs(name, device):
    make = CHECKPOINTED[name]
    opt = _opt(device, kind="adam")
    sched = make(opt)
    _advance(sched, opt, 7, 0)
    buffer = io.BytesIO()
    ndl.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, buffer)
    buffer.seek(0)
    loaded = ndl.load(buffer, device=device)
    assert "optimizer" not in loaded["scheduler"]
    expected = _advance(sched, opt, 12, 7)

    fresh_opt = _opt(device, lr=0.5, kind="adam")
    fresh = make(fresh_opt)
    if name == "lambda-object":
        fresh.lr_lambdas[0].steps = 99  # restored from the checkpoint
    fresh_opt.load_state_dict(loaded["optimizer"])  # (its lr: the saved lr)
    fresh.load_state_dict(loaded["scheduler"])
    assert fresh.state_dict().keys() == sched.state_dict().keys()
    assert _advance(fresh, fresh_opt, 12, 7) == expected
    if name == "lambda-object":
        assert fresh.lr_lambdas[0].steps == 6


def test_a_fresh_plateau_state_with_an_infinite_best_round_trips(device):
    sched = lr_scheduler.ReduceLROnPlateau(_opt(device), mode="max")
    buffer = io.BytesIO()
    ndl.save(sched.state_dict(), buffer)
    buffer.seek(0)
    other = lr_scheduler.ReduceLROnPlateau(_opt(device))
    other.load_state_dict(ndl.load(buffer))
    assert other.best == -math.inf and other.mode == "max"


def test_load_state_dict_reports_every_problem_and_changes_nothing(device):
    opt = _opt(device)
    sched = lr_scheduler.StepLR(opt, 3, gamma=0.5)
    before = sched.state_dict()
    bad = {**before, "gamma": -1.0, "step_size": 0, "surprise": 1}
    del bad["last_epoch"]
    with pytest.raises(ValueError) as info:
        sched.load_state_dict(bad)
    message = str(info.value)
    for part in ("StepLR.load_state_dict", "missing keys ['last_epoch']",
                 "unexpected keys ['surprise']", "step_size must be >= 1",
                 "gamma must be > 0.0"):
        assert part in message
    assert sched.state_dict() == before
    with pytest.raises(ValueError, match="base_lrs must be a list of 1 learning rate"):
        sched.load_state_dict({**before, "base_lrs": [0.1, 0.1]})
    with pytest.raises(TypeError, match="state_dict must be a mapping"):
        sched.load_state_dict([("gamma", 0.5)])


# ----- ndl.compile -------------------------------------------------------------------------
def _training(device, make, inside: bool, compiled: bool, steps: int = 12):
    """A Linear model trained by Adam for `steps` batches, its scheduler stepped after each
    optimizer step (outside the step function, or inside it): the parameters after, the lrs
    and the step function."""
    np.random.seed(7)
    model = nn.Linear(4, 3, device=device)
    opt = optim.Adam(model.parameters(), lr=0.05)
    sched = make(opt)
    loss_fn = nn.SoftmaxLoss()

    def step(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if inside:
            sched.step()
        return loss

    run = ndl.compile(step) if compiled else step
    rng = np.random.default_rng(3)
    lrs = []
    for _ in range(steps):
        x = ndl.Tensor(rng.standard_normal((5, 4)).astype(np.float32), device=device,
                       requires_grad=False)
        y = ndl.Tensor(rng.integers(0, 3, 5), device=device, requires_grad=False)
        run(x, y)
        if not inside:
            sched.step()
        lrs.append(opt.lr)
    return [p.numpy() for p in model.parameters()], lrs, run, sched


@pytest.mark.parametrize("inside", [False, True], ids=["outside-the-step", "inside-the-step"])
@pytest.mark.parametrize("make", [
    lambda o: lr_scheduler.CosineAnnealingLR(o, 5, eta_min=0.001),
    lambda o: lr_scheduler.StepLR(o, 3, gamma=0.5),
], ids=["cosine", "step"])
def test_a_compiled_loop_with_a_scheduler_matches_the_eager_one_to_the_bit(make, inside,
                                                                           device):
    """scheduler.step() sets opt.lr: outside the compiled step it is read by the replayed
    opt.step(); inside, the scheduler's step is itself replayed (run again at each call)."""
    eager, eager_lrs, _, _ = _training(device, make, inside, compiled=False)
    compiled, lrs, run, sched = _training(device, make, inside, compiled=True)
    assert run.captures == 1 and sched.last_epoch == 12
    assert lrs == eager_lrs and len(set(lrs)) > 3  # the lr did change
    for a, b in zip(eager, compiled):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # a frozen lr would train otherwise: the schedule is what made them equal
    frozen, _, _, _ = _training(device, lambda o: lr_scheduler.LambdaLR(o, lambda e: 1.0),
                                inside, compiled=True)
    assert not all(np.array_equal(a, b) for a, b in zip(frozen, compiled))


class _Restarts(lr_scheduler.LRScheduler):
    """A user's schedule with state of its own: halves the lr every `period` steps, the
    period doubling at each restart (PyTorch's state_dict saves such attributes too)."""

    def __init__(self, optimizer, period=1):
        self.period, self.restarts, self.since = period, 0, 0
        super().__init__(optimizer)

    def get_lr(self):
        if self.last_epoch == 0:
            return [self.base_lrs[0]]
        self.since += 1
        if self.since < self.period:
            return [self.optimizer.lr]
        self.since, self.restarts, self.period = 0, self.restarts + 1, self.period * 2
        return [self.optimizer.lr / 2]


def test_a_subclass_keeps_its_own_state_in_state_dict(device):
    opt = optim.SGD(nn.Linear(2, 2, device=device).parameters(), lr=1.0)
    sched = _Restarts(opt)
    for _ in range(4):
        opt.step()
        sched.step()
    state = sched.state_dict()
    assert (state["period"], state["restarts"], state["since"]) == (4, 2, 1)
    twin_opt = optim.SGD(nn.Linear(2, 2, device=device).parameters(), lr=1.0)
    twin = _Restarts(twin_opt)
    twin.load_state_dict(state)
    twin_opt.lr = opt.lr
    assert (twin.period, twin.restarts, twin.since) == (4, 2, 1)
    for _ in range(10):
        for o, s in ((opt, sched), (twin_opt, twin)):
            o.step()
            s.step()
        assert twin_opt.lr == opt.lr
    assert opt.lr == 1 / 8  # 14 steps: halved at steps 1, 3 and 7 (periods 1, 2, 4; the
    # next at 15)

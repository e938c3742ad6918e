"""ndl.compile beside other threads: what another thread does between two lines of a
recording or a replay (made deterministic here by doing it from inside the hook)."""

from __future__ import annotations

import numpy as np

import needle as ndl
from needle.compiled import state


def _step_and_inputs(device):
    np.random.seed(0)
    lin = ndl.nn.Linear(4, 3, device=device)
    x = ndl.Tensor(np.random.randn(5, 4), device=device, dtype="float32")

    def step(x):
        loss = (lin(x) ** 2).sum()
        loss.backward()
        return loss
    return lin, x, step


def test_a_gradient_set_by_another_thread_during_a_recording_is_not_recorded(monkeypatch):
    # another thread's backward writes the same leaf's .grad between backward's write and
    # the recording's hook: the program must compute this step's gradient, not keep theirs
    device = ndl.cpu()
    lin, x, step = _step_and_inputs(device)
    foreign = ndl.Tensor(np.full((5, 4), 7.0), device=device, dtype="float32")
    original = state.StateHooks.grad_set

    def meanwhile(self, v, *args):
        if v is x:
            x._grad = foreign
        return original(self, v, *args)
    monkeypatch.setattr(state.StateHooks, "grad_set", meanwhile)
    run = ndl.compile(step)
    run(x)  # recorded
    monkeypatch.setattr(state.StateHooks, "grad_set", original)
    run(x)  # replayed
    replayed = x.grad.numpy()
    step(x)  # eager
    np.testing.assert_array_equal(replayed, x.grad.numpy())
    assert not np.any(replayed == 7.0)


def test_a_replay_whose_entry_another_thread_evicted_still_returns():
    # another thread's recording may evict the signature while it replays (max_cache)
    device = ndl.cpu()
    lin, x, step = _step_and_inputs(device)
    run = ndl.compile(step, max_cache=1)
    run(x)
    (key, entry), = run.cache.items()
    program = entry[0][0]

    def evicted_meanwhile(tensors):
        out = program(tensors)
        run.cache.pop(key)
        return out
    entry[0][0] = evicted_meanwhile
    out = run(x)
    assert np.isfinite(out.numpy()) and key not in run.cache


def test_a_recording_whose_entry_another_thread_evicted_still_returns():
    # another thread's recording stores its own signature between this recording's store
    # and its bookkeeping (max_cache=1 evicts this one): the call still returns its result
    device = ndl.cpu()
    lin, x, step = _step_and_inputs(device)
    run = ndl.compile(step, max_cache=1)

    class Interleaved(type(run.cache)):
        busy = False

        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            if not Interleaved.busy:  # (the other thread, as if it ran right here)
                Interleaved.busy = True
                super().__setitem__(("other",), [[], None, 1, 1, False])
                while len(self) > 1:
                    self.popitem(last=False)
    run.cache = Interleaved()
    out = run(x)
    assert np.isfinite(out.numpy())

"""Grad mode: no_grad, enable_grad, set_grad_enabled, and one mode per thread.

The threaded tests force their interleavings with Events (no sleeps, no hoping for races):
each fails every time on a process-wide grad mode.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import needle as ndl

WAIT = 10  # seconds; a wait that times out fails the test instead of hanging it


def run_threads(*targets) -> None:
    """Run each target in its own thread, join them all, and re-raise the first error."""
    errors: list[BaseException] = []

    def guarded(target):
        try:
            target()
        except Exception as e:  # re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"
    if errors:
        raise errors[0]


def wait(event: threading.Event) -> None:
    assert event.wait(WAIT), "the other thread never got there"


# ----- one thread ------------------------------------------------------------------------


def test_no_grad_decorator_keeps_name_and_doc():
    @ndl.no_grad()
    def evaluate(t):
        """Doubles t."""
        assert not ndl.is_grad_enabled()
        return t * 2

    assert evaluate.__name__ == "evaluate" and evaluate.__doc__ == "Doubles t."
    assert evaluate.__wrapped__ is not None
    assert not evaluate(ndl.Tensor([1.0])).requires_grad
    assert ndl.is_grad_enabled()


def test_one_no_grad_instance_can_be_nested_and_reused(device):
    x = ndl.Tensor([1.0], device=device)
    off = ndl.no_grad()
    with off:
        with off:
            assert not ndl.is_grad_enabled()
        assert not ndl.is_grad_enabled()  # the inner exit restores the outer block's mode
    assert ndl.is_grad_enabled() and (x * 2).requires_grad
    with off:
        assert not (x * 2).requires_grad
    assert ndl.is_grad_enabled()


def test_enable_grad_inside_no_grad(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    with ndl.no_grad():
        with ndl.enable_grad():
            y = x * 3
        z = x * 3
    assert y.requires_grad and not z.requires_grad

    @ndl.enable_grad()
    def f(t):
        return t * 3

    with ndl.no_grad():
        y = f(x)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_backward_inside_no_grad_computes_the_gradients(device):
    """backward() called under no_grad() differentiates the graph built before it, both
    ways; with create_graph (the default) the gradients are recorded, as PyTorch's are (it
    raised a TypeError: the rules ran on raw arrays with a Tensor adjoint among them)."""
    for create_graph in (True, False):
        x = ndl.Tensor([1.0, -2.0, 3.0], device=device, dtype="float64")
        y = (x * x).exp().sum()
        with ndl.no_grad():
            y.backward(create_graph=create_graph)
            assert not ndl.is_grad_enabled()
        expected = 2 * np.array([1.0, -2.0, 3.0]) * np.exp(np.array([1.0, 4.0, 9.0]))
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)
        assert x.grad.requires_grad == create_graph


def test_set_grad_enabled_as_call_and_as_context_manager():
    with ndl.set_grad_enabled(False):
        assert not ndl.is_grad_enabled()
    assert ndl.is_grad_enabled()
    try:
        ndl.set_grad_enabled(False)  # takes effect at the call, as in PyTorch
        assert not ndl.is_grad_enabled()
        with ndl.set_grad_enabled(True):
            assert ndl.is_grad_enabled()
        assert not ndl.is_grad_enabled()
    finally:
        ndl.set_grad_enabled(True)
    assert ndl.is_grad_enabled()


def test_no_grad_restores_the_mode_after_an_exception():
    with pytest.raises(KeyError):
        with ndl.no_grad():
            raise KeyError("boom")
    assert ndl.is_grad_enabled()


# ----- threads (issue 7): grad mode is per thread, as in PyTorch ------------------------------


def test_backward_without_graph_in_one_thread_leaves_another_threads_graph(device):
    """Two training loops: backward(create_graph=False) must not stop the other recording."""
    in_backward, other_done = threading.Event(), threading.Event()

    class Pause(ndl.TensorOp):
        """The identity; its gradient waits while the other thread builds its graph."""

        def compute(self, a):
            return a

        def gradient(self, out_grad, node):
            in_backward.set()
            wait(other_done)
            return out_grad

    x = ndl.Tensor([1.0, 2.0], device=device)
    w = ndl.Tensor([3.0], device=device)
    seen = {}

    def first():
        (Pause()(x * 2)).sum().backward(create_graph=False)

    def second():
        wait(in_backward)  # the first thread is inside backward(create_graph=False) now
        try:
            y = (w * w).sum()
            seen["recorded"] = y.requires_grad
            y.backward()
        finally:
            other_done.set()

    run_threads(first, second)
    assert seen["recorded"]
    np.testing.assert_allclose(w.grad.numpy(), [6.0])
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_training_thread_trains_while_another_evaluates_under_no_grad(device):
    evaluating, trained = threading.Event(), threading.Event()
    x = ndl.Tensor([1.0, -2.0], device=device)
    seen = {}

    def evaluate():
        with ndl.no_grad():
            evaluating.set()
            wait(trained)
            seen["eval_recorded"] = (x * 2).requires_grad

    def train():
        wait(evaluating)  # the other thread is inside no_grad() now
        try:
            loss = (x * x).sum()
            seen["train_recorded"] = loss.requires_grad
            loss.backward()
        finally:
            trained.set()

    run_threads(evaluate, train)
    assert seen == {"train_recorded": True, "eval_recorded": False}
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0])


def test_overlapping_no_grad_blocks_in_two_threads_restore_recording():
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with ndl.no_grad():
            first_in.set()
            wait(second_in)
        first_out.set()  # leaves while the second thread is still inside its block
        seen["first"] = ndl.is_grad_enabled()

    def second():
        wait(first_in)
        with ndl.no_grad():
            second_in.set()
            wait(first_out)
        seen["second"] = ndl.is_grad_enabled()

    run_threads(first, second)
    run_threads(lambda: seen.__setitem__("fresh", ndl.is_grad_enabled()))
    assert seen == {"first": True, "second": True, "fresh": True}
    assert ndl.is_grad_enabled() and (ndl.Tensor([1.0]) * 2).requires_grad


@pytest.mark.skipif(getattr(sys.flags, "thread_inherit_context", False),
                    reason="threads here start in a copy of their starter's context")
def test_a_new_thread_records_even_when_started_inside_no_grad():
    seen = {}
    with ndl.no_grad():
        run_threads(lambda: seen.__setitem__("recorded", (ndl.Tensor([1.0]) * 2).requires_grad))
        assert not ndl.is_grad_enabled()
    assert seen == {"recorded": True}

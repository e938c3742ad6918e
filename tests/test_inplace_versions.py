"""Data changed between forward and backward: backward() raises PyTorch's RuntimeError
("modified by an inplace operation") naming the tensor's shape and the op, on both engines."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim

MODIFIED = r"modified by an inplace operation: \[needle\.Parameter float32 \(3, 2\)\]"


def linear_and_input(device):
    np.random.seed(0)
    model = nn.Linear(3, 2, device=device)
    x = ndl.Tensor(np.random.randn(4, 3).astype("float32"), device=device)
    return model, x


def numpy_linear_grads(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d sum(x w + b) / dw, by hand."""
    return np.broadcast_to(x.sum(axis=0)[:, None], w.shape)


OPTIMIZERS = [
    lambda ps: optim.SGD(ps, lr=0.5),
    lambda ps: optim.SGD(ps, lr=0.5, momentum=0.9, weight_decay=0.1),
    lambda ps: optim.Adam(ps, lr=0.1),
]


@pytest.mark.parametrize("make_opt", OPTIMIZERS, ids=["sgd", "sgd-momentum", "adam"])
@pytest.mark.parametrize("flat", [True, False], ids=["flat", "one-by-one"])
@pytest.mark.parametrize("create_graph", [True, False])
def test_step_between_forward_and_backward_raises(make_opt, flat, create_graph, device):
    """The issue's case: y = m(x); opt.step(); y.backward() used the new weights silently."""
    model, x = linear_and_input(device)
    opt = make_opt(model.parameters())
    if not flat:
        opt.flat_max_size = 0  # every parameter its own update (the in-place kernels on cpu)
    for _ in range(2):  # the second step updates arrays the optimizer owns, in place on cpu
        model(x).sum().backward(create_graph=create_graph)
        opt.step()
    y = model(x).sum()
    opt.step()
    with pytest.raises(RuntimeError, match=MODIFIED + r", input \d of \w+"):
        y.backward(create_graph=create_graph)


@pytest.mark.parametrize("create_graph", [True, False])
def test_graph_built_after_step_differentiates(create_graph, device):
    """No false alarm: steps between backward and the next forward are the usual loop, and
    the gradients are those of the weights the forward used."""
    model, x = linear_and_input(device)
    opt = optim.Adam(model.parameters(), lr=0.1)
    for _ in range(3):
        model(x).sum().backward(create_graph=create_graph)
        opt.step()
    y = model(x).sum()
    w = model.weight.numpy()
    y.backward(create_graph=create_graph)
    np.testing.assert_allclose(model.weight.grad.numpy(), numpy_linear_grads(w, x.numpy()),
                               rtol=1e-6)


@pytest.mark.parametrize("create_graph", [True, False])
def test_data_assignment_between_forward_and_backward_raises(create_graph, device):
    """The graph holds the tensor, which would now give its new data: an error, not a wrong
    gradient."""
    model, x = linear_and_input(device)
    y = model(x).sum()
    model.weight.data = model.weight.data * 2.0
    with pytest.raises(RuntimeError, match=MODIFIED):
        y.backward(create_graph=create_graph)


@pytest.mark.parametrize("create_graph", [True, False])
def test_changed_input_that_needs_no_grad_raises(create_graph, device):
    """The weight's gradient is computed from x: changing x is caught too."""
    model, x = linear_and_input(device)
    y = model(x).sum()
    x.data = x.data + 1.0
    with pytest.raises(RuntimeError, match=r"\[needle\.Tensor float32 \(4, 3\)\], input 0"):
        y.backward(create_graph=create_graph)


def test_load_state_dict_between_forward_and_backward_raises(device):
    model, x = linear_and_input(device)
    state = {k: v.numpy() + 1 for k, v in model.state_dict().items()}
    y = model(x).sum()
    model.load_state_dict(state)
    with pytest.raises(RuntimeError, match=MODIFIED):
        y.backward()


def test_running_statistics_update_is_a_change(device):
    """An eval-mode graph reads BatchNorm's running statistics; a training forward replaces
    them."""
    bn = nn.BatchNorm1d(3, device=device)
    x = ndl.Tensor(np.random.default_rng(0).standard_normal((4, 3)), device=device,
                   dtype="float32")
    bn.eval()
    y = bn(x).sum()
    bn.train()
    bn(x)
    with pytest.raises(RuntimeError, match=r"inplace operation: \[needle\.Tensor float32 \(3,\)"):
        y.backward()


def test_untouched_graph_backward_twice_is_fine(device):
    """Changes to tensors the graph does not use raise nothing."""
    model, x = linear_and_input(device)
    other = nn.Linear(3, 2, device=device)
    y = model(x).sum()
    other.weight.data = other.weight.data * 2.0
    y.backward()
    y.backward(create_graph=False)
    np.testing.assert_allclose(model.weight.grad.numpy(),
                               numpy_linear_grads(model.weight.numpy(), x.numpy()), rtol=1e-6)



RESULT_READERS = {  # ops whose gradient reads their own output
    "exp": lambda x: ndl.exp(x),
    "tanh": lambda x: ndl.tanh(x),
    "sigmoid": lambda x: ndl.sigmoid(x),
    "logsoftmax": lambda x: ndl.logsoftmax(x.reshape((1, 4))),
    "power": lambda x: ndl.power(ndl.exp(x.detach()), x),
}


@pytest.mark.parametrize("name", list(RESULT_READERS))
@pytest.mark.parametrize("create_graph", [True, False])
def test_replaced_output_read_by_its_own_gradient_raises(name, create_graph, device):
    """The engine audit's case: y = exp(x); y.data = ...; y.sum().backward() gave x.grad 0.
    Exp's gradient reads its output, which now holds the new data: an error, as a change
    to an input is."""
    x = ndl.Tensor(np.array([0.1, -0.2, 0.3, 0.4]), device=device, dtype="float32")
    y = RESULT_READERS[name](x)
    y.data = ndl.zeros(*y.shape, device=device, dtype="float32")
    loss = y.sum()
    with pytest.raises(RuntimeError, match=r"inplace operation: the output of \w+ .*"
                                           r"\(by a \.data assignment, "):
        loss.backward(create_graph=create_graph)


@pytest.mark.parametrize("create_graph", [True, False])
def test_replaced_output_whose_gradient_ignores_it_differentiates(create_graph, device):
    """A loss averaged in place (distributed training's `loss.data = allreduce(loss)`) and
    then differentiated: the sum's and the product's gradients never read their output."""
    x = ndl.Tensor(np.array([1.0, 2.0, 3.0]), device=device, dtype="float32")
    loss = (x * x).sum()
    loss.data = loss.data / 2.0
    loss.backward(create_graph=create_graph)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0], rtol=1e-6)


def test_in_place_operators_update_under_no_grad_as_pytorchs(device):
    """(A port audit.) PyTorch's manual update `with no_grad(): p -= lr * p.grad` rebound the
    loop variable and left every parameter unchanged, silently."""
    np.random.seed(0)
    m = ndl.nn.Linear(3, 2, device=device)
    x = ndl.Tensor(np.ones((1, 3)), device=device, dtype="float32")
    m(x).sum().backward()
    before = [p.numpy().copy() for p in m.parameters()]
    grads = [p.grad.numpy() for p in m.parameters()]
    kept = m(x)  # a graph through the old weights
    with ndl.no_grad():
        for p in m.parameters():
            q = p
            p -= 0.1 * p.grad
            assert p is q and isinstance(p, ndl.nn.Parameter) and p.dtype == "float32"
        w = m.weight
        w *= 2.0
        w /= 2.0
        w += 0.0
    for p, b, g in zip(m.parameters(), before, grads):
        np.testing.assert_allclose(p.numpy(), b - np.float32(0.1) * g, rtol=1e-6)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        kept.sum().backward()  # the weights changed in place: their version moved
    with pytest.raises(RuntimeError, match=r"leaf Tensor that requires grad is used in an "
                                           r"in-place operation \(-=\)"):
        m.weight -= 1.0  # (recording: PyTorch's error)
    y = m(x)
    z = y
    y += 1.0  # recording, not a leaf: a new node of the graph, as before
    assert y is not z and y.op is not None
    course = ndl.Tensor(np.ones(3), device=device, dtype="float32")  # requires grad (course)
    kept = course
    course /= 255.0  # (a review: the leaf's error was for every tensor; a new one, as before)
    assert course is not kept and course.op is not None
    W = ndl.Tensor(np.ones(3), device=device, dtype="float32")
    (W * W).sum().backward()
    with pytest.warns(UserWarning, match="one growing graph"):
        W -= 0.1 * W.grad  # (a leaf with a gradient: the course's needle rebinds it, which
    assert W.op is not None  # chains every step's W into one graph: said)
    w1, w2 = (ndl.Tensor(np.ones(3), device=device, dtype="float32") for _ in range(2))
    (w1 + w2).sum().backward()
    w1.grad *= 2.0  # (its own .grad: w2's is another object)
    assert w2.grad.numpy().tolist() == [1.0, 1.0, 1.0]
    plain = ndl.Tensor(np.ones(3), device=device, dtype="float32", requires_grad=False)
    alias = plain
    plain += 1.0  # nothing requires grad: in place while recording too, as PyTorch's
    assert plain is alias and alias.numpy().tolist() == [2.0, 2.0, 2.0]
    m.bias.requires_grad = False  # a frozen parameter (a target network's update)
    bias = m.bias
    m.bias -= 1.0
    assert m.bias is bias
    with ndl.no_grad():
        i = ndl.Tensor(np.array([1, 2]), device=device)
        f = ndl.Tensor(np.array([1.0, 2.0], np.float32), device=device)
        f -= ndl.Tensor(np.array([0.5, 0.5]), device=device, dtype="float64")
        assert f.dtype == "float32"  # the tensor's dtype, as PyTorch's in-place ops
        np.testing.assert_array_equal(f.numpy(), [0.5, 1.5])
        with pytest.raises(ValueError, match=r"result's shape \(2, 2\) is not the tensor's"):
            i += ndl.Tensor(np.ones((2, 2), np.int64), device=device)

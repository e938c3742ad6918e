"""Training must not leak graph nodes: the live-Value count stays flat over 2,000 steps."""

from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pytest

import needle as ndl
from needle import autograd, nn, optim


# cpu only: the leak is in Python object lifetimes, which are the same on every device, and
# 2,000 steps on strict (or with a GPU's launch latency) would make this test slow.
# Plain backward() (create_graph=True) is what users call: it gets the full 2,000 steps.
@pytest.mark.parametrize("create_graph, steps", [(True, 2000), (False, 500)],
                         ids=["create_graph", "no_graph"])
def test_tensor_count_is_flat_over_many_adam_steps(create_graph, steps):
    device = ndl.cpu()
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 8, device=device), nn.BatchNorm1d(8, device=device),
                          nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 3, device=device))
    opt = optim.Adam(model.parameters(), lr=0.01)
    rng = np.random.default_rng(0)
    x = ndl.Tensor(rng.standard_normal((8, 4)), device=device, dtype="float32",
                   requires_grad=False)
    y = ndl.Tensor(rng.integers(0, 3, 8), device=device, requires_grad=False)
    loss_fn = nn.SoftmaxLoss()
    counts = {}
    gc.collect()
    gc.disable()  # reference counting alone must free each step's graph: no cycles
    try:
        for step in range(1, steps + 1):
            opt.reset_grad()
            loss = loss_fn(model(x), y)
            # backward builds differentiable gradient graphs by default; intermediate nodes
            # hold their adjoints weakly, so node <-> adjoint cycles do not arise
            loss.backward(create_graph=create_graph)
            opt.step()
            if step in (10, steps):
                counts[step] = autograd.TENSOR_COUNTER
    finally:
        gc.enable()
    assert abs(counts[steps] - counts[10]) <= 5, counts


def test_tensor_count_is_balanced_by_copies_and_failed_constructions(device):
    """Every Value made is counted once and uncounted once: by copies, unpickling, and
    constructors that raise (their half-made object is still deleted)."""
    model = nn.Sequential(nn.Linear(2, 3, device=device), nn.BatchNorm1d(3, device=device))
    x = ndl.Tensor([[1.0, 2.0]], device=device, dtype="float32")
    (x * x).sum().backward()  # x.grad: a leaf's gradient is copied with it
    gc.collect()
    gc.disable()  # the count moves only with this test's objects, by reference counting
    try:
        base = autograd.TENSOR_COUNTER
        copies = [copy.deepcopy(model), pickle.loads(pickle.dumps(model)),
                  copy.deepcopy(x), pickle.loads(pickle.dumps(x))]
        assert autograd.TENSOR_COUNTER > base + 10
        del copies
        for bad in (lambda: ndl.Tensor(None, device=device),
                    lambda: ndl.Tensor([1.0], device=device, dvice=device),
                    lambda: ndl.Tensor([1.0], device=device, dtype="not-a-dtype")):
            with pytest.raises(TypeError):
                bad()
        assert autograd.TENSOR_COUNTER == base
    finally:
        gc.enable()

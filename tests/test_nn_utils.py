"""ndl.nn.utils: clip_grad_norm_ against numpy and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle.nn.module import Parameter
from needle.nn.utils import clip_grad_norm_


def tensor(x, device, dtype="float64", requires_grad=True):
    return ndl.Tensor(x, device=device, dtype=dtype, requires_grad=requires_grad)


# ----- clip_grad_norm_ -----------------------------------------------------------------------
def params_with_grads(device, scale, seed=0):
    rng = np.random.default_rng(seed)
    hosts = [rng.standard_normal(s) * scale for s in ((3, 4), (5,), (2, 2, 2))]
    params = [Parameter(tensor(h, device, "float32")) for h in hosts]
    for p, h in zip(params, hosts):
        p.grad = tensor(h * 2, device, "float32", requires_grad=False)
    return params, [(h * 2).astype(np.float32) for h in hosts]


def test_clip_grad_norm_scales_to_max_norm(device):
    params, grads = params_with_grads(device, 3.0)
    params.insert(1, Parameter(tensor(np.ones(2), device, "float32")))  # grad None: skipped
    total = clip_grad_norm_(params, 1.5)
    ref = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    assert isinstance(total, ndl.Tensor) and total.shape == ()  # as PyTorch: no host read
    np.testing.assert_allclose(float(total), ref, rtol=1e-6)
    clipped = [p.grad.numpy() for p in params if p.grad is not None]
    for got, g in zip(clipped, grads):
        np.testing.assert_allclose(got, g * (1.5 / (ref + 1e-6)), rtol=1e-6)
        assert got.dtype == np.float32
    np.testing.assert_allclose(np.sqrt(sum(np.sum(c.astype(np.float64) ** 2) for c in clipped)),
                               1.5, rtol=1e-5)
    assert params[1].grad is None


def test_clip_grad_norm_below_max_changes_nothing(device):
    params, grads = params_with_grads(device, 0.01)
    before = [p.grad.numpy() for p in params]
    total = clip_grad_norm_(params, 10.0)
    np.testing.assert_allclose(float(total), np.sqrt(sum(np.sum(g ** 2.0) for g in grads)),
                               rtol=1e-6)
    for p, b in zip(params, before):  # multiplied by exactly 1 on the device
        np.testing.assert_array_equal(p.grad.numpy(), b)


def test_clip_grad_norm_single_tensor_and_shared_grads(device):
    w = tensor([3.0, 4.0], device)
    w.grad = tensor([3.0, 4.0], device, requires_grad=False)
    assert float(clip_grad_norm_(w, 1.0)) == pytest.approx(5.0)
    np.testing.assert_allclose(w.grad.numpy(), [0.6, 0.8], rtol=1e-6)
    # a + b gives each leaf its own .grad; one gradient tensor set on both is scaled once
    a, b = tensor([3.0], device), tensor([4.0], device)
    (a + b).backward(tensor([2.0], device, requires_grad=False))
    assert a.grad is not b.grad
    a.grad = b.grad = tensor([2.0], device, requires_grad=False)
    assert float(clip_grad_norm_([a, b], 1.0)) == pytest.approx(np.sqrt(8.0))
    np.testing.assert_allclose([a.grad.item(), b.grad.item()], [2 / np.sqrt(8)] * 2, rtol=1e-6)
    assert float(clip_grad_norm_([tensor([1.0], device)], 1.0)) == 0.0  # no grads at all


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3, float("inf")])
def test_clip_grad_norm_matches_pytorch(norm_type, device):
    torch = pytest.importorskip("torch")
    params, grads = params_with_grads(device, 2.0, seed=1)
    refs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for r, g in zip(refs, grads):
        r.grad = torch.tensor(g)
    total = clip_grad_norm_(params, 0.7, norm_type)
    ref_total = torch.nn.utils.clip_grad_norm_(refs, 0.7, norm_type)
    np.testing.assert_allclose(float(total), ref_total.item(), rtol=1e-5)
    for p, r in zip(params, refs):
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_optimizer_steps_with_the_clipped_gradient(device):
    p = Parameter(tensor([1.0, 1.0], device, "float32"))
    p.grad = tensor([30.0, 40.0], device, "float32", requires_grad=False)
    clip_grad_norm_([p], 5.0)
    ndl.optim.SGD([p], lr=0.1).step()
    np.testing.assert_allclose(p.numpy(), [1 - 0.1 * 3, 1 - 0.1 * 4], rtol=1e-5)


def test_clip_grad_norm_of_float16_gradients(device):
    """The norm of float16 gradients was taken in float16: 1000 entries of 10 gave inf, and
    every gradient was multiplied by 0 (PyTorch: 316.2, each 10 scaled to 0.0316)."""
    try:
        device.dtype("float16")
    except TypeError:
        pytest.skip(f"{device} has no float16")
    p = Parameter(tensor(np.zeros(1000), device, "float16"))
    p.grad = tensor(np.full(1000, 10.0), device, "float16", requires_grad=False)
    total = clip_grad_norm_([p], 1.0)
    np.testing.assert_allclose(float(total.numpy()), np.sqrt(1000) * 10, rtol=1e-6)
    assert p.grad.dtype == "float16"
    np.testing.assert_allclose(p.grad.numpy(), 10 / (np.sqrt(1000) * 10), rtol=1e-3)


def test_a_nan_gradient_makes_every_gradient_nan(device):
    """As PyTorch's: the NaN norm's factor failed `coef < 1` and left every gradient as it
    was, a [3, 4] far above max_norm included."""
    p, q = (Parameter(ndl.Tensor(np.ones(2), dtype="float32", device=device)) for _ in range(2))
    p.grad = ndl.Tensor(np.array([np.nan, 1.0]), dtype="float32", device=device)
    q.grad = ndl.Tensor(np.array([3.0, 4.0]), dtype="float32", device=device)
    with np.errstate(invalid="ignore"):
        norm = clip_grad_norm_([p, q], 1.0)
    assert np.isnan(norm.numpy()) and np.isnan(q.grad.numpy()).all()


@pytest.mark.filterwarnings("ignore:divide by zero")  # (numpy's norm of order -1 at a 0)
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 0.5, 0.0, -1.0, float("inf"), float("-inf")])
def test_gradients_on_two_devices_take_the_norm_of_one_device(norm_type):
    """(An optimizer audit.) Across devices the per-device norms were combined on the host
    by a sum of powers (p = 0 or -1: ZeroDivisionError) and max for either infinity (-inf
    gave 4.12 for 0.5)."""
    torch = pytest.importorskip("torch")
    grads = [np.array([3.0, 0.0]), np.array([4.0, 1.0]), np.array([0.5, 2.0])]
    devices = [ndl.cpu(), ndl.strict(), ndl.cpu()]
    params = [Parameter(tensor(np.ones(2), d)) for d in devices]
    for p, g, d in zip(params, grads, devices):
        p.grad = tensor(g, d, requires_grad=False)
    total = clip_grad_norm_(params, 1.0, norm_type)
    ref = [torch.nn.Parameter(torch.ones(2, dtype=torch.float64)) for _ in grads]
    for r, g in zip(ref, grads):
        r.grad = torch.tensor(g)
    want = torch.nn.utils.clip_grad_norm_(ref, 1.0, norm_type)
    np.testing.assert_allclose(float(total.numpy()), float(want), rtol=1e-12)
    for p, r in zip(params, ref):
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=1e-12)


def test_error_if_nonfinite(device):
    params, grads = params_with_grads(device, 1.0)
    params[0].grad = tensor(np.full((3, 4), np.inf), device, "float32", requires_grad=False)
    before = [p.grad for p in params]
    with pytest.raises(RuntimeError, match="total norm of order 2.0 of the gradients is inf"):
        clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert [p.grad for p in params] == before  # nothing clipped
    params, grads = params_with_grads(device, 1.0)
    total = clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    assert np.isfinite(float(total.numpy()))

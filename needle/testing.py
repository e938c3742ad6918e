"""The one gradient checker: central differences in float64 against a random cotangent."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .autograd import Tensor
from .backends import Device


def _scalar_objective(fn, tensors, cotangent) -> float:
    # not under no_grad: `fn` may itself call backward() (second-order checks)
    return float(np.sum(fn(*tensors).numpy() * cotangent))


def check_gradients(
    fn: Callable[..., Tensor],
    *arrays: Any,
    device: Device,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    seed: int = 0,
    wrt: tuple[int, ...] | None = None,
) -> list[np.ndarray]:
    """Assert that backward() through `fn` matches central differences.

    The inputs are float64 tensors on `device`; the output is contracted with a random
    cotangent c, so the checked quantity is d(sum(fn(x) * c))/dx. `wrt` picks the inputs
    to check (all by default). Returns the analytic gradients of that quantity (of
    sum(fn(x) * c), not of fn itself), as numpy arrays.
    """
    hosts = [np.array(a, dtype=np.float64) for a in arrays]
    tensors = [Tensor(x, device=device, dtype="float64") for x in hosts]
    out = fn(*tensors)
    for t in tensors:  # `fn` may have run backward() itself: no stale first-order gradients
        t.grad = None
    cotangent = np.random.default_rng(seed).standard_normal(out.shape)
    out.backward(Tensor(cotangent, device=device, dtype="float64", requires_grad=False))
    wrt = tuple(range(len(hosts))) if wrt is None else wrt
    # read every analytic gradient before probing: the probes may run backward() too
    analytic = []
    for i in wrt:
        grad = tensors[i].grad
        got = np.zeros_like(hosts[i]) if grad is None else grad.numpy()
        assert got.shape == hosts[i].shape, (
            f"gradient of input {i} has shape {got.shape}, the input has {hosts[i].shape}"
        )
        analytic.append(got)
    for i, got in zip(wrt, analytic):
        numeric = np.zeros_like(hosts[i])
        flat = hosts[i].reshape(-1)
        for j in range(flat.size):
            saved = flat[j]
            values = []
            for step in (eps, -eps):
                flat[j] = saved + step
                probe = [Tensor(h, device=device, dtype="float64") for h in hosts]
                values.append(_scalar_objective(fn, probe, cotangent))
            flat[j] = saved
            numeric.reshape(-1)[j] = (values[0] - values[1]) / (2 * eps)
        np.testing.assert_allclose(
            got, numeric, rtol=rtol, atol=atol,
            err_msg=f"backward() disagrees with finite differences for input {i}",
        )
    return analytic

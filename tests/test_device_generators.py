"""The training generators of the devices that have their own (torch, jax; cuda where a GPU
is): independent of numpy's global state, thread-safe, and checkpointed without a draw."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import needle as ndl
from needle.backends.jax_device import JaxDevice
from needle.backends.torch_device import TorchDevice

needs_jax = pytest.mark.skipif(not ndl.jax().enabled(), reason=ndl.jax().unavailable_reason())
needs_torch = pytest.mark.skipif(not ndl.torch().enabled(),
                                 reason=ndl.torch().unavailable_reason())


def fresh(kind: type, index: str):
    """A device object of its own (not the cached one): no generator made yet."""
    device = kind(index)
    device._seed = None
    return device


@needs_torch
def test_torch_masks_are_not_numpys_draws_after_manual_seed():
    """torch's cpu generator is numpy's MT19937: seeded with the same k, torch's first draws
    were bits of numpy's next draws (the initial weights), so Dropout's masks were a function
    of the weights (agreement 1.0; independent masks agree half the time)."""
    ndl.manual_seed(5)
    weights = np.random.rand(1000)
    masks = ndl.torch().random((2000,)).numpy()
    agree = np.mean((((weights * 256) % 1) <= 0.5) == (masks[0::2] <= 0.5))
    assert 0.4 < agree < 0.6
    ndl.manual_seed(5)  # still reproducible
    np.random.rand(1000)
    np.testing.assert_array_equal(ndl.torch().random((2000,)).numpy(), masks)


@pytest.mark.parametrize("kind, index", [pytest.param(TorchDevice, "cpu", marks=needs_torch),
                                         pytest.param(JaxDevice, None, marks=needs_jax)])
def test_reading_or_restoring_a_generator_state_draws_nothing_from_numpy(kind, index):
    """A checkpoint taken before the generator's first draw made it from numpy's state: the
    data order after the checkpoint changed, and a restore left numpy one draw off."""
    np.random.seed(0)
    expected = np.random.RandomState(0).rand()
    assert fresh(kind, index).rng_state() is None  # made later, from numpy's restored state
    state = ndl.torch().rng_state() if kind is TorchDevice else ndl.jax().rng_state()
    fresh(kind, index).set_rng_state(state)
    assert np.random.rand() == expected


@needs_torch
@needs_jax
def test_a_state_of_another_kind_is_a_value_error():
    torch_state, jax_state = ndl.torch().rng_state(), ndl.jax().rng_state()
    with pytest.raises(ValueError, match="not a state of this device's generator"):
        ndl.torch().set_rng_state(jax_state)
    with pytest.raises(ValueError, match="not a state of this device's generator"):
        ndl.jax().set_rng_state(torch_state)


@needs_torch
def test_a_fresh_torch_devices_first_use_may_be_a_draw():
    assert fresh(TorchDevice, "cpu").random((3,)).shape == (3,)  # was AttributeError


@needs_jax
def test_jax_draws_from_two_threads_never_share_a_key():
    """A draw reads the key and stores its successor: two threads read the same key and
    repeated masks (66 to 78 of 300)."""
    device = ndl.jax()
    masks: list[bytes] = []

    def draw() -> None:
        for _ in range(100):
            masks.append(np.asarray(device.random((64,))).tobytes())

    threads = [threading.Thread(target=draw) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(masks) == 200 and len(set(masks)) == 200


def test_cpu_manual_seed_seeds_numpys_state_its_generator():
    ndl.cpu().manual_seed(3)
    first = np.random.rand(3)
    ndl.cpu().manual_seed(3)
    np.testing.assert_array_equal(np.random.rand(3), first)
    for bad in (1.7, "3"):
        with pytest.raises(TypeError):
            ndl.cpu().manual_seed(bad)


@needs_torch
def test_torch_tensors_requiring_grad_are_held_without_torch_autograd():
    """Adam's in-place update of such a parameter raised "functions with out=... arguments
    don't support automatic differentiation", SGD grew a torch graph every step."""
    import torch

    p = ndl.nn.Parameter(ndl.Tensor(torch.ones(2, 2, requires_grad=True), device=ndl.torch()))
    assert not p._realize().requires_grad
    opt = ndl.optim.Adam([p], lr=0.1)
    (p * p).sum().backward()
    opt.step()
    assert (p * 2)._realize().grad_fn is None


@needs_torch
def test_arrays_of_dtypes_needle_does_not_hold_are_refused_on_their_own_device():
    import torch

    with pytest.raises(TypeError, match="not supported on torch"):
        ndl.Tensor(torch.ones(2, dtype=torch.bfloat16), device=ndl.torch())
    if ndl.jax().enabled():
        import jax.numpy as jnp

        with pytest.raises(TypeError, match="not supported on jax"):
            ndl.Tensor(jnp.ones(2, dtype=jnp.int4), device=ndl.jax())

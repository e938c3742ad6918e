"""Ops that take axes: one axis normaliser for all of them (ints, tuples or lists,
-ndim..ndim-1, errors naming the op, the axis and the shape), and flip, dilate, undilate and
stack over every axis combination against numpy and finite differences."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import needle as ndl
from needle.testing import check_gradients

# op name (as its errors say it) -> the op applied to a tensor with some axes
AXES_OPS = {
    "sum": ndl.summation,
    "sum ": lambda x, axes: ndl.Summation(axes)(x),  # the class used directly
    "max": ndl.max,
    "logsumexp": ndl.logsumexp,
    "logsoftmax": ndl.logsoftmax,
    "flip": ndl.flip,
    "dilate": lambda x, axes: ndl.dilate(x, axes, 1),
    "undilate": lambda x, axes: ndl.undilate(x, axes, 1),
    "normalize": ndl.normalize,
}
SHAPE = (2, 3, 4)


def tensor(device, shape=SHAPE):
    rng = np.random.default_rng(0)
    return ndl.Tensor(rng.standard_normal(shape), device=device)


@pytest.mark.parametrize("name", AXES_OPS)
def test_int_tuple_list_and_negative_axes_agree(name, device):
    op, x = AXES_OPS[name], tensor(device)
    expected = op(x, (0, 2)).numpy()
    for axes in ((0, -1), [0, 2], [-3, -1]):
        np.testing.assert_array_equal(op(x, axes).numpy(), expected)
    np.testing.assert_array_equal(op(x, -2).numpy(), op(x, 1).numpy())


@pytest.mark.parametrize("name", AXES_OPS)
@pytest.mark.parametrize("axes, bad", [(3, 3), (-4, -4), ((0, 3), 3), ([1, -4], -4),
                                       ([7], 7)])
def test_out_of_range_axes_name_the_op_the_axis_and_the_shape(name, axes, bad, device):
    with pytest.raises(ValueError, match=rf"^{name.strip()}: axis {bad} is out of range -3..2 "
                                         r"for shape \(2, 3, 4\)$"):
        AXES_OPS[name](tensor(device), axes)


@pytest.mark.parametrize("name", AXES_OPS)
@pytest.mark.parametrize("axes", [(0, 0), [1, -2]])
def test_repeated_axes_are_refused(name, axes, device):
    with pytest.raises(ValueError, match=rf"^{name.strip()}: repeated axis in"):
        AXES_OPS[name](tensor(device), axes)


@pytest.mark.parametrize("name", AXES_OPS)
@pytest.mark.parametrize("axes", [1.0, "0", True, (0, None)])
def test_axes_that_are_not_ints_are_refused(name, axes, device):
    with pytest.raises(TypeError, match=rf"^{name.strip()}: an axis must be an int"):
        AXES_OPS[name](tensor(device), axes)


def test_tensor_sum_method_validates_too(device):
    with pytest.raises(ValueError, match=r"sum: axis 5 is out of range -2..1 for shape"):
        tensor(device, (2, 2)).sum(5)
    np.testing.assert_allclose(tensor(device, (2, 2)).sum(np.int64(-1)).numpy(),
                               tensor(device, (2, 2)).numpy().sum(-1))


def test_transpose_checks_both_axes(device):
    x = tensor(device, (2, 3))
    with pytest.raises(ValueError, match=r"transpose: axis 5 is out of range -2..1 "
                                         r"for shape \(2, 3\)"):
        x.transpose((0, 5))
    with pytest.raises(ValueError, match="transpose: axis -3 is out of range"):
        ndl.transpose(x, (-3, 0))
    np.testing.assert_array_equal(ndl.transpose(x, [1, 0]).numpy(), x.numpy().T)
    np.testing.assert_array_equal(ndl.transpose(x, (1, 1)).numpy(), x.numpy())
    with pytest.raises(ValueError, match="transpose: swaps two axes, got 1"):
        ndl.transpose(x, 1)


def test_permute_needs_every_axis_once(device):
    x = tensor(device)
    np.testing.assert_array_equal(ndl.permute(x, [2, -3, 1]).numpy(),
                                  np.transpose(x.numpy(), (2, 0, 1)))
    with pytest.raises(ValueError, match=r"permute: axis 3 is out of range -3..2 for shape"):
        ndl.permute(x, (0, 1, 3))
    with pytest.raises(ValueError, match="permute: repeated axis in"):
        ndl.permute(x, (0, 1, -3))
    with pytest.raises(ValueError, match=r"permute: \(1, 0\) is not a permutation of the "
                                         r"axes of shape \(2, 3, 4\)"):
        ndl.permute(x, (1, 0))


def test_permute_gradient_with_negative_axes(device):
    x = tensor(device)
    c = np.arange(24.0).reshape(4, 2, 3)
    (ndl.permute(x, (-1, 0, -2)) * ndl.Tensor(c, device=device)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.transpose(c, (1, 2, 0)))


def test_stack_axis_ranges_over_one_more_axis(device):
    x = tensor(device, (2, 3))
    for axis in (2, -3):
        np.testing.assert_array_equal(ndl.stack([x, x], axis).numpy(),
                                      np.stack([x.numpy()] * 2, axis))
    for axis in (3, -4):
        with pytest.raises(ValueError, match=rf"stack: axis {axis} is out of range -3..2 "
                                             r"for shape \(2, 3\)"):
            ndl.stack([x, x], axis)


def test_split_axis_is_checked(device):
    x = tensor(device)
    assert len(ndl.split(x, -1)) == 4
    with pytest.raises(ValueError, match=r"split: axis 3 is out of range -3..2 for shape"):
        ndl.split(x, 3)


# ----- flip, dilate, undilate, stack over every axis combination ---------------------------
COMBINATION_SHAPE = (2, 3, 2)
AXIS_SETS = [axes for r in range(1, 4) for axes in itertools.combinations(range(3), r)]


def as_tensor(x, device, dtype="float64", requires_grad=True):
    return ndl.Tensor(x, device=device, dtype=dtype, requires_grad=requires_grad)


def np_dilate(a, axes, d):
    out = np.zeros(tuple(s * (d + 1) if i in axes else s for i, s in enumerate(a.shape)))
    out[tuple(slice(None, None, d + 1) if i in axes else slice(None)
              for i in range(a.ndim))] = a
    return out


@pytest.mark.parametrize("axes", AXIS_SETS, ids=str)
def test_flip_every_axis_combination(axes, device):
    a = np.random.default_rng(4).standard_normal(COMBINATION_SHAPE)
    np.testing.assert_array_equal(ndl.flip(as_tensor(a, device), axes).numpy(), np.flip(a, axes))
    check_gradients(lambda x: ndl.flip(x, axes), a, device=device)


@pytest.mark.parametrize("axes", AXIS_SETS, ids=str)
@pytest.mark.parametrize("d", [0, 1, 2])
def test_dilate_and_undilate_every_axis_combination(axes, d, device):
    rng = np.random.default_rng(5)
    a = rng.standard_normal(COMBINATION_SHAPE)
    out = ndl.dilate(as_tensor(a, device), axes, d)
    np.testing.assert_array_equal(out.numpy(), np_dilate(a, axes, d))
    check_gradients(lambda x: ndl.dilate(x, axes, d), a, device=device)
    big = rng.standard_normal(tuple(s * (d + 1) if i in axes else s
                                    for i, s in enumerate(COMBINATION_SHAPE)))
    back = ndl.undilate(as_tensor(big, device), axes, d).numpy()
    np.testing.assert_array_equal(back, big[tuple(slice(None, None, d + 1) if i in axes
                                                  else slice(None) for i in range(3))])
    check_gradients(lambda x: ndl.undilate(x, axes, d), big, device=device)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_stack_of_up_to_five_tensors_on_any_axis(count, axis, device):
    rng = np.random.default_rng(count)
    arrays = [rng.standard_normal((2, 3)) for _ in range(count)]
    tensors = [as_tensor(a, device) for a in arrays]
    out = ndl.stack(tensors, axis)
    np.testing.assert_array_equal(out.numpy(), np.stack(arrays, axis))
    node_grad = out.op.gradient(as_tensor(np.ones(out.shape), device, requires_grad=False), out)
    assert isinstance(node_grad, ndl.TensorTuple) and len(node_grad) == count
    check_gradients(lambda *xs: ndl.stack(list(xs), axis), *arrays, device=device)


@pytest.mark.parametrize("shape, axes, d, kept", [
    ((5,), (0,), 1, (1, 0, 1, 0, 1)),
    ((4,), (0,), 2, (1, 0, 0, 1)),
    ((7,), (0,), 3, (1, 0, 0, 0, 1, 0, 0)),
    ((1,), (0,), 4, (1,)),
])
@pytest.mark.parametrize("create_graph", [True, False])
def test_undilate_adjoint_has_the_input_shape_for_any_length(shape, axes, d, kept,
                                                             create_graph, device):
    """An axis whose length is no multiple of dilation+1: the adjoint is the input's shape
    (dilate alone would give the next multiple), with ones where undilate kept an element."""
    x = as_tensor(np.arange(float(np.prod(shape))).reshape(shape), device)
    ndl.undilate(x, axes, d).sum().backward(create_graph=create_graph)
    assert x.grad.shape == shape
    np.testing.assert_array_equal(x.grad.numpy(), np.array(kept, dtype=float))


@pytest.mark.parametrize("axes, d", [((0, 2), 1), ((1,), 2), ((0, 1, 2), 3)])
def test_undilate_of_ragged_axes_matches_finite_differences(axes, d, device):
    a = np.random.default_rng(6).standard_normal((5, 3, 7))
    check_gradients(lambda x: ndl.undilate(x, axes, d), a, device=device)

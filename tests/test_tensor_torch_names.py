"""PyTorch's Tensor methods (autograd/torch_names.py): mean, unsqueeze, squeeze, view, flatten,
permute, numel, dim, size and tolist against numpy and written-out shapes, their gradients by
finite differences, their errors, and that a Tensor still does not pass for an array."""

from __future__ import annotations

import numpy as np
import pytest

import needle as ndl
from needle.backends import is_device_array
from needle.compiled.support import has_array, is_array
from needle.testing import check_gradients

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7 - 1


def tensor(array, device, dtype="float32"):
    """`array` as a Tensor of `device`."""
    return ndl.Tensor(array, device=device, dtype=dtype)


# ----- mean ------------------------------------------------------------------------------
@pytest.mark.parametrize("axes", [None, 0, 1, -1, (0, 2), (2, 0), [1], (-3, -2, -1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_mean_matches_numpy(axes, keepdims, device):
    want = np.mean(A, axis=None if axes is None else tuple(np.atleast_1d(axes)),
                   keepdims=keepdims)
    got = tensor(A, device).mean(axes, keepdims)
    assert got.shape == want.shape and got.dtype == "float32"
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7)


def test_mean_spellings(device):
    x = tensor(A, device)
    # row k holds 4k..4k+3 over 7, less 1: its mean is (4k + 1.5) / 7 - 1
    want = [[[-0.7857143], [-0.2142857], [0.3571429]], [[0.9285714], [1.5], [2.0714286]]]
    for got in (x.mean(-1, True), x.mean(axes=2, keepdims=True), x.mean(dim=-1, keepdim=True),
                x.mean(2, keepdim=True), x.mean(dim=(2,), keepdims=True)):
        assert got.shape == (2, 3, 1)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(x.mean().numpy(), 11.5 / 7 - 1, rtol=1e-6)
    assert x.mean(dim=None).shape == ()


def test_mean_over_no_dims_is_over_all_of_them_as_pytorchs(device):
    # PyTorch's x.mean(dim=()) is the mean of every element (numpy's axis=() would keep x)
    for got in (tensor(A, device).mean(()), tensor(A, device).mean(dim=[])):
        assert got.shape == ()
        np.testing.assert_allclose(got.numpy(), A.mean(), rtol=1e-6)
    five = tensor(np.float32(5.0), device)
    for got in (five.mean(0), five.mean(dim=-1), five.mean((0,), keepdim=True)):
        assert got.shape == () and float(got.numpy()) == 5.0
    with pytest.raises(ValueError, match="mean: dim 1 is out of range -1..0 for a 0-d"):
        five.mean(1)


def test_float16_means_sum_in_float32(device):
    # 150,528 halves sum to 75,264, past float16's 65,504; 1,000 x 100 to 100,000
    try:
        device.dtype("float16")
    except TypeError:
        pytest.skip(f"{device} has no float16")
    x = tensor(np.full((3, 224, 224), 0.5), device, "float16")
    out = x.mean()
    assert out.dtype == "float16" and float(out.numpy()) == 0.5
    out.backward()
    np.testing.assert_allclose(x.grad.numpy()[0, 0, :2], np.float16(1 / 150528), rtol=1e-3)
    assert float(tensor(np.full(1000, 100.0), device, "float16").mean().numpy()) == 100.0
    np.testing.assert_array_equal(
        tensor(np.full((2, 70000), 2.0), device, "float16").mean(1).numpy(), [2.0, 2.0])


def test_numpys_mean_of_a_tensor(device):
    # np.mean(x) calls x.mean(axis=None, dtype=None, out=None)
    x = tensor(A, device)
    np.testing.assert_allclose(np.asarray(np.mean(x).numpy()), A.mean(), rtol=1e-6)
    np.testing.assert_allclose(np.mean(x, axis=1).numpy(), A.mean(1), rtol=1e-6)
    assert np.mean(x, axis=()).shape == np.mean(A, axis=()).shape == (2, 3, 4)  # (numpy's
    # axis=() averages nothing; PyTorch's dim=() everything: the test above)
    with pytest.raises(TypeError, match="dtype= and out= are not supported"):
        x.mean(dtype="float64")
    with pytest.raises(TypeError, match="both dim and axis"):
        x.mean(dim=1, axis=1)


def test_mean_of_nothing_is_nan(device):
    out = tensor(np.zeros((0, 3)), device).mean(0)
    assert out.shape == (3,) and np.isnan(out.numpy()).all()


def test_mean_errors(device):
    x = tensor(A, device)
    with pytest.raises(ValueError, match=r"mean: axis 3 .*\(2, 3, 4\)"):
        x.mean(3)
    with pytest.raises(ValueError, match=r"mean: axis -4 .*\(2, 3, 4\)"):
        x.mean(dim=-4)
    with pytest.raises(ValueError, match="repeated"):
        x.mean((1, -2))
    with pytest.raises(TypeError, match="both axes and dim"):
        x.mean(1, dim=1)
    with pytest.raises(TypeError, match="both keepdims and keepdim"):
        x.mean(1, True, keepdim=True)
    with pytest.raises(TypeError, match="keepdims must be True or False"):
        x.mean(1, "yes")
    with pytest.raises(TypeError, match="mean: needs a floating tensor, got int64"):
        tensor([1, 2], device, "int64").mean()


@pytest.mark.parametrize("axes,keepdims", [(None, False), ((0, 2), True), (-2, False)])
def test_mean_gradient(axes, keepdims, device):
    check_gradients(lambda x: x.mean(axes, keepdims), A, device=device)


# ----- shape methods: forward -------------------------------------------------------------
@pytest.mark.parametrize("dim,shape", [(0, (1, 2, 3)), (1, (2, 1, 3)), (2, (2, 3, 1)),
                                       (-1, (2, 3, 1)), (-2, (2, 1, 3)), (-3, (1, 2, 3))])
def test_unsqueeze(dim, shape, device):
    a = A[0, :2]  # (2, 4) sliced to (2, 3) below
    a = np.ascontiguousarray(a[:, :3])
    got = tensor(a, device).unsqueeze(dim)
    assert got.shape == shape
    np.testing.assert_array_equal(got.numpy(), a.reshape(shape))


@pytest.mark.parametrize("dim,shape", [(None, (3, 2)), (0, (3, 1, 2)), (-2, (1, 3, 2)),
                                       ((0, 2), (3, 2)), ([-4], (3, 1, 2)), (1, (1, 3, 1, 2)),
                                       (3, (1, 3, 1, 2)), ((1, 3), (1, 3, 1, 2))])
def test_squeeze(dim, shape, device):
    a = np.arange(6, dtype=np.float32).reshape(1, 3, 1, 2)
    got = tensor(a, device).squeeze(dim)
    assert got.shape == shape
    np.testing.assert_array_equal(got.numpy(), a.reshape(shape))


def test_squeeze_and_flatten_of_0d(device):
    x = tensor(5.0, device)
    assert x.squeeze().shape == () and x.squeeze(0).shape == () and x.squeeze(-1).shape == ()
    assert x.flatten().shape == (1,) and x.flatten().tolist() == [5.0]
    with pytest.raises(ValueError, match=r"squeeze: dim 1 .*shape \(\)"):
        x.squeeze(1)
    with pytest.raises(ValueError, match=r"flatten: dim -2 .*shape \(\)"):
        x.flatten(-2)


@pytest.mark.parametrize("args,shape", [((6, 4), (6, 4)), (((6, 4),), (6, 4)),
                                        (([3, 8],), (3, 8)), ((-1,), (24,)),
                                        ((2, -1, 3), (2, 4, 3)), ((np.int64(4), 6), (4, 6))])
def test_view(args, shape, device):
    got = tensor(A, device).view(*args)
    assert got.shape == shape
    np.testing.assert_array_equal(got.numpy(), A.reshape(shape))


@pytest.mark.parametrize("start,end,shape", [(0, -1, (120,)), (1, -1, (2, 60)),
                                             (1, 2, (2, 12, 5)), (-3, -2, (2, 12, 5)),
                                             (2, 2, (2, 3, 4, 5)), (0, 1, (6, 4, 5))])
def test_flatten(start, end, shape, device):
    a = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
    got = tensor(a, device).flatten(start, end)
    assert got.shape == shape
    np.testing.assert_array_equal(got.numpy(), a.reshape(shape))


def test_flatten_defaults_to_everything(device):
    assert tensor(A, device).flatten().shape == (24,)
    assert tensor(A, device).flatten(start_dim=1).shape == (2, 12)
    assert tensor(A, device).flatten(end_dim=1).shape == (6, 4)


@pytest.mark.parametrize("args", [(2, 0, 1), ((2, 0, 1),), ([-1, 0, -2],)])
def test_permute(args, device):
    got = tensor(A, device).permute(*args)
    assert got.shape == (4, 2, 3)
    np.testing.assert_array_equal(got.numpy(), np.transpose(A, (2, 0, 1)))


def test_sizes(device):
    x = tensor(A, device)
    assert x.numel() == 24 and x.dim() == 3 and x.size() == (2, 3, 4)
    assert (x.size(0), x.size(1), x.size(-1), x.size(-3)) == (2, 3, 4, 2)
    assert type(x.size(0)) is int and type(x.numel()) is int and type(x.size()) is tuple
    s = tensor(1.5, device)
    assert s.numel() == 1 and s.dim() == 0 and s.size() == ()
    assert tensor(np.zeros((3, 0)), device).numel() == 0


def test_tolist(device):
    assert tensor([[1, 2], [3, 4]], device, "int64").tolist() == [[1, 2], [3, 4]]
    assert type(tensor([[1, 2]], device, "int64").tolist()[0][0]) is int
    assert tensor([0.5, -2.0], device).tolist() == [0.5, -2.0]
    assert tensor([True, False], device, "bool").tolist() == [True, False]
    out = tensor(2.5, device).tolist()
    assert out == 2.5 and type(out) is float


# ----- shape methods: errors -------------------------------------------------------------
def test_out_of_range_dims_name_the_dim_and_shape(device):
    x = tensor(A, device)
    cases = [(lambda: x.unsqueeze(4), "unsqueeze: axis 4"),
             (lambda: x.unsqueeze(-5), "unsqueeze: axis -5"),
             (lambda: x.squeeze(3), "squeeze: axis 3"),
             (lambda: x.squeeze((0, -4)), "squeeze: axis -4"),
             (lambda: x.flatten(3), "flatten: axis 3"),
             (lambda: x.flatten(0, -4), "flatten: axis -4"),
             (lambda: x.size(3), "size: axis 3"),
             (lambda: x.size(-4), "size: axis -4"),
             (lambda: x.permute(0, 1, 3), "permute: axis 3")]
    for call, message in cases:
        with pytest.raises(ValueError, match=message + r" .*\(2, 3, 4\)"):
            call()


def test_shape_method_errors(device):
    x = tensor(A, device)
    with pytest.raises(ValueError, match=r"reshape: cannot reshape \(2, 3, 4\) .* into \(5, 5\)"):
        x.view(5, 5)
    with pytest.raises(ValueError, match="cannot reshape"):
        x.view(-1, -1)
    with pytest.raises(TypeError, match="view: expected a shape"):
        x.view()
    with pytest.raises(TypeError, match="view: expected ints"):
        x.view(2.0, 12)
    with pytest.raises(TypeError, match="view: expected ints"):
        x.view("float32")
    with pytest.raises(ValueError, match="start_dim 2 comes after end_dim 1"):
        x.flatten(2, 1)
    with pytest.raises(ValueError, match="not a permutation"):
        x.permute(1, 0)
    with pytest.raises(ValueError, match="repeated"):
        x.permute(0, 0, 1)
    with pytest.raises(TypeError, match="an axis must be an int"):
        x.unsqueeze(1.0)
    with pytest.raises(TypeError, match="an axis must be an int"):
        x.size(True)


# ----- gradients ---------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [
    lambda x: x.unsqueeze(1), lambda x: x.unsqueeze(-1).squeeze(), lambda x: x.view(4, -1),
    lambda x: x.view((3, 8)), lambda x: x.flatten(1), lambda x: x.flatten(0, 1),
    lambda x: x.permute(2, 0, 1), lambda x: x.permute(1, 2, 0).mean(dim=0) * x.mean(),
], ids=["unsqueeze", "squeeze", "view", "view_tuple", "flatten", "flatten_lead", "permute",
        "permute_mean"])
def test_gradients(fn, device):
    check_gradients(fn, A, device=device)


def test_squeeze_of_one_axis_gradient(device):
    check_gradients(lambda x: x.squeeze(0) * 2, A[:1], device=device)


# ----- needle's own names are the course's --------------------------------------------------
def test_course_methods_keep_their_meaning(device):
    x = tensor(A, device)
    assert x.transpose().shape == (2, 4, 3) and x.transpose((0, 2)).shape == (4, 3, 2)
    np.testing.assert_allclose(x.sum((0, 2)).numpy(), A.sum((0, 2)), rtol=1e-6)
    assert x.reshape((4, 6)).shape == (4, 6) and x.ndim == 3 and x.shape == (2, 3, 4)


# ----- a Tensor is not an array ---------------------------------------------------------------
def test_a_tensor_still_does_not_look_like_an_array(device):
    x = tensor(A, device)
    assert not is_array(x) and not has_array([x, (x,)]) and not is_device_array(x)
    assert not hasattr(x, "__dict__")  # the mixin adds no per-tensor dict
    assert isinstance(x.size(), tuple)  # a method, as PyTorch's, not numpy's int attribute


def test_inside_a_compiled_step(device):
    x = tensor(A, device)

    def step(t):
        return (t.view(-1, 4).mean(0) * t.size(0) + t.flatten(1).mean(dim=-1).sum()).sum()

    eager = step(x).numpy()
    compiled = ndl.compile(step)
    for _ in range(3):
        np.testing.assert_array_equal(compiled(x).numpy(), eager)


# ----- comparisons -------------------------------------------------------------------------
B = np.array([[0.5, -1.0, 2.0, 0.0]], np.float32)  # (1, 4): broadcasts against (2, 3, 4)


def test_comparisons_are_elementwise_bool_tensors(device):
    x, b = tensor(A, device), tensor(B, device)
    # written out with numpy's operators on the host arrays
    for got, want in ((x == b, A == B), (x != b, A != B), (x < b, A < B), (x <= b, A <= B),
                      (x > b, A > B), (x >= b, A >= B), (x > 0.5, A > 0.5), (x == 0, A == 0),
                      (0.5 < x, A > 0.5), (1 >= x, A <= 1)):
        assert got.dtype == "bool" and got.shape == want.shape and not got.requires_grad
        np.testing.assert_array_equal(got.numpy(), want)
    same = tensor(A, device)
    assert (x == same).numpy().all() and not (x != same).numpy().any()
    assert (x == x).numpy().all()  # (elementwise: NaN aside, all True)
    accuracy = (tensor([1, 2, 3], device, "int64") == tensor([1, 0, 3], device, "int64"))
    np.testing.assert_array_equal(accuracy.numpy(), [True, False, True])


def test_nan_is_unequal_to_itself(device):
    x = tensor(np.array([1.0, np.nan], np.float32), device)
    np.testing.assert_array_equal((x != x).numpy(), [False, True])  # the NaN mask idiom
    np.testing.assert_array_equal((x == x).numpy(), [True, False])


def test_comparison_errors_and_identity_fallbacks(device):
    x = tensor(A, device)
    with pytest.raises(ValueError, match=r"gt: shapes \(2, 3, 4\) and \(2, 3\) are not "
                                         "broadcastable"):
        _ = x > tensor(A[:, :, 0], device)
    with pytest.raises(TypeError, match="compare a Tensor with a Tensor or a number, not a "
                                        "ndarray"):
        _ = A == x  # (numpy hands the comparison to the Tensor: no silent False)
    with pytest.raises(TypeError, match="do not combine"):
        _ = x == tensor(np.ones(4), device, "int64")
    assert (x == None) is False and (x != None) is True  # noqa: E711 (identity, as before)
    assert (x == "x") is False
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x == x)
    # sets and dicts key Tensors by identity and never compare two of them
    y = tensor(A, device)
    assert len({x, y, x}) == 2 and {x: 1, y: 2}[y] == 2 and x in [x]


def test_comparisons_inside_a_compiled_step(device):
    labels = tensor([0, 1, 2, 3, 0, 1], device, "int64")

    def correct(x, y):
        hits = x > 0.0  # a bool Tensor made inside the step, read back as data
        return ndl.ops.astype(hits, "float32").sum(), (y == 1)
    run = ndl.compile(correct)
    for scale in (1.0, -1.0):
        x = tensor(A.reshape(6, 4) * scale, device)
        got, eager = run(x, labels), correct(x, labels)
        np.testing.assert_array_equal(got[0].numpy(), eager[0].numpy())
        np.testing.assert_array_equal(got[1].numpy(), [False, True, False, False, False, True])
    assert run.captures == 1

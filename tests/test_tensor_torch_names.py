"""PyTorch's Tensor methods (autograd/torch_names.py, torch_reductions.py): mean, unsqueeze,
squeeze, view, flatten, permute, numel, dim, size, tolist, the course's sum/reshape/transpose
with PyTorch's spellings, argmax, argmin, max, min, the dtype conversions, T, clone, cpu, abs,
sqrt and pow against numpy and written-out shapes, their gradients by finite differences,
their errors, and that a Tensor still does not pass for an array."""

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


# ----- the course's sum, reshape and transpose with PyTorch's spellings ------------------------
def test_transpose_of_two_ints_is_the_courses_swap(device):
    x = tensor(A, device)
    for got, want in ((x.transpose(1, 2), np.swapaxes(A, 1, 2)),
                      (x.transpose((1, 2)), np.swapaxes(A, 1, 2)),
                      (x.transpose(0, -1), np.swapaxes(A, 0, 2)),
                      (x.transpose(2, 0), np.swapaxes(A, 0, 2)),
                      (x.transpose(), np.swapaxes(A, 1, 2)),
                      (x.transpose(np.int64(0), 1), np.swapaxes(A, 0, 1))):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_reshape_of_ints_is_the_courses_reshape(device):
    x = tensor(A, device)
    for args, shape in (((2, 12), (2, 12)), (((2, 12),), (2, 12)), (([4, 6],), (4, 6)),
                        ((24,), (24,)), ((-1,), (24,)), ((3, -1, 2), (3, 4, 2)),
                        ((np.int64(6), 4), (6, 4))):
        got = x.reshape(*args)
        assert got.shape == shape
        np.testing.assert_array_equal(got.numpy(), A.reshape(shape))
    assert x.reshape(shape=(8, 3)).shape == (8, 3)  # (the course's keyword)


@pytest.mark.parametrize("call,axes,keep", [
    (lambda x: x.sum(dim=1, keepdim=True), (1,), True),
    (lambda x: x.sum(1, keepdims=True), (1,), True),
    (lambda x: x.sum(1, True), (1,), True),
    (lambda x: x.sum(dim=(0, 2)), (0, 2), False),
    (lambda x: x.sum(dim=[-1, 0], keepdim=True), (0, 2), True),
    (lambda x: x.sum(axis=2, keepdims=True), (2,), True),
    (lambda x: x.sum(keepdim=True), (0, 1, 2), True),
    (lambda x: x.sum(dim=()), (0, 1, 2), False),  # (PyTorch's dim=(): every dim)
    (lambda x: np.sum(x), (0, 1, 2), False),
    (lambda x: np.sum(x, axis=1, keepdims=True), (1,), True),
], ids=["dim_keepdim", "keepdims", "positional", "dims", "dims_list", "axis", "all_kept",
        "dim_empty", "np_sum", "np_sum_axis"])
def test_sum_spellings_keep_summations_numbers(call, axes, keep, device):
    x = tensor(A, device)
    got = call(x)
    want = x.sum(axes).numpy()  # the course's Summation, to the bit
    if keep:
        want = want.reshape([1 if i in axes else n for i, n in enumerate(A.shape)])
    assert got.shape == want.shape and got.dtype == "float32"
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_allclose(got.numpy(), A.sum(axes, keepdims=keep), rtol=1e-6, atol=1e-6)


def test_course_sum_of_no_axes_is_unchanged(device):
    x = tensor(A, device)  # the course's axes=() and numpy's axis=() sum over nothing
    np.testing.assert_array_equal(x.sum(()).numpy(), A)
    np.testing.assert_array_equal(x.sum(axis=()).numpy(), A)
    assert x.sum(dim=0, keepdim=False).shape == (3, 4)


def test_course_method_spelling_errors(device):
    x = tensor(A, device)
    with pytest.raises(TypeError, match=r"transpose: got one dim, 1; give two"):
        x.transpose(1)
    with pytest.raises(TypeError, match=r"transpose: got \(0, 1\) and 2; give two ints"):
        x.transpose((0, 1), 2)
    with pytest.raises(ValueError, match="transpose: axis 3 is out of range"):
        x.transpose(0, 3)
    with pytest.raises(TypeError, match="reshape: expected ints"):
        x.reshape(2.0, 12)
    with pytest.raises(ValueError, match=r"cannot reshape \(2, 3, 4\)"):
        x.reshape(5, 5)
    with pytest.raises(TypeError, match="sum: got both axes and dim"):
        x.sum(1, dim=1)
    with pytest.raises(TypeError, match="sum: got both dim and axis"):
        x.sum(dim=1, axis=1)
    with pytest.raises(TypeError, match="sum: got both keepdims and keepdim"):
        x.sum(1, True, keepdim=True)
    with pytest.raises(TypeError, match="sum: keepdim must be True or False"):
        x.sum(dim=1, keepdim="yes")
    with pytest.raises(TypeError, match="sum: out= is not supported"):
        x.sum(axis=1, out=np.zeros(3))
    with pytest.raises(ValueError, match=r"sum: axis 3 .*\(2, 3, 4\)"):
        x.sum(dim=3, keepdim=True)


@pytest.mark.parametrize("fn", [
    lambda x: x.transpose(0, 2), lambda x: x.reshape(4, 6), lambda x: x.reshape(24),
    lambda x: x.sum(dim=1, keepdim=True) * x, lambda x: x.sum((0, 2), keepdims=True) * x,
], ids=["transpose", "reshape", "reshape_int", "sum_keepdim", "sum_keepdims"])
def test_course_method_spelling_gradients(fn, device):
    check_gradients(fn, A, device=device)


# ----- argmax, argmin, max, min ----------------------------------------------------------
R = np.random.default_rng(0).permutation(24).reshape(2, 3, 4).astype(np.float32) / 4 - 3
TIES = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], np.float32)


@pytest.mark.parametrize("dim", [None, 0, 1, 2, -1, -3])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_and_argmin_match_numpy(dim, keepdim, device):
    x = tensor(R, device, "float32").requires_grad_()
    for name in ("argmax", "argmin"):
        got = getattr(x, name)(dim, keepdim)
        want = getattr(np, name)(R, axis=dim, keepdims=keepdim)
        assert got.shape == want.shape, name
        assert got.dtype == "int64" and not got.requires_grad
        np.testing.assert_array_equal(got.numpy(), want)


def test_argmax_ties_ints_bools_and_0d(device):
    x = tensor(TIES, device)  # the first of tied entries, as PyTorch's and numpy's
    assert x.argmax(1).tolist() == [1, 0] and x.argmin(1).tolist() == [0, 2]
    assert x.argmax().item() == 1 and x.argmin(dim=None).item() == 5
    assert x.argmax(keepdim=True).shape == (1, 1)
    ints = tensor([[5, -7, 2], [0, 9, 9]], device, "int64")
    assert ints.argmax(dim=1).tolist() == [0, 1] and ints.argmin(0).tolist() == [1, 0, 0]
    bools = tensor([False, True, True], device, "bool")
    assert bools.argmax().item() == 1 and bools.argmin().item() == 0
    five = tensor(5.0, device)
    for got in (five.argmax(), five.argmax(0), five.argmin(-1, keepdim=True)):
        assert got.shape == () and got.item() == 0
    assert tensor(np.zeros((2, 0)), device).argmax(0).shape == (0,)


def test_argmax_errors(device):
    x = tensor(R, device)
    with pytest.raises(ValueError, match=r"argmax: axis 3 .*\(2, 3, 4\)"):
        x.argmax(3)
    with pytest.raises(TypeError, match=r"argmin: dim must be an int or None, got \(0, 1\)"):
        x.argmin((0, 1))
    with pytest.raises(TypeError, match="argmax: keepdim must be True or False"):
        x.argmax(1, "yes")
    with pytest.raises(ValueError, match=r"argmax: cannot reduce over an empty axis"):
        tensor(np.zeros((0, 3)), device).argmax(0)
    with pytest.raises(ValueError, match=r"argmin: cannot reduce over an empty axis"):
        tensor(np.zeros((0, 3)), device).argmin()
    with pytest.raises(ValueError, match=r"argmax: dim 1 is out of range -1..0 for a 0-d"):
        tensor(5.0, device).argmax(1)


def test_max_and_min_of_everything(device):
    x = tensor(R, device)
    for got, want in ((x.max(), R.max()), (x.min(), R.min()), (np.max(x), R.max()),
                      (np.min(x), R.min())):
        assert got.shape == () and got.dtype == "float32"
        assert got.item() == want
    assert x.max(keepdim=True).shape == (1, 1, 1)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_and_min_along_a_dim_give_values_and_indices(dim, keepdim, device):
    x = tensor(R, device)
    for name, arg in (("max", np.argmax), ("min", np.argmin)):
        out = getattr(x, name)(dim, keepdim)
        values, indices = out  # (PyTorch's named tuple)
        assert out.values is values and out[1] is indices and len(out) == 2
        want = getattr(np, name)(R, axis=dim, keepdims=keepdim)
        assert values.shape == want.shape and values.dtype == "float32"
        np.testing.assert_array_equal(values.numpy(), want)
        assert indices.dtype == "int64" and not indices.requires_grad
        np.testing.assert_array_equal(indices.numpy(), arg(R, axis=dim, keepdims=keepdim))
    assert x.max(dim=dim, keepdim=keepdim).values.shape == want.shape


def test_max_and_min_with_numpys_axis_give_the_values_only(device):
    x = tensor(R, device)
    got = x.max(axis=(0, 2), keepdims=True)
    assert isinstance(got, ndl.Tensor) and got.shape == (1, 3, 1)
    np.testing.assert_array_equal(got.numpy(), R.max((0, 2), keepdims=True))
    np.testing.assert_array_equal(np.min(x, axis=1).numpy(), R.min(1))
    np.testing.assert_array_equal(x.min(axis=(0, 1)).numpy(), R.min((0, 1)))


def test_min_of_integers_and_bools(device):
    # -x wraps at the lowest int8 and for unsigned integers: min is no -max(-x) there
    low = tensor([[-128, 127], [0, 5]], device, "int8")
    assert low.min().item() == -128 and low.min(1).values.tolist() == [-128, 0]
    assert low.min(dim=0).indices.tolist() == [0, 1]
    unsigned = tensor([[0, 5], [255, 3]], device, "uint8")
    assert unsigned.min().item() == 0 and unsigned.min(axis=0).tolist() == [0, 3]
    assert unsigned.max(1).values.tolist() == [5, 255]
    bools = tensor([[True, False], [True, True]], device, "bool")
    assert bools.min().item() is False and bools.min(1).values.tolist() == [False, True]
    assert bools.max().item() is True and bools.min(1).indices.tolist() == [1, 0]
    five = tensor(5.0, device)
    values, indices = five.min(0)
    assert values.item() == 5.0 and indices.item() == 0 and values.shape == indices.shape == ()


def test_max_and_min_errors(device):
    x = tensor(R, device)
    with pytest.raises(TypeError, match=r"max: dim must be an int or None, got a Tensor "
                                        r"\(PyTorch's elementwise x.max\(other\)"):
        x.max(tensor(R, device))
    with pytest.raises(TypeError, match=r"min: dim must be an int or None, got \(0, 1\); "
                                        r"for the values over several axes, min\(axis"):
        x.min((0, 1))
    with pytest.raises(TypeError, match="max: got both dim and axis"):
        x.max(1, axis=1)
    with pytest.raises(TypeError, match="min: got both keepdim and keepdims"):
        x.min(1, True, keepdims=True)
    with pytest.raises(TypeError, match="max: out= is not supported"):
        x.max(axis=1, out=np.zeros(3))
    with pytest.raises(ValueError, match=r"max: axis -4 .*\(2, 3, 4\)"):
        x.max(-4)
    with pytest.raises(ValueError, match="min: cannot reduce over an empty axis"):
        tensor(np.zeros((2, 0), np.int64), device, "int64").min(1)


@pytest.mark.parametrize("fn", [
    lambda x: x.max(), lambda x: x.min(), lambda x: x.max(1).values,
    lambda x: x.min(dim=-1, keepdim=True)[0] * x, lambda x: x.max(axis=(0, 2)),
    lambda x: x.min(axis=0, keepdims=True),
], ids=["max", "min", "max_dim", "min_dim_keepdim", "max_axes", "min_axis"])
def test_max_and_min_gradients(fn, device):
    check_gradients(fn, R, device=device)


def test_tied_maxima_share_the_gradient(device):
    # (PyTorch's max(dim) gives it all to the indexed entry; its max() shares, as needle)
    x = tensor(TIES, device).requires_grad_()
    x.max(1).values.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [0.5, 0.5, 0]])


# ----- dtype conversions --------------------------------------------------------------------
@pytest.mark.parametrize("method,dtype", [("float", "float32"), ("double", "float64"),
                                          ("half", "float16"), ("int", "int32"),
                                          ("long", "int64"), ("bool", "bool")])
def test_dtype_conversions(method, dtype, device):
    if dtype == "float16":
        try:
            device.dtype("float16")
        except TypeError:
            pytest.skip(f"{device} has no float16")
    a = np.array([[-2.5, 0.0, 1.0], [3.75, -0.5, 7.0]], np.float64)
    x = tensor(a, device, "float64")
    got = getattr(x, method)()
    assert got.dtype == dtype and got.shape == a.shape
    np.testing.assert_array_equal(got.numpy(), a.astype(dtype))
    assert getattr(got, method)() is got  # already there: itself, as PyTorch's


def test_floating_conversions_carry_the_gradient(device):
    x = tensor(A, device, "float32").requires_grad_()
    (x.double() * 3.0).sum().backward()
    assert x.grad.dtype == "float32"
    np.testing.assert_array_equal(x.grad.numpy(), np.full(A.shape, 3.0, np.float32))


# ----- T, clone, contiguous, cpu ----------------------------------------------------------
def test_T_reverses_the_axes(device):
    m = np.ascontiguousarray(A[0])
    np.testing.assert_array_equal(tensor(m, device).T.numpy(), m.T)
    np.testing.assert_array_equal(tensor(A, device).T.numpy(), np.transpose(A))
    assert tensor(A, device).T.shape == (4, 3, 2)
    v = tensor(A[0, 0], device)
    assert v.T.shape == (4,) and tensor(2.0, device).T.shape == ()
    check_gradients(lambda x: x.T, m, device=device)
    check_gradients(lambda x: x.T * 2, A, device=device)


def test_clone_is_a_copy_in_the_graph(device):
    x = tensor(A, device).requires_grad_()
    c = x.clone()
    assert c is not x and c.dtype == "float32" and c.requires_grad
    np.testing.assert_array_equal(c.numpy(), A)
    (c * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(A.shape, 2.0, np.float32))
    d = x.detach()
    e = d.clone()
    with ndl.no_grad():
        e += 1.0  # the clone's data changes, the original's does not
    np.testing.assert_array_equal(d.numpy(), A)
    np.testing.assert_array_equal(e.numpy(), A + 1.0)
    check_gradients(lambda t: t.clone() * t, A, device=device)


def test_contiguous_and_cpu(device):
    x = tensor(A, device).requires_grad_()
    assert x.contiguous() is x
    host = x.cpu()
    assert host.device == ndl.cpu() and host.shape == A.shape
    np.testing.assert_array_equal(host.numpy(), A)
    (x * 2.0).cpu().sum().backward()  # an op's output is copied in the graph
    assert x.grad.device == device
    np.testing.assert_array_equal(x.grad.numpy(), np.full(A.shape, 2.0, np.float32))


# ----- abs, sqrt, pow -------------------------------------------------------------------------
def test_abs(device):
    a = np.array([[-2.5, -0.0, 0.0], [3.0, -1e-3, np.inf]], np.float32)
    for got in (tensor(a, device).abs(), abs(tensor(a, device))):
        assert got.dtype == "float32"
        np.testing.assert_array_equal(got.numpy(), np.abs(a))
        assert not np.signbit(got.numpy()).any()  # |-0.0| is 0.0
    ints = tensor([-3, 0, 4], device, "int64").abs()
    assert ints.dtype == "int64" and ints.tolist() == [3, 0, 4]
    assert tensor([0, 7, 255], device, "uint8").abs().tolist() == [0, 7, 255]
    with pytest.raises(TypeError, match="abs: got a tensor of dtype bool"):
        tensor([True], device, "bool").abs()


def test_abs_gradient_is_the_sign_and_zero_at_zero(device):
    x = tensor([-2.0, 0.0, 3.0, -0.0], device).requires_grad_()
    x.abs().sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [-1.0, 0.0, 1.0, 0.0])
    check_gradients(lambda t: t.abs(), R, device=device)


def test_sqrt_and_pow(device):
    pos = A + 2
    np.testing.assert_allclose(tensor(pos, device).sqrt().numpy(), np.sqrt(pos), rtol=1e-6)
    np.testing.assert_allclose(tensor(A, device).pow(2).numpy(), A ** 2, rtol=1e-6)
    np.testing.assert_allclose(tensor(pos, device).pow(tensor(A, device)).numpy(),
                               np.power(pos, A), rtol=1e-5)
    assert tensor([2, 3], device, "int64").pow(3).tolist() == [8, 27]
    with pytest.raises(TypeError, match="sqrt: needs a floating tensor, got int64"):
        tensor([4], device, "int64").sqrt()
    check_gradients(lambda t: t.sqrt(), pos, device=device)
    check_gradients(lambda t: t.pow(3), A, device=device)
    check_gradients(lambda b, e: b.pow(e), pos, A, device=device)


def test_new_names_inside_a_compiled_step(device):
    labels = tensor([1, 2, 0, 3, 3, 0], device, "int64")

    def step(x, y):
        values, indices = (x.abs().T * 2).T.max(1)
        hits = (x.argmax(dim=1) == y).float().sum()
        return values.sqrt().sum() + x.sum(dim=0, keepdim=True).sum(), hits, indices
    run = ndl.compile(step)
    for scale in (1.0, -1.0, 0.5):
        x = tensor(R.reshape(6, 4) * scale, device)
        got, eager = run(x, labels), step(x, labels)
        for g, e in zip(got, eager):
            np.testing.assert_array_equal(g.numpy(), e.numpy())
    assert run.captures == 1


def test_comparisons_with_scalars_follow_one_rule_on_every_device(device):
    # the scalar ops' rule (an int with any numeric tensor, a float with floating ones), so
    # strict, numpy and torch agree: they had three answers for `labels == 1.0`
    f = tensor([1.0, 2.5], device)
    labels = tensor([1, 2], device, "int64")
    u8 = tensor([3, 255], device, "uint8")
    mask = tensor([True, False], device, "bool")
    np.testing.assert_array_equal((f == True).numpy(), [True, False])  # noqa: E712 (True: 1)
    np.testing.assert_array_equal((f > np.float32(1.0)).numpy(), [False, True])
    np.testing.assert_array_equal((labels == np.int64(2)).numpy(), [False, True])
    np.testing.assert_array_equal((mask == True).numpy(), [True, False])  # noqa: E712
    np.testing.assert_array_equal((mask != False).numpy(), [True, False])  # noqa: E712
    # an int past the dtype's range compares as the number it is
    for got, want in ((u8 == 300, [False, False]), (u8 != 300, [True, True]),
                      (u8 < 300, [True, True]), (u8 >= -1, [True, True]),
                      (u8 > 300, [False, False]), (labels <= -(2**70), [False, False]),
                      (labels < 2**70, [True, True])):
        assert got.dtype == "bool"
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(TypeError, match="eq: the scalar 1.0 with a tensor of dtype int64"):
        _ = labels == 1.0
    with pytest.raises(TypeError, match="a bool tensor compares with True or False by == "
                                        "and != only, not with 1"):
        _ = mask == 1
    with pytest.raises(TypeError, match="lt: bool tensors are only compared with == and !="):
        _ = mask < mask
    with pytest.raises(TypeError, match=r"not a ndarray of shape \(2,\)"):
        _ = f == np.array([1.0, 2.0])
    np.testing.assert_array_equal((f == np.array([2.5])).numpy(), [False, True])


def test_casts_to_integers_and_bools_carry_no_gradient(device):
    # as PyTorch's: (x * x.int().float()).sum() has the gradient x.int(), not x.int() + x
    # cut to an integer (the adjoint went back through the cast)
    x = tensor([1.5, -2.7, 3.2], device)
    for cast, want in (("int", [1, -2, 3]), ("long", [1, -2, 3]), ("bool", [1, 1, 1])):
        x.grad = None
        rounded = getattr(x, cast)()
        assert not rounded.requires_grad
        (x * ndl.ops.astype(rounded, "float32")).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), want)
    y = ndl.ops.astype(x, "float64")  # floating casts keep theirs
    assert y.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1, 1])


def test_sqrt_is_the_square_root(device):
    # not x ** 0.5: pow gave sqrt(-inf) = +inf on jax, and its gradient +inf at -0.0
    x = tensor(np.array([4.0, 0.25, -0.0, -1.0, -np.inf], np.float32), device)
    with np.errstate(invalid="ignore"):  # (numpy's and strict's warnings at -1 and -inf)
        want, got = np.sqrt(x.numpy()), x.sqrt().numpy()
    np.testing.assert_array_equal(got, want)  # NaN, -0.0 and all
    y = tensor([4.0, 0.25], device)
    y.sqrt().sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [0.25, 1.0])
    check_gradients(lambda t: t.sqrt(), np.array([0.5, 2.0, 9.0]), device=device)


def test_sum_of_a_0d_tensor_over_dim_0(device):
    five = tensor(np.float32(5.0), device)
    for got in (five.sum(dim=0), five.sum(dim=-1)):
        assert got.shape == () and float(got.numpy()) == 5.0
    with pytest.raises(ValueError, match="out of range"):
        five.sum(dim=1)


def test_astype_of_raw_arrays_and_pickled_comparisons(device):
    # ops.astype takes a device's raw array as every op does (a gradient rule's arrays)
    raw = device.asarray(np.ones(3, np.int32))
    assert device.public_dtype(ndl.ops.astype(raw, "float32").dtype).name == "float32"
    assert device.public_dtype(ndl.ops.astype(raw, "int8").dtype).name == "int8"
    import pickle

    assert pickle.loads(pickle.dumps(ndl.Tensor.__lt__)) is ndl.Tensor.__lt__
    np.testing.assert_array_equal(ndl.ops.sqrt(tensor([4.0], device)).numpy(), [2.0])

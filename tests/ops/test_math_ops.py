"""The numpy-kernel math ops (fastop::min, prod, cumsum, clip): results and dtypes
against numpy across dtypes, axes and keepdim, meta with unknown dims, rules against
finite differences (prod with zeros, ties of min, clip's strict bounds), errors."""
import math

import numpy as np
import pytest

import fastop
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule

DTYPES = ["int32", "int64", "float32", "float64"]
AXES = [None, 0, -1, [0, 2], []]


def data(dtype, shape=(2, 3, 4), seed=0):
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(-5, 6, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def call(name, x, **attrs):
    return registry.get(f"fastop::{name}")(fastop.to_tensor(x), **attrs).numpy()


def numpy_axes(axis, ndim):
    return tuple(range(ndim)) if axis is None or axis == [] else \
        tuple(axis) if isinstance(axis, list) else axis


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_min_and_prod_match_numpy(dtype, axis, keepdim):
    x = data(dtype)
    ax = numpy_axes(axis, x.ndim)
    got = call("min", x, axis=axis, keepdim=keepdim)
    np.testing.assert_array_equal(got, np.amin(x, axis=ax, keepdims=keepdim))
    got = call("prod", x, axis=axis, keepdim=keepdim)
    want = np.prod(x, axis=ax, keepdims=keepdim, dtype=x.dtype)
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cumsum_matches_numpy(dtype, reverse):
    x = data(dtype)
    for axis in (0, 1, -1):
        got = call("cumsum", x, axis=axis, reverse=reverse)
        out = "int64" if dtype == "int32" else dtype     # PaddlePaddle's cumsum dtype
        want = np.flip(np.cumsum(np.flip(x, axis), axis, dtype=out), axis) if reverse \
            else np.cumsum(x, axis, dtype=out)
        assert got.dtype == out
        np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_matches_numpy_and_rounds_integer_bounds_inward(dtype):
    x = data(dtype)
    got = call("clip", x, min=-1.5, max=2.5)
    want = np.clip(x, -1, 2) if dtype.startswith("int") else np.clip(x, -1.5, 2.5)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, want.astype(dtype))
    np.testing.assert_array_equal(call("clip", x), x)       # no bounds
    big = call("clip", x, min=-1e30, max=1e30)               # beyond int32's range
    np.testing.assert_array_equal(big, x)


def test_meta_with_unknown_dims():
    x = TensorMeta([None, 3, 4], "float32")
    assert registry.get("fastop::min").infer_meta([x], {"axis": 1, "keepdim": False}) == \
        [TensorMeta([None, 4], "float32")]
    assert registry.get("fastop::prod").infer_meta([x], {"axis": None, "keepdim": True}) == \
        [TensorMeta([1, 1, 1], "float32")]
    assert registry.get("fastop::cumsum").infer_meta([x], {"axis": 0, "reverse": False}) == \
        [x]


def test_rules_match_finite_differences():
    rng = np.random.default_rng(2)
    check_grad_rule("fastop::min", [rng.standard_normal((3, 4))], {"axis": 1})
    ties = np.array([[1.0, 0.5, 0.5], [2.0, 3.0, -1.0]])
    grads = check_grad_rule("fastop::min", [ties], {"axis": 1, "keepdim": True},
                            douts=[np.ones((2, 1))])
    np.testing.assert_allclose(np.asarray(grads[0])[0], [0, 0.5, 0.5])  # split evenly
    for x in (rng.standard_normal((3, 4)), np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])):
        for axis in (None, 1, [0, 1]):
            check_grad_rule("fastop::prod", [x], {"axis": axis})
    check_grad_rule("fastop::cumsum", [rng.standard_normal((3, 4))], {"axis": 0})
    check_grad_rule("fastop::cumsum", [rng.standard_normal((3, 4))],
                    {"axis": 1, "reverse": True})
    x = np.array([[-2.0, -0.5, 0.3], [0.9, 1.7, 3.0]])
    grads = check_grad_rule("fastop::clip", [x], {"min": -1.0, "max": 1.0},
                            douts=[np.ones((2, 3))])
    np.testing.assert_array_equal(np.asarray(grads[0]), [[0, 1, 1], [1, 0, 0]])


def test_clip_gradient_is_zero_on_the_bounds():
    # PaddlePaddle's rule: the gradient flows where min < x < max (strictly)
    x = fastop.to_tensor([-1.0, 0.0, 1.0], stop_gradient=False)
    registry.get("fastop::clip")(x, min=-1.0, max=1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 0.0])


@pytest.mark.parametrize("call_,error,message", [
    (lambda: call("min", np.ones((0, 3)), axis=0), ValueError, "fastop::min: cannot take"),
    (lambda: call("min", np.ones((2, 3)), axis=2), ValueError, "fastop::min: axis 2 is out"),
    (lambda: call("prod", np.ones((2, 3)), axis=[0, 0]), ValueError, "names an axis twice"),
    (lambda: call("cumsum", np.ones((2, 3)), axis=1.5), TypeError, "'axis' expects int"),
    (lambda: call("clip", np.ones(3), min=2.0, max=1.0), ValueError,
     "fastop::clip: min (2.0) must not exceed max (1.0)"),
])
def test_errors_name_the_op(call_, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        call_()


def test_eager_equals_static(run_static):
    x = data("float64")
    for name, attrs in (("min", {"axis": 1}), ("prod", {"axis": [0, 2]}),
                        ("cumsum", {"axis": 2}), ("clip", {"min": -0.5, "max": math.inf})):
        op = registry.get(f"fastop::{name}")
        np.testing.assert_array_equal(run_static(lambda v: op(v, **attrs), x)[0],
                                      call(name, x, **attrs))

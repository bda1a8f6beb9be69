"""The numpy-kernel elementwise ops (fastop::sin cos tan asin acos atan sinh cosh rsqrt
floor ceil round trunc remainder): results and dtypes against numpy (round against the
half-away-from-zero rule, not numpy's half to even), 0-D tensors, rules against float64
finite differences (zero for the rounding ops), eager against static, the `%` operator,
and errors naming the op."""
import numpy as np
import pytest

import fastop
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule

FLOATS = ["float32", "float64"]
UNARY = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
         "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "floor": np.floor,
         "ceil": np.ceil, "trunc": np.trunc, "rsqrt": lambda x: 1 / np.sqrt(x)}


def call(name, *inputs, **attrs):
    return registry.get(f"fastop::{name}")(*map(fastop.to_tensor, inputs), **attrs).numpy()


def data(dtype, shape=(3, 4), low=-0.95, high=0.95, seed=0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_match_numpy_in_xs_dtype(name, dtype):
    x = data(dtype, low=0.05 if name == "rsqrt" else -0.95) * (1 if name in (
        "asin", "acos", "rsqrt") else 3)
    got = call(name, x)
    assert got.dtype == x.dtype and got.shape == x.shape
    tol = 1e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, UNARY[name](x.astype("float64")), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS)
def test_round_takes_halves_away_from_zero_unlike_numpy(dtype):
    x = np.array([-2.5, -1.5, -0.5, -0.2, 0.5, 1.5, 2.5, 2.4999, 3.7, -3.7], dtype)
    got = call("round", x)
    np.testing.assert_array_equal(got, [-3, -2, -1, -0.0, 1, 2, 3, 2, 4, -4])
    assert got.dtype == x.dtype
    assert np.signbit(got[3])                       # -0.2 rounds to -0., as C's round
    assert not np.array_equal(got, np.round(x))     # numpy: half to even (-2, 0, 2)


def test_trunc_keeps_integers_and_rounds_floats_toward_zero():
    ints = np.array([[-7, 3], [0, 9]], "int32")
    got = call("trunc", ints)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ints)
    np.testing.assert_array_equal(call("trunc", np.array([-2.7, 2.7, -0.3])), [-2, 2, -0.0])


def test_domain_edges_give_inf_and_nan_without_warnings():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = call("rsqrt", np.array([0.0, -1.0, 4.0]))
        np.testing.assert_array_equal(got, [np.inf, np.nan, 0.5])
        assert np.isnan(call("asin", np.array([1.5]))).all()
        assert np.isnan(call("acos", np.array([-1.5]))).all()
        assert np.isnan(call("remainder", np.array([1.0]), np.array([0.0]))).all()
        np.testing.assert_array_equal(call("round", np.array([np.inf, -np.inf, np.nan])),
                                      [np.inf, -np.inf, np.nan])


@pytest.mark.parametrize("name", sorted(UNARY) + ["round"])
def test_zero_d_in_zero_d_out(name):
    out = registry.get(f"fastop::{name}")(fastop.to_tensor(0.5, dtype="float64"))
    assert out.shape == [] and out.dtype == fastop.float64


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_remainder_takes_the_sign_of_the_divisor(dtype):
    x = np.array([[-7, 7, -7, 7, 0, 9]], dtype)
    y = np.array([3, 3, -3, -3, 5, 4], dtype)
    got = call("remainder", x, y)
    assert got.dtype == x.dtype and got.shape == (1, 6)
    np.testing.assert_array_equal(got, [[2, 1, -1, -2, 0, 1]])
    np.testing.assert_array_equal(got, np.remainder(x, y))      # Python's rule, as numpy


def test_remainder_of_floats_broadcasts_like_numpy():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(-9, 9, (4, 1)), rng.choice([-2.5, 1.5, 3.0], (3,))
    np.testing.assert_allclose(call("remainder", x, y), np.remainder(x, y), rtol=1e-12)
    out = registry.get("fastop::remainder")(fastop.to_tensor(7.5), fastop.to_tensor(-2.0))
    assert out.shape == [] and out.item() == -0.5


def test_percent_operator_and_its_reflection():
    x = fastop.to_tensor([-7.0, 7.0, 5.5])
    np.testing.assert_array_equal((x % 3).numpy(), [2.0, 1.0, 2.5])
    np.testing.assert_array_equal((x % fastop.to_tensor([-2.0, 2.0, 2.0])).numpy(),
                                  [-1.0, 1.0, 1.5])
    np.testing.assert_array_equal((10 % fastop.to_tensor([3, -3, 4])).numpy(), [1, -2, 2])
    n = fastop.to_tensor([-7, 8])
    assert (n % 3).dtype == fastop.int64 and (n % 3).tolist() == [2, 2]


def test_meta_with_unknown_dims():
    x = TensorMeta([None, 3], "float32")
    for name in ("sin", "round", "rsqrt", "trunc"):
        assert registry.get(f"fastop::{name}").infer_meta([x], {}) == [x]
    y = TensorMeta([4, 1, 3], "float32")
    assert registry.get("fastop::remainder").infer_meta([x, y], {}) == \
        [TensorMeta([4, None, 3], "float32")]


def test_rules_match_finite_differences():
    rng = np.random.default_rng(3)
    unit = rng.uniform(-0.9, 0.9, (3, 4))
    for name, x in (("sin", 3 * unit), ("cos", 3 * unit), ("tan", unit), ("asin", unit),
                    ("acos", unit), ("atan", 3 * unit), ("sinh", 2 * unit),
                    ("cosh", 2 * unit), ("rsqrt", np.abs(unit) + 0.2)):
        check_grad_rule(f"fastop::{name}", [x])
    # x / y kept 0.1 away from integers (the jumps of x % y); y broadcast
    x = np.array([[5.3, -4.1, 7.0], [3.2, -9.5, 1.1]])
    check_grad_rule("fastop::remainder", [x, np.array([2.0, -3.0, 2.5])])
    dx, dy = check_grad_rule("fastop::remainder", [x, np.array([[2.0], [-1.5]])],
                             douts=[np.ones((2, 3))])
    np.testing.assert_array_equal(dx, np.ones((2, 3)))
    np.testing.assert_allclose(dy[:, 0], [-(2 - 3 + 3), -(-3 + 6 - 1)])   # -sum floor(x/y)


@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc"])
def test_rounding_ops_have_a_zero_gradient(name):
    x = np.array([[-2.7, -1.2, 0.3], [0.8, 1.3, 2.75]])
    grads = check_grad_rule(f"fastop::{name}", [x], douts=[np.full((2, 3), 5.0)])
    np.testing.assert_array_equal(grads[0], np.zeros((2, 3)))
    t = fastop.to_tensor(x, stop_gradient=False)
    (registry.get(f"fastop::{name}")(t) * 3.0).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.zeros((2, 3)))


def test_eager_equals_static(run_static):
    x = data("float64")
    for name in sorted(UNARY) + ["round"]:
        op = registry.get(f"fastop::{name}")
        arg = np.abs(x) + 0.1 if name == "rsqrt" else x
        np.testing.assert_array_equal(run_static(op, arg)[0], call(name, arg))
    y = np.array([2.0, -3.0, 2.5, -0.75])
    np.testing.assert_array_equal(run_static(lambda a, b: a % b, 5 * x, y)[0],
                                  call("remainder", 5 * x, y))
    np.testing.assert_array_equal(run_static(lambda a: 7.0 % a, y)[0], np.remainder(7.0, y))


@pytest.mark.parametrize("call_,error,message", [
    (lambda: call("sin", np.array([1, 2])), TypeError, "fastop::sin: no kernel for dtype int64"),
    (lambda: call("round", np.array([1, 2], "int32")), TypeError,
     "fastop::round: no kernel for dtype int32"),
    (lambda: call("remainder", np.array([4, 5]), np.array([2, 0])), ValueError,
     "fastop::remainder: y holds 0: integer division by zero"),
    (lambda: call("remainder", np.ones(2), np.array([1, 2])), TypeError,
     "fastop::remainder: x and y must have the same dtype"),
    (lambda: call("remainder", np.ones((2, 3)), np.ones(2)), ValueError,
     r"fastop::remainder: shapes \[2, 3\] and \[2\] do not broadcast"),
])
def test_errors_name_the_op(call_, error, message):
    with pytest.raises(error, match=message):
        call_()

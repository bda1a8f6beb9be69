"""Activation kernels (fastop._core.activation) against their numpy twins
(tests/reference/activation.py) across dtypes and layouts, backward kernels against
finite differences of the forward ones, extreme values, in place, errors."""
import numpy as np
import pytest

from fastop._core import activation as K
from ..reference import activation as ref

FLOATS = [np.float32, np.float64]
TOL = {np.float32: dict(rtol=2e-6, atol=2e-6), np.float64: dict(rtol=1e-13, atol=1e-14)}
# name -> attribute sets to try
ATTRS = {"gelu": [{}, {"approximate": True}], "silu": [{}],
         "leaky_relu": [{}, {"negative_slope": 0.3}, {"negative_slope": -2.0}],
         "softplus": [{}, {"beta": 2.0, "threshold": 3.0}, {"beta": -1.0}]}
CASES = [(n, a) for n, sets in ATTRS.items() for a in sets]


def name(dtype):
    return np.dtype(dtype).name


def case_id(case):
    return case[0] + "".join(f"-{k}={v}" for k, v in case[1].items())


def data(shape, dtype, layout="contiguous", seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 4
    if layout == "transposed":
        x = np.ascontiguousarray(x.T).T
    elif layout == "strided":
        x = np.repeat(x, 2, axis=-1)[..., ::2]
    return x.astype(dtype)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 7), (40, 300)], ids=str)
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_forward_and_backward_match_numpy(dtype, case, shape, layout):
    op, attrs = case
    x = data(shape, dtype, layout if len(shape) > 1 else "contiguous")
    dy = data(shape, dtype, seed=1)
    got = np.asarray(getattr(K, op)(x, **attrs))
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, getattr(ref, op)(x, **attrs), **TOL[dtype])
    grad = np.asarray(getattr(K, op + "_grad")(x, dy, **attrs))
    np.testing.assert_allclose(grad, getattr(ref, op + "_grad")(x, dy, **attrs),
                               **TOL[dtype])


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_backward_is_the_derivative(case):
    op, attrs = case
    x = np.linspace(-6, 6, 97) + 0.013        # off the kinks of leaky_relu / softplus
    eps = 1e-6
    numeric = (np.asarray(getattr(K, op)(x + eps, **attrs))
               - np.asarray(getattr(K, op)(x - eps, **attrs))) / (2 * eps)
    analytic = np.asarray(getattr(K, op + "_grad")(x, np.ones_like(x), **attrs))
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_extreme_values(dtype):
    x = np.array([-1e4, -100.0, -30.0, 0.0, 30.0, 100.0, 1e4, np.inf, -np.inf], dtype)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(np.asarray(K.softplus(x)), ref.softplus(x), rtol=1e-6)
        # very negative z: log1p(exp(z)) ~ exp(z), not 0
        tiny = np.asarray(K.softplus(np.array([-30.0], dtype)))[0]
        assert tiny > 0 and abs(tiny - np.exp(-30.0)) < 1e-6 * np.exp(-30.0)
        for op, attrs in (("gelu", {}), ("gelu", {"approximate": True}), ("silu", {})):
            got = np.asarray(getattr(K, op)(x, **attrs))
            assert np.isfinite(got[:-2]).all() and got[-2] == np.inf
            # tiny negative values keep their relative accuracy (no 1 + tanh cancelling)
            np.testing.assert_allclose(got[:-2], getattr(ref, op)(x[:-2], **attrs),
                                       rtol=1e-5, atol=1e-37)


def test_in_place():
    x = data((50, 50), np.float64)
    want = ref.gelu_grad(x, x.copy())
    K.gelu_grad(x, x, out=x)
    np.testing.assert_allclose(x, want, **TOL[np.float64])


@pytest.mark.parametrize("call,error,message", [
    (lambda: K.gelu(np.ones(3, np.int64)), TypeError, "int64"),
    (lambda: K.gelu(np.ones(3), approximate="yes"), TypeError, "approximate"),
    (lambda: K.silu(np.ones(3), alpha=1.0), TypeError, "unknown attribute"),
    (lambda: K.softplus(np.ones(3), beta=0.0), ValueError, "beta"),
    (lambda: K.leaky_relu(np.ones(3), negative_slope="0.1"), TypeError, "negative_slope"),
    (lambda: K.silu_grad(np.ones(3), np.ones(4)), ValueError, "one shape"),
    (lambda: K.silu_grad(np.ones(3), np.ones(3, np.float32)), TypeError, "one dtype"),
])
def test_errors_name_the_op(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert "fastop::" in str(info.value) and message in str(info.value)


def test_float32_gelu_is_accurate_over_its_whole_range():
    # float32 gelu uses a fitted erfc in float64 (activation_impl.c), not libm's erff:
    # within a few float32 ulps everywhere, the negative tail included
    x = np.linspace(-13, 13, 100_001).astype(np.float32)
    want = ref.gelu(x.astype(np.float64))
    got = np.asarray(K.gelu(x)).astype(np.float64)
    normal = np.abs(want) > 1e-36
    np.testing.assert_allclose(got[normal], want[normal], rtol=4e-7, atol=0)
    dy = np.ones_like(x)
    want = ref.gelu_grad(x.astype(np.float64), dy.astype(np.float64))
    # (absolute near gelu's minimum, where the derivative's two terms cancel)
    np.testing.assert_allclose(np.asarray(K.gelu_grad(x, dy)), want, rtol=4e-7, atol=1e-8)

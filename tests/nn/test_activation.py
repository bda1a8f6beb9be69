"""GELU, SiLU, LeakyReLU, Softplus and their functional twins: forward against numpy in
float32 and float64, gradients (first and second order) by gradcheck, eager equal to
static, Paddle's defaults."""
import math

import numpy as np
import pytest

import fastop
import fastop.nn.functional as F
from fastop import nn
from fastop.autograd import gradcheck, gradgradcheck

_erf = np.vectorize(math.erf)


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


# (layer, functional call, numpy formula)
CASES = {
    "GELU": (nn.GELU(), F.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "GELU-tanh": (nn.GELU(approximate=True), lambda x: F.gelu(x, approximate=True),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                   * (x + 0.044715 * x ** 3)))),
    "SiLU": (nn.SiLU(), F.silu, lambda x: x * sigmoid(x)),
    "LeakyReLU": (nn.LeakyReLU(), F.leaky_relu, lambda x: np.where(x > 0, x, 0.01 * x)),
    "LeakyReLU-0.2": (nn.LeakyReLU(0.2), lambda x: F.leaky_relu(x, 0.2),
                      lambda x: np.where(x > 0, x, 0.2 * x)),
    "Softplus": (nn.Softplus(), F.softplus, lambda x: np.log1p(np.exp(x))),
    "Softplus-2-1": (nn.Softplus(2, 1), lambda x: F.softplus(x, 2, 1),
                     lambda x: np.where(2 * x > 1, x, np.log1p(np.exp(2 * x)) / 2)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_matches_numpy(case, dtype):
    layer, fn, formula = CASES[case]
    x = (np.random.default_rng(0).standard_normal((5, 7)) * 3).astype(dtype)
    want = formula(x.astype("float64"))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-14)
    for got in (layer(fastop.to_tensor(x)), fn(fastop.to_tensor(x))):
        assert got.dtype.name == dtype
        np.testing.assert_allclose(got.numpy(), want, **tol)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_first_and_second_order(case, run_static):
    layer, fn, _ = CASES[case]
    x = np.random.default_rng(1).uniform(0.2, 2.0, (3, 4)) * np.array([1, -1, 1, -1])
    xt = fastop.to_tensor(x, stop_gradient=False)
    assert gradcheck(fn, [xt], eps=1e-6, atol=1e-6, rtol=1e-4)
    assert gradgradcheck(fn, [xt], eps=1e-6, atol=1e-5, rtol=1e-3)
    np.testing.assert_array_equal(run_static(lambda v: layer(v), x)[0],
                                  layer(fastop.to_tensor(x)).numpy())


def test_paddle_defaults_and_bad_arguments():
    assert "negative_slope=0.01" in repr(nn.LeakyReLU())
    assert "beta=1.0, threshold=20.0" in repr(nn.Softplus())
    assert "approximate=False" in repr(nn.GELU())
    with pytest.raises(ValueError, match="Softplus: beta must not be 0"):
        nn.Softplus(beta=0)

"""The math section of fastop.tensor (min, prod, cumsum, clip, maximum, minimum, isnan,
isinf, isfinite, all, any, numel) and their Tensor methods: Paddle's signatures and
defaults, results against numpy, gradients by gradcheck, eager equal to static."""
import numpy as np
import pytest

import fastop
from fastop.autograd import gradcheck

X = np.random.default_rng(0).standard_normal((3, 4))


def t(a, grad=False):
    return fastop.to_tensor(np.asarray(a), stop_gradient=not grad)


def test_reductions_and_scans():
    x = t(X)
    np.testing.assert_array_equal(fastop.min(x).numpy(), X.min())
    np.testing.assert_array_equal(x.min(axis=[0, 1], keepdim=True).numpy(),
                                  X.min(keepdims=True))
    np.testing.assert_allclose(x.prod(axis=1).numpy(), X.prod(axis=1))
    assert fastop.prod(t(np.array([1, 2, 3], "int32")), dtype="int64").dtype.name == "int64"
    np.testing.assert_allclose(x.cumsum(axis=0).numpy(), X.cumsum(axis=0))
    np.testing.assert_allclose(fastop.cumsum(x).numpy(), X.cumsum())          # flattened
    assert fastop.cumsum(t(np.array([1, 2], "int32")), dtype="float64").dtype.name == "float64"


def test_clip_with_numbers_tensors_and_one_sided_bounds():
    x = t(X)
    np.testing.assert_array_equal(fastop.clip(x, -0.5, 0.5).numpy(), np.clip(X, -0.5, 0.5))
    np.testing.assert_array_equal(x.clip(max=0.1).numpy(), np.minimum(X, 0.1))
    np.testing.assert_array_equal(x.clip(min=0.1).numpy(), np.maximum(X, 0.1))
    np.testing.assert_array_equal(fastop.clip(x).numpy(), X)
    low = t(np.array([-0.1, 0.0, 0.1, 0.2]))
    np.testing.assert_array_equal(fastop.clip(x, min=low, max=0.5).numpy(),
                                  np.minimum(np.maximum(X, low.numpy()), 0.5))
    with pytest.raises(TypeError, match="clip: min must be a number, a tensor or None"):
        fastop.clip(x, min="0")


def test_tests_and_boolean_reductions():
    special = t(np.array([0.0, np.nan, np.inf, -1.0]))
    np.testing.assert_array_equal(fastop.isnan(special).numpy(), [0, 1, 0, 0])
    np.testing.assert_array_equal(special.isinf().numpy(), [0, 0, 1, 0])
    np.testing.assert_array_equal(special.isfinite().numpy(), [1, 0, 0, 1])
    assert fastop.any(special.isnan()).item() is True and special.all().item() is False
    np.testing.assert_array_equal(t(X > 0).all(axis=1).numpy(), (X > 0).all(axis=1))
    np.testing.assert_array_equal(fastop.maximum(t(X), t(0.0)).numpy(), np.maximum(X, 0))
    np.testing.assert_array_equal(t(X).minimum(t(X[0])).numpy(), np.minimum(X, X[0]))


def test_numel(run_static):
    assert fastop.numel(t(X)).item() == 12 and t(X).numel().dtype.name == "int64"
    assert run_static(fastop.numel, X)[0] == 12


def test_gradients():
    x = t(X, grad=True)
    for fn in (lambda v: fastop.min(v, axis=0), lambda v: fastop.prod(v, axis=1),
               lambda v: fastop.cumsum(v, axis=1), lambda v: fastop.clip(v, -0.3, 0.4),
               lambda v: fastop.maximum(v, v * 0.5)):
        assert gradcheck(fn, [x], eps=1e-6, atol=1e-6, rtol=1e-4)


def test_eager_equals_static(run_static):
    # (the functions: static Variables do not have these methods yet)
    for fn in (lambda v: fastop.min(v, axis=1), lambda v: fastop.prod(v),
               lambda v: fastop.cumsum(v), lambda v: fastop.clip(v, max=0.2),
               lambda v: fastop.all(fastop.isfinite(v), axis=0)):
        np.testing.assert_array_equal(run_static(fn, X)[0], fn(t(X)).numpy())

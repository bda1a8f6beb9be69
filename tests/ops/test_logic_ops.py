"""The numpy-kernel logic ops (fastop::logical_and/or/xor/not, isnan, isinf, isfinite,
all, any): results against numpy with broadcasting and mixed dtypes, bool outputs, meta,
no gradients, eager against static."""
import numpy as np
import pytest

import fastop
from fastop.ops import TensorMeta, registry

SPECIAL = np.array([[0.0, 1.5, np.nan], [np.inf, -np.inf, -2.0]])


def op(name):
    return registry.get(f"fastop::{name}")


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor"])
def test_binary_logic_broadcasts_and_counts_nonzero_as_true(name):
    x = np.array([[0, 1, 2], [3, 0, -1]], "int32")
    y = np.array([True, False, True])
    got = op(name)(fastop.to_tensor(x), fastop.to_tensor(y)).numpy()
    np.testing.assert_array_equal(got, getattr(np, name)(x, y))
    assert got.dtype == np.bool_
    assert op(name).infer_meta([TensorMeta([None, 3], "int32"), TensorMeta([3], "bool")],
                               {}) == [TensorMeta([None, 3], "bool")]
    with pytest.raises(ValueError, match=f"fastop::{name}: shapes"):
        op(name).infer_meta([TensorMeta([2], "bool"), TensorMeta([3], "bool")], {})


@pytest.mark.parametrize("name", ["logical_not", "isnan", "isinf", "isfinite"])
def test_unary_tests_match_numpy(name):
    np.testing.assert_array_equal(op(name)(fastop.to_tensor(SPECIAL)).numpy(),
                                  getattr(np, name)(SPECIAL))
    ints = np.array([0, 3], "int64")
    np.testing.assert_array_equal(op(name)(fastop.to_tensor(ints)).numpy(),
                                  getattr(np, name)(ints))


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, [0, 1]], ids=str)
@pytest.mark.parametrize("name", ["all", "any"])
def test_all_and_any_match_numpy(name, axis, keepdim):
    x = SPECIAL != 0
    ax = tuple(axis) if isinstance(axis, list) else axis
    got = op(name)(fastop.to_tensor(x), axis=axis, keepdim=keepdim).numpy()
    np.testing.assert_array_equal(got, getattr(np, name)(x, axis=ax, keepdims=keepdim))


def test_not_differentiable_and_eager_equals_static(run_static):
    for name in ("logical_and", "isnan", "all"):
        assert op(name).differentiable_inputs == () and op(name).grad_rule is None
    x = SPECIAL
    np.testing.assert_array_equal(run_static(lambda v: op("isfinite")(v), x)[0],
                                  np.isfinite(x))
    np.testing.assert_array_equal(run_static(lambda v: op("any")(op("isnan")(v), axis=1), x)[0],
                                  np.isnan(x).any(axis=1))

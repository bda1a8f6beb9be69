"""fastop's comparison and logic functions and their Tensor methods: results against
numpy, broadcasting, equal_all's shape rule, eager equal to static."""
import numpy as np
import pytest

import fastop

A = np.array([[1, 2, 3], [4, 5, 6]], "int64")
B = np.array([1, 0, 3], "int64")
NUMPY = {"equal": np.equal, "not_equal": np.not_equal, "greater_than": np.greater,
         "greater_equal": np.greater_equal, "less_than": np.less, "less_equal": np.less_equal,
         "logical_and": np.logical_and, "logical_or": np.logical_or,
         "logical_xor": np.logical_xor}


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_binary_functions_and_methods(name, run_static):
    x, y = fastop.to_tensor(A), fastop.to_tensor(B)
    want = NUMPY[name](A, B)
    for got in (getattr(fastop, name)(x, y), getattr(x, name)(y)):
        assert got.dtype.name == "bool"
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(run_static(getattr(fastop, name), A, B)[0], want)


def test_logical_not_and_scalars():
    x = fastop.to_tensor(A)
    np.testing.assert_array_equal(fastop.logical_not(x > 3).numpy(), ~(A > 3))
    np.testing.assert_array_equal(x.logical_not().numpy(), A == 0)
    np.testing.assert_array_equal(fastop.less_equal(x, 3).numpy(), A <= 3)


def test_equal_all(run_static):
    x = fastop.to_tensor(A)
    assert fastop.equal_all(x, fastop.to_tensor(A.copy())).item() is True
    assert x.equal_all(x * 2).item() is False
    out = fastop.equal_all(x, fastop.to_tensor(B))        # shapes differ: False, no error
    assert out.shape == [] and out.item() is False
    assert bool(run_static(fastop.equal_all, A, A)[0]) is True
    assert bool(run_static(fastop.equal_all, A, B)[0]) is False

"""fastop.ops.checking: assert_close, the shared finite-difference Jacobian, and
check_grad_rule catching a wrong rule (not only passing a right one)."""
import numpy as np
import pytest

from fastop.ops import Registry
from fastop.ops.checking import (assert_close, check_grad_rule, default_tolerance,
                                 numerical_jacobian, run_grad_rule)


def test_default_tolerances_follow_the_less_precise_dtype():
    assert default_tolerance("float64") == (1e-7, 1e-7)
    assert default_tolerance("float64", "float32") == (1.3e-6, 1e-5)
    assert default_tolerance("int64", "bool") == (0.0, 0.0)


def test_assert_close_passes_within_tolerance_and_treats_nan_and_inf_as_numpy_does():
    assert_close(np.float32([1, 2]) + 1e-6, np.float32([1, 2]))
    assert_close([np.nan, np.inf, -1.0], [np.nan, np.inf, -1.0])
    assert_close(np.array(3), 3)
    with pytest.raises(AssertionError, match="not close: 1 of 1"):
        assert_close([np.nan], [np.nan], equal_nan=False)


def test_assert_close_names_the_largest_error_and_where():
    expected = np.zeros((2, 3))
    actual = expected.copy()
    actual[1, 2], actual[0, 0] = 0.5, 1e-3
    with pytest.raises(AssertionError, match=r"^grad x: not close: 2 of 6 element\(s\) "
                                             r"differ; largest error 0\.5 at index \(1, 2\): "
                                             r"0\.5 vs expected 0\.0 \(rtol=1e-07, "
                                             r"atol=1e-07\)$"):
        assert_close(actual, expected, msg="grad x")
    with pytest.raises(AssertionError, match=r"shape \[3\] differs from the expected \[2, 3\]"):
        assert_close(np.zeros(3), expected)
    with pytest.raises(AssertionError, match="not close"):
        assert_close(np.int64([1, 2]), np.int64([1, 3]))       # integers: exactly
    assert_close(actual, expected, atol=0.6)


def test_numerical_jacobian_of_a_known_function():
    x = np.array([1.0, 2.0, 3.0])
    w = np.array([[1.0, 2.0], [0.0, 1.0], [3.0, -1.0]])
    jx, jw = numerical_jacobian(lambda: [x ** 2 @ w], [x, w], 1e-6)[0]
    np.testing.assert_allclose(jx, 2 * x[:, None] * w, rtol=1e-7)
    np.testing.assert_allclose(jw, np.kron((x ** 2)[:, None], np.eye(2)), atol=1e-7)
    assert x.tolist() == [1.0, 2.0, 3.0]                 # restored after perturbing
    with pytest.raises(ValueError, match="contiguous"):
        numerical_jacobian(lambda: [w], [w.T], 1e-6)


@pytest.fixture
def cube():
    """y = x**3 with a backward kernel whose factor the test chooses."""
    def make(factor):
        reg = Registry()
        op = reg.define("t::cube", inputs=["x"], outputs=["y"], meta=lambda x: x)
        op.kernel()(lambda x: x ** 3)
        op.grad_kernel(needs=["x", "dy"])(lambda x, dy: factor * x ** 2 * dy)
        return op
    return make


def test_check_grad_rule_passes_a_right_rule_and_leaves_inputs_alone(cube):
    x = np.linspace(-1, 1, 5)
    grads = check_grad_rule(cube(3.0), [x], douts=[np.ones(5)])
    np.testing.assert_allclose(grads[0], 3 * x ** 2)
    assert x.tolist() == np.linspace(-1, 1, 5).tolist()


def test_check_grad_rule_catches_a_wrong_rule(cube):
    with pytest.raises(AssertionError, match=r"t::cube: gradient of input 'x' against finite "
                                             r"differences: not close.*largest error"):
        check_grad_rule(cube(2.9), [np.linspace(-1, 1, 5)])


def test_run_grad_rule_checks_the_count():
    reg = Registry()
    op = reg.define("t::add", inputs=["x", "y"], outputs=["z"], meta=lambda x, y: x)
    op.kernel()(lambda x, y: x + y)
    op.grad(needs=())(lambda dz: dz)            # one gradient for two inputs
    x = np.ones(2)
    with pytest.raises(AssertionError, match=r"t::add: the gradient rule returned 1 "
                                             r"gradient\(s\), expected 2"):
        run_grad_rule(op, [x, x], [x + x], [x], {})

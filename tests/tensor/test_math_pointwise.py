"""PaddlePaddle's trigonometric, rounding, sign, rsqrt and remainder tensor functions
(fastop.tensor.math): functions and Tensor methods with PaddlePaddle's names, signatures
and aliases (mod, floor_mod, %), 0-D tensors, gradients, static Variables."""
import inspect

import numpy as np
import pytest

import fastop

X = np.array([[-2.5, -0.4, 0.3], [0.5, 1.5, 2.7]], np.float32)
FUNCS = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "atan": np.arctan, "sinh": np.sinh,
         "cosh": np.cosh, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
         "sign": np.sign}


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_function_and_method_match_numpy(name):
    x = fastop.to_tensor(X)
    want = FUNCS[name](X)
    np.testing.assert_allclose(getattr(fastop, name)(x).numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(getattr(x, name)().numpy(), want, rtol=1e-6)


def test_unit_domain_functions_rsqrt_and_round():
    u = fastop.to_tensor([-0.5, 0.0, 0.9])
    np.testing.assert_allclose(fastop.asin(u).numpy(), np.arcsin([-0.5, 0.0, 0.9]), rtol=1e-6)
    np.testing.assert_allclose(u.acos().numpy(), np.arccos([-0.5, 0.0, 0.9]), rtol=1e-6)
    np.testing.assert_allclose(fastop.rsqrt(fastop.to_tensor([0.25, 4.0])).numpy(), [2, 0.5])
    # PaddlePaddle's docstring example: halves away from zero
    r = fastop.round(fastop.to_tensor([-0.5, -0.2, 0.6, 1.5]))
    np.testing.assert_array_equal(r.numpy(), [-1.0, -0.0, 1.0, 2.0])
    assert fastop.to_tensor([2.5]).round().item() == 3.0


def test_paddles_signatures():
    for name in ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "floor", "ceil",
                 "round", "sign", "rsqrt"):
        params = inspect.signature(getattr(fastop, name)).parameters
        assert list(params) == ["x", "name"] and params["name"].default is None, name
    assert list(inspect.signature(fastop.trunc).parameters) == ["input", "name"]
    assert list(inspect.signature(fastop.remainder).parameters) == ["x", "y", "name"]
    assert fastop.mod is fastop.remainder and fastop.floor_mod is fastop.remainder
    assert fastop.trunc(input=fastop.to_tensor([-1.5])).item() == -1.0


def test_remainder_mod_floor_mod_and_percent_agree():
    x, y = fastop.to_tensor([-7, 7, -7, 7]), fastop.to_tensor([3, 3, -3, -3])
    want = [2, 1, -1, -2]
    for got in (fastop.remainder(x, y), fastop.mod(x, y), fastop.floor_mod(x, y),
                x.remainder(y), x.mod(y), x.floor_mod(y), x % y):
        assert got.tolist() == want and got.dtype == fastop.int64
    assert (fastop.to_tensor([5.5]) % 2).tolist() == [1.5]
    assert (7 % fastop.to_tensor([-3])).tolist() == [-2]


def test_zero_d_tensors_stay_zero_d():
    s = fastop.to_tensor(-1.5)
    for out in (fastop.sin(s), s.floor(), s.round(), fastop.sign(s), s % 1.0, 3.0 % s,
                fastop.trunc(s)):
        assert out.shape == []
    assert s.round().item() == -2.0 and (s % 1.0).item() == 0.5


def test_gradients_through_the_functions():
    x = fastop.to_tensor(X.astype("float64"), stop_gradient=False)
    (fastop.sin(x) + fastop.floor(x) * 3.0 + x.round() + x.sign()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X.astype("float64")), rtol=1e-12)
    a = fastop.to_tensor([5.3, -4.1], stop_gradient=False)
    b = fastop.to_tensor([2.0, 3.0], stop_gradient=False)
    (a % b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(b.grad.numpy(), [-2.0, 2.0])      # -floor(a / b)


def test_static_variables_have_the_methods_and_the_operator(run_static):
    got = run_static(lambda v: [v.sin(), fastop.floor(v), v.round(), v % 2.0, 7.0 % v,
                                v.mod(v * 0.5 + 1.0)], X)
    np.testing.assert_allclose(got[0], np.sin(X), rtol=1e-6)
    np.testing.assert_array_equal(got[1], np.floor(X))
    np.testing.assert_array_equal(got[2], [[-3, -0.0, 0], [1, 2, 3]])
    np.testing.assert_allclose(got[3], np.remainder(X, 2.0), rtol=1e-6)
    np.testing.assert_allclose(got[4], np.remainder(7.0, X), rtol=1e-6)
    np.testing.assert_allclose(got[5], np.remainder(X, X * 0.5 + 1.0), rtol=1e-6)


def test_integer_input_to_a_float_only_op_names_the_op():
    with pytest.raises(TypeError, match="fastop::floor: no kernel for dtype int64"):
        fastop.floor(fastop.to_tensor([1, 2]))

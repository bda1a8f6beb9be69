"""The in-place forms of the trigonometric, rounding, rsqrt, remainder, scatter and
masked_fill functions (fastop.tensor.inplace): x itself returned holding the
out-of-place value, as functions and Tensor methods; PaddlePaddle's leaf ValueError;
gradients through a non-leaf (twice in a row); static mode out of place."""
import numpy as np
import pytest

import fastop

X = np.array([[0.3, -0.6, 0.9], [-0.2, 0.5, 0.75]], np.float32)
MASK = np.array([[True, False, False], [False, True, True]])


def cases():
    """(in-place name, out-of-place function, extra arguments)."""
    index, updates = fastop.to_tensor([1, 0]), fastop.to_tensor(np.ones((2, 3), np.float32))
    unary = [(f"{n}_", getattr(fastop, n), ()) for n in (
        "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "floor", "ceil", "round",
        "trunc")]
    return [pytest.param(*case, id=case[0]) for case in unary + [
        ("rsqrt_", lambda x: fastop.rsqrt(fastop.abs(x)), ()),
        ("remainder_", fastop.remainder, (0.4,)),
        ("mod_", fastop.mod, (fastop.to_tensor([0.4, -0.7, 0.25]),)),
        ("floor_mod_", fastop.floor_mod, (0.35,)),
        ("scatter_", fastop.scatter, (index, updates)),
        ("masked_fill_", fastop.masked_fill, (fastop.to_tensor(MASK), 2.5)),
    ]]


@pytest.mark.parametrize("name, function, args", cases())
def test_function_and_method_write_x_and_return_it(name, function, args):
    source = np.abs(X) if name == "rsqrt_" else X
    want = function(fastop.to_tensor(source), *args).numpy()
    x = fastop.to_tensor(source.copy())
    view = x.numpy()                                       # shares x's memory
    assert getattr(fastop, name)(x, *args) is x
    np.testing.assert_array_equal(x.numpy(), want)
    np.testing.assert_array_equal(view, want)
    y = fastop.to_tensor(source.copy())
    assert getattr(y, name)(*args) is y
    np.testing.assert_array_equal(y.numpy(), want)
    assert y.inplace_version == 1


@pytest.mark.parametrize("name, function, args", cases())
def test_a_leaf_that_takes_gradients_is_refused(name, function, args):
    w = fastop.to_tensor(X.copy(), stop_gradient=False)
    who = getattr(fastop, name).__name__                   # mod_ and floor_mod_: remainder_
    with pytest.raises(ValueError, match=rf"{who}: \(InvalidArgument\) Leaf Var \(\) that "
                                         r"doesn't stop gradient can't use inplace strategy"):
        getattr(w, name)(*args)
    np.testing.assert_array_equal(w.numpy(), X)


def test_sin_twice_in_place_differentiates_like_out_of_place():
    # PaddlePaddle's test_continuous_inplace_backward: each sin_ keeps its input's value
    def grad(twice):
        a = fastop.to_tensor(X.astype("float64"), stop_gradient=False)
        b = a ** 2
        twice(b).sum().backward()
        return a.grad.numpy()
    np.testing.assert_allclose(grad(lambda b: b.sin_().sin_()),
                               grad(lambda b: fastop.sin(fastop.sin(b))), rtol=1e-12)
    x = X.astype("float64")
    np.testing.assert_allclose(grad(lambda b: b.sin_().sin_()),
                               np.cos(np.sin(x ** 2)) * np.cos(x ** 2) * 2 * x, rtol=1e-12)


def test_scatter_and_masked_fill_in_place_pass_gradients_to_updates_and_old_values():
    a = fastop.to_tensor(X.astype("float64"), stop_gradient=False)
    updates = fastop.to_tensor(np.full((1, 3), 2.0), stop_gradient=False)
    y = a * 3.0
    y.scatter_(fastop.to_tensor([0]), updates).masked_fill_(fastop.to_tensor(MASK), 0.0)
    y.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [[0, 0, 0], [3, 0, 0]])
    np.testing.assert_array_equal(updates.grad.numpy(), [[0, 1, 1]])


def test_a_value_saved_for_backward_then_overwritten_is_refused():
    a = fastop.to_tensor(X, stop_gradient=False)
    b = a * 2.0
    c = fastop.sin(b)                                      # saves b
    b.floor_()
    with pytest.raises(RuntimeError, match="tensor_version"):
        c.sum().backward()


def test_in_place_results_keep_xs_shape():
    with pytest.raises(ValueError, match=r"masked_fill_: the result has shape \[2, 2, 3\]"):
        fastop.to_tensor(X.copy()).masked_fill_(fastop.to_tensor(np.stack([MASK, MASK])), 0.0)


def test_static_mode_gives_the_out_of_place_op(run_static):
    got = run_static(lambda v: [fastop.sin_(v), fastop.remainder_(v, 0.4)], X)
    np.testing.assert_allclose(got[0], np.sin(X), rtol=1e-6)
    np.testing.assert_allclose(got[1], np.remainder(X, np.float32(0.4)), rtol=1e-6)

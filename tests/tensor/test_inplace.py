"""PaddlePaddle's in-place tensor methods (fastop.tensor.inplace): x itself returned,
its memory holding the result; gradients through a non-leaf; leaves that take
gradients refused; saved values overwritten detected."""
import numpy as np
import pytest

import fastop

X = np.array([[0.5, 1.0, 2.0], [3.0, 0.25, 4.0]], np.float32)


def plain():
    return fastop.to_tensor(X.copy())


@pytest.mark.parametrize("method, args, expected", [
    ("add_", (1.5,), X + 1.5),
    ("subtract_", (np.float32(2.0),), X - 2.0),
    ("multiply_", (fastop.to_tensor([2.0, 3.0, 4.0]),), X * [2.0, 3.0, 4.0]),
    ("divide_", (2.0,), X / 2.0),
    ("pow_", (2.0,), X ** 2),
    ("scale_", (3.0, 1.0), X * 3.0 + 1.0),
    ("clip_", (0.6, 2.5), np.clip(X, 0.6, 2.5)),
    ("exp_", (), np.exp(X)),
    ("log_", (), np.log(X)),
    ("sqrt_", (), np.sqrt(X)),
    ("tanh_", (), np.tanh(X)),
    ("abs_", (), np.abs(X)),
    ("reciprocal_", (), 1.0 / X),
    ("zero_", (), np.zeros_like(X)),
    ("fill_", (7.0,), np.full_like(X, 7.0)),
])
def test_each_method_writes_x_and_returns_it(method, args, expected):
    x = plain()
    view = x.numpy()                          # shares x's memory
    out = getattr(x, method)(*args)
    assert out is x
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(view, expected, rtol=1e-6)
    # the functions exist too (fastop.add_(x, y), as paddle.add_)
    y = plain()
    assert getattr(fastop, method)(y, *args) is y
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)


def test_scale_keeps_paddles_argument_order_and_integer_dtype():
    x = fastop.to_tensor([1, 2, 3])
    assert x.scale_(2, bias=1) is x and x.dtype == fastop.int64
    np.testing.assert_array_equal(x.numpy(), [3, 5, 7])
    y = fastop.scale(fastop.to_tensor([1.0, 2.0]), 2.0, 1.0, bias_after_scale=False)
    np.testing.assert_allclose(y.numpy(), [4.0, 6.0])
    with pytest.raises(ValueError, match="scale: act must be None or one of"):
        fastop.scale(fastop.to_tensor([1.0]), act="gelu")


def test_random_fills_draw_within_the_bounds_and_follow_the_seed():
    x = fastop.zeros([400], dtype="float64")
    assert x.uniform_(min=2.0, max=3.0) is x and x.dtype == fastop.float64
    values = x.numpy()
    assert 2.0 <= values.min() and values.max() < 3.0 and values.std() > 0.1
    fastop.seed(3)
    a = fastop.zeros([1000]).normal_(mean=5.0, std=0.5).numpy().copy()
    assert abs(a.mean() - 5.0) < 0.1 and abs(a.std() - 0.5) < 0.05
    fastop.seed(3)
    np.testing.assert_array_equal(fastop.zeros([1000]).normal_(mean=5.0, std=0.5).numpy(), a)
    np.testing.assert_array_equal(fastop.zeros([5]).uniform_(seed=7).numpy(),
                                  fastop.zeros([5]).uniform_(seed=7).numpy())
    with pytest.raises(ValueError, match="uniform_: min must be <= max"):
        fastop.zeros([2]).uniform_(min=1.0, max=0.0)


def test_a_leaf_that_takes_gradients_is_refused_as_in_paddle():
    w = fastop.to_tensor(X.copy(), stop_gradient=False)
    for method, args in (("add_", (1.0,)), ("scale_", (2.0,)), ("zero_", ()),
                         ("uniform_", ()), ("exp_", ())):
        with pytest.raises(ValueError, match=r"Leaf Var \(\) that doesn't stop gradient "
                                             r"can't use inplace strategy"):
            getattr(w, method)(*args)
    np.testing.assert_array_equal(w.numpy(), X)               # untouched
    with fastop.no_grad():                                    # initialisation: allowed
        assert w.uniform_(-0.1, 0.1) is w
    assert np.abs(w.numpy()).max() <= 0.1 and not w.stop_gradient and w.is_leaf


def test_gradients_flow_through_an_in_place_op_on_a_non_leaf():
    w = fastop.to_tensor(X.copy(), stop_gradient=False)
    y = w * 2.0
    assert y.exp_() is y and not y.is_leaf
    y.multiply_(3.0)
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 3.0 * 2.0 * np.exp(2.0 * X), rtol=1e-5)


def test_zero_and_fill_on_a_non_leaf_give_the_old_value_no_gradient():
    w = fastop.to_tensor(X.copy(), stop_gradient=False)
    y = w * 2.0
    y.fill_(4.0)
    assert not y.stop_gradient
    (y * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.full_like(X, 4.0))    # only y * w's w


def test_an_in_place_op_makes_a_plain_tensor_depend_on_its_operand():
    w = fastop.to_tensor([1.0, 2.0], stop_gradient=False)
    x = fastop.to_tensor([10.0, 20.0])
    x.add_(w * w)
    assert not x.stop_gradient and not x.is_leaf
    x.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])
    # multiply's gradient for w needs x's old value, which the write replaced: refused
    x = fastop.to_tensor([10.0, 20.0])
    x.multiply_(w)
    with pytest.raises(RuntimeError, match="modified in place"):
        x.sum().backward()


def test_overwriting_a_value_autograd_saved_is_refused_at_backward():
    w = fastop.to_tensor([1.0, 2.0], stop_gradient=False)
    y = w * 1.0
    z = y * y                    # saves y
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified"):
        z.sum().backward()


def test_an_in_place_op_keeps_shape_and_dtype():
    x = fastop.to_tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"add_: the result has shape \[2, 2\], but an "
                                         r"in-place op keeps x's shape \[2\]"):
        x.add_(fastop.ones([2, 2]))
    i = fastop.to_tensor([1, 2])
    with pytest.raises(TypeError, match="add_: the result is float32, but an in-place op "
                                        "keeps x's dtype int64"):
        i.add_(0.5)
    np.testing.assert_array_equal(i.numpy(), [1, 2])
    with pytest.raises(TypeError, match="fill_: value must be a number, got str"):
        x.fill_("1")


def test_inplace_version_counts_every_in_place_change_of_the_memory():
    x = fastop.to_tensor(X.copy())
    assert x.inplace_version == 0
    x.add_(1.0)
    x[0] = 2.0
    x.set_value(X)
    view = x[1]
    view.zero_()
    assert x.inplace_version == view.inplace_version == 4
    x.squeeze_()
    assert x.inplace_version == 5


def test_random_fills_are_eager_only():
    from fastop import static
    fastop.enable_static()
    try:
        with static.program_guard(static.Program(), static.Program()):
            v = static.data("v", [2], "float32")
            with pytest.raises(TypeError, match="uniform_: x must be an eager Tensor"):
                fastop.uniform_(v)
            assert not hasattr(v, "normal_")
    finally:
        fastop.disable_static()


def test_assign_copies_or_writes_into_output():
    w = fastop.to_tensor([1.0, 2.0], stop_gradient=False)
    c = fastop.assign(w)
    assert c is not w and not c.stop_gradient
    (c * 3.0).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(fastop.assign(np.array([1, 2])).numpy(), [1, 2])
    out = fastop.to_tensor(np.ones((3, 2), np.float32))
    assert fastop.assign(fastop.to_tensor([5.0, 6.0]), out) is out
    np.testing.assert_array_equal(out.numpy(), [[5.0, 6.0]] * 3)
    assert out.inplace_version == 1
    assert fastop.assign([7, 8], out) is out and out.dtype == fastop.float32
    np.testing.assert_array_equal(out.numpy(), [[7.0, 8.0]] * 3)

"""The manipulation section of fastop.tensor (stack, split, chunk, squeeze, unsqueeze,
gather, take_along_axis, cast, flatten, clone) and the Tensor methods (with detach, T,
item, tolist): Paddle's signatures and results, gradients, eager equal to static,
errors; creation's empty and empty_like."""
import numpy as np
import pytest

import fastop
from fastop.autograd import gradcheck

X = np.arange(24.0).reshape(2, 3, 4)


def t(a, grad=False):
    return fastop.to_tensor(np.asarray(a), stop_gradient=not grad)


def test_stack():
    for axis in (0, 1, -1):
        got = fastop.stack([t(X), t(X + 1)], axis=axis)
        np.testing.assert_array_equal(got.numpy(), np.stack([X, X + 1], axis=axis))
    with pytest.raises(ValueError, match=r"stack: all tensors need one shape"):
        fastop.stack([t(X), t(X[0])])
    with pytest.raises(ValueError, match="stack: x must be a non-empty list"):
        fastop.stack([])


def test_split_and_chunk():
    parts = fastop.split(t(X), 2, axis=2)
    assert [p.shape for p in parts] == [[2, 3, 2], [2, 3, 2]]
    np.testing.assert_array_equal(parts[1].numpy(), X[:, :, 2:])
    parts = t(X).split([1, -1], axis=1)
    assert [p.shape for p in parts] == [[2, 1, 4], [2, 2, 4]]
    assert [c.shape for c in t(X).chunk(3, axis=-2)] == [[2, 1, 4]] * 3
    with pytest.raises(ValueError, match="split: cannot split a dim of size 3 into 2 equal"):
        fastop.split(t(X), 2, axis=1)
    with pytest.raises(ValueError, match=r"split: sections \[1, 1\] do not add up to the"):
        fastop.split(t(X), [1, 1], axis=1)
    with pytest.raises(ValueError, match="split: axis 3 is out of range"):
        fastop.split(t(X), 2, axis=3)


def test_squeeze_unsqueeze_gather_take_along_axis_flatten():
    x = t(X)
    assert fastop.unsqueeze(x, [0, 4]).shape == [1, 2, 3, 4, 1]
    assert x.unsqueeze(1).squeeze(1).shape == [2, 3, 4] and x.unsqueeze(t(0)).shape[0] == 1
    assert fastop.squeeze(t(np.ones((1, 3, 1)))).shape == [3]
    np.testing.assert_array_equal(fastop.gather(x, t([1, 0])).numpy(), X[[1, 0]])
    np.testing.assert_array_equal(x.gather(t([2]), axis=1).numpy(), X[:, [2]])
    idx = np.array([[[0, 3]], [[1, 1]]])
    np.testing.assert_array_equal(fastop.take_along_axis(x, t(idx), axis=2).numpy(),
                                  np.take_along_axis(X, idx, axis=2))
    assert fastop.flatten(x).shape == [24] and x.flatten(1).shape == [2, 12]
    assert x.flatten(0, 1).shape == [6, 4] and fastop.flatten(t(3.0)).shape == [1]
    with pytest.raises(ValueError, match="flatten: start_axis"):
        x.flatten(2, 1)


def test_cast_clone_detach_and_values():
    x = t(X, grad=True)
    assert fastop.cast(x, "int32").dtype.name == "int32"
    y = x.clone()
    assert y is not x and not y.stop_gradient
    (y * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(X.shape, 2.0))
    assert x.detach().stop_gradient and x.T.shape == [4, 3, 2]
    assert t(X)[1, 2, 3].item() == 23.0 and t(X[0, 0]).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_gradients_through_joins_and_splits():
    a, b = t(X[0], grad=True), t(X[1], grad=True)
    assert gradcheck(lambda a, b: fastop.stack([a, b * 2], axis=1), [a, b], eps=1e-6)
    assert gradcheck(lambda a: fastop.split(a, [1, 2], axis=0)[1] * 3, [a], eps=1e-6)


def test_empty():
    e = fastop.empty([2, 3], dtype="int32")
    assert e.shape == [2, 3] and e.dtype.name == "int32"
    assert fastop.empty_like(t(X)).shape == [2, 3, 4] and fastop.empty([1]).dtype.name == \
        "float32"


def test_eager_equals_static(run_static):
    # (the functions: static Variables do not have these methods yet)
    for fn in (lambda v: fastop.stack([v, v], axis=1), lambda v: fastop.split(v, [1, 2], 1),
               lambda v: fastop.squeeze(fastop.unsqueeze(v, 0), 0),
               lambda v: fastop.gather(v, t([1]), 1),
               lambda v: fastop.flatten(v, 1), lambda v: fastop.clone(v),
               lambda v: fastop.cast(v, "int64")):
        eager = fn(t(X))
        eager = eager if isinstance(eager, list) else [eager]
        for e, s in zip(eager, run_static(fn, X)):
            np.testing.assert_array_equal(s, e.numpy())


@pytest.mark.parametrize("index", [lambda x: x[5], lambda x: x[-4], lambda x: x[1, 7],
                                   lambda x: x[fastop.to_tensor([0, 3])],
                                   lambda x: fastop.gather(x, fastop.to_tensor([0, 3])),
                                   lambda x: fastop.gather(x, fastop.to_tensor([-4]))])
def test_an_index_out_of_range_is_an_index_error_as_in_numpy(index):
    """numpy, Python sequences and Paddle raise IndexError; fastop's is also the
    ValueError it raised before."""
    x = fastop.to_tensor(np.zeros((3, 2), "float32"))
    with pytest.raises(IndexError, match=r"fastop::(slice|gather): .*out of range|"
                                         r"fastop::gather: each index must be in \[-n, n\)"
                       ) as info:
        index(x)
    assert isinstance(info.value, ValueError)


def test_an_index_out_of_range_in_static_mode_is_an_index_error():
    fastop.enable_static()
    try:
        with fastop.static.program_guard(fastop.static.Program(), fastop.static.Program()):
            v = fastop.static.data("v", [3, 2], "float32")
            with pytest.raises(IndexError, match=r"fastop::slice: an index"):
                v[5]
    finally:
        fastop.disable_static()


# -- in-place squeeze_/unsqueeze_ (PaddlePaddle's) -------------------------------------

def test_squeeze_and_unsqueeze_in_place_change_x_itself():
    x = fastop.to_tensor(np.arange(6, dtype="float32").reshape(2, 1, 3))
    before = x.data_ptr
    assert fastop.squeeze_(x, 1) is x
    assert x.shape == [2, 3] and x.data_ptr == before
    np.testing.assert_array_equal(x.numpy(), np.arange(6).reshape(2, 3))
    assert x.unsqueeze_([0, 3]) is x and x.shape == [1, 2, 3, 1]
    np.testing.assert_array_equal(x.numpy().ravel(), np.arange(6))
    assert x.squeeze_() is x and x.shape == [2, 3]
    t = fastop.to_tensor(np.arange(6, dtype="float32").reshape(3, 2)).T   # strided
    t.unsqueeze_(1)
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(3, 2).T[:, None])


def test_in_place_squeeze_errors():
    x = fastop.ones([2, 1])
    with pytest.raises(ValueError, match="squeeze"):
        fastop.squeeze_(x, 5)
    assert x.shape == [2, 1]                        # unchanged by the refused call
    w = fastop.ones([2, 1])
    w.stop_gradient = False
    with pytest.raises(ValueError, match=r"squeeze_: .*Leaf Var \(\) that doesn't stop "
                                         r"gradient can't use inplace strategy"):
        fastop.squeeze_(w)


def test_in_place_shape_methods_on_a_non_leaf_keep_the_gradient_flowing():
    w = fastop.to_tensor(np.arange(6, dtype="float32").reshape(2, 1, 3), stop_gradient=False)
    y = w * 2.0
    version = y.inplace_version
    assert y.squeeze_(1) is y and y.shape == [2, 3]
    assert y.reshape_([3, 2]) is y and y.flatten_() is y and y.shape == [6]
    assert y.unsqueeze_(0) is y and y.shape == [1, 6]
    assert y.inplace_version == version + 4
    (y * fastop.to_tensor(np.arange(6, dtype="float32"))).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2.0 * np.arange(6).reshape(2, 1, 3))


def test_a_value_saved_for_backward_then_squeezed_in_place_is_refused():
    w = fastop.ones([2, 3])
    w.stop_gradient = False
    a = fastop.ones([2, 1])
    loss = (w * a).sum()
    a.squeeze_()
    with pytest.raises(RuntimeError, match="modified in place after the forward pass"):
        loss.backward()


def test_in_place_squeeze_in_static_mode_is_the_out_of_place_op():
    """PaddlePaddle: in a static program squeeze_/unsqueeze_ are squeeze/unsqueeze."""
    from fastop import static
    main = static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, static.Program()):
            x = static.data("x", [2, 1], "float32")
            y, z = x.squeeze_(), fastop.unsqueeze_(x, 0)
        assert (x.shape, y.shape, z.shape) == ([2, 1], [2], [1, 2, 1])
        got = static.Executor().run(main, feed={"x": np.ones((2, 1), "float32")},
                                    fetch_list=[y, z])
    finally:
        fastop.disable_static()
    assert [g.shape for g in got] == [(2,), (1, 2, 1)]


def test_broadcast_to_expand_and_expand_as_are_differentiable_views():
    x = fastop.to_tensor(2.0, stop_gradient=False)          # 0-D
    out = fastop.broadcast_to(x, [3, 3])
    assert out.shape == [3, 3]
    out.backward()
    assert x.grad.shape == [] and x.grad.item() == 9.0
    row = fastop.to_tensor([[1.0, 2.0]], stop_gradient=False)
    e = row.expand([3, 2])
    np.testing.assert_array_equal(e.numpy(), [[1.0, 2.0]] * 3)
    (e * fastop.ones([3, 2])).sum().backward()
    np.testing.assert_array_equal(row.grad.numpy(), [[3.0, 3.0]])
    assert fastop.expand_as(row, fastop.zeros([4, 2])).shape == [4, 2]
    assert fastop.expand(row, [-1, 2]).shape == [1, 2]      # -1 keeps the dim
    with pytest.raises(ValueError, match="broadcast"):
        fastop.broadcast_to(row, [3, 3])


def test_squeeze_of_a_0d_tensor_takes_axis_0_or_minus_1():
    """PaddlePaddle's 0-D rule: the tensor stays 0-D; its gradient too."""
    x = fastop.to_tensor(3.0, stop_gradient=False)
    for axis in (None, 0, -1, [0]):
        out = fastop.squeeze(x, axis=axis)
        assert out.shape == []
        out.backward()
    assert x.grad.shape == [] and x.grad.item() == 4.0
    with pytest.raises(ValueError, match="0 or -1 for a 0-D x"):
        fastop.squeeze(x, axis=1)

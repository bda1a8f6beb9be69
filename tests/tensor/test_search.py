"""fastop.argmax/argmin/topk/where/nonzero and their Tensor methods: Paddle's signatures
and results, dtype arguments, eager equal to static, gradients, errors."""
import numpy as np
import pytest

import fastop

X = np.array([[1.0, 5.0, 2.0, 5.0], [7.0, 0.0, 3.0, -1.0], [2.0, 2.0, 9.0, 0.5]])


def t(a, grad=False):
    return fastop.to_tensor(np.asarray(a), stop_gradient=not grad)


def test_argmax_argmin_with_axis_keepdim_dtype():
    x = t(X)
    assert fastop.argmax(x).item() == np.argmax(X) and x.argmin().item() == np.argmin(X)
    np.testing.assert_array_equal(x.argmax(axis=1).numpy(), [1, 0, 2])   # first of ties
    np.testing.assert_array_equal(fastop.argmin(x, axis=0, keepdim=True).numpy(), [[0, 1, 0, 1]])
    assert x.argmax(axis=-1, dtype="int32").dtype.name == "int32"
    assert fastop.argmin(x, dtype=fastop.int64).dtype.name == "int64"
    with pytest.raises(ValueError, match="argmax: dtype must be int32 or int64"):
        x.argmax(dtype="float32")


def test_topk():
    values, indices = t(X).topk(2)
    np.testing.assert_array_equal(values.numpy(), [[5, 5], [7, 3], [9, 2]])
    np.testing.assert_array_equal(indices.numpy(), [[1, 3], [0, 2], [2, 0]])
    values, indices = fastop.topk(t(X), k=t(1), axis=0, largest=False)
    np.testing.assert_array_equal(values.numpy(), [[1, 0, 2, -1]])
    x = t(X, grad=True)
    fastop.topk(x, 2)[0].sum().backward()
    want = np.zeros_like(X)
    np.put_along_axis(want, indices=np.array([[1, 3], [0, 2], [2, 0]]), values=1, axis=1)
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_where_with_tensors_and_numbers():
    x = t(X, grad=True)
    out = fastop.where(x > 2, x, t(np.zeros((3, 4))))
    np.testing.assert_array_equal(out.numpy(), np.where(X > 2, X, 0))
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), (X > 2).astype(float))
    assert fastop.where(t(X) > 2, t(X), 0.5).numpy()[0, 0] == 0.5
    ints = fastop.where(t(X) > 2, 1, 0)
    assert ints.dtype.name == "int64" and ints.numpy().sum() == (X > 2).sum()
    assert fastop.where(t(X) > 2, 1.5, 0).dtype.name == "float32"
    with pytest.raises(ValueError, match="where: give both x and y, or neither"):
        fastop.where(t(X) > 2, t(X))


def test_nonzero_and_where_with_the_condition_alone():
    mask = X > 2
    np.testing.assert_array_equal(fastop.nonzero(t(mask)).numpy(), np.argwhere(mask))
    rows, cols = fastop.where(t(mask))
    assert rows.shape == [int(mask.sum()), 1]
    np.testing.assert_array_equal(rows.numpy()[:, 0], np.nonzero(mask)[0])
    np.testing.assert_array_equal(cols.numpy()[:, 0], np.nonzero(mask)[1])


def test_eager_equals_static(run_static):
    for fn in (lambda v: fastop.argmax(v, axis=1), lambda v: fastop.argmin(v),
               lambda v: fastop.topk(v, 2, axis=0), lambda v: fastop.where(v > 2, v, v * 2.0),
               lambda v: fastop.nonzero(v > 2)):
        eager = fn(t(X))
        eager = list(eager) if isinstance(eager, tuple) else [eager]
        for e, s in zip(eager, run_static(fn, X)):
            np.testing.assert_array_equal(s, e.numpy())


@pytest.mark.parametrize("fn", [fastop.argmax, fastop.argmin])
def test_arg_extrema_of_a_0d_tensor_take_axis_0_or_minus_1(fn):
    """PaddlePaddle's 0-D convention: axis 0 and -1 name a 0-D tensor's one position."""
    x = fastop.to_tensor(3.0)
    for axis in (0, -1, None, fastop.to_tensor(0)):
        out = fn(x, axis)
        assert out.shape == [] and out.item() == 0 and out.dtype == fastop.int64
    assert fn(x, 0, keepdim=True).shape == []
    with pytest.raises(ValueError, match=r"x is 0-D, so axis must be 0, -1 or None; got 1"):
        fn(x, 1)

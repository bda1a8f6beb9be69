"""PaddlePaddle's masked_fill and scatter tensor functions (fastop.tensor.manipulation):
values against numpy, broadcasting masks, scalar and tensor values, gradients (x zero
where masked, a tensor value the masked sum), static Variables, errors naming the
function and the variable."""
import inspect

import numpy as np
import pytest

import fastop

X = np.arange(6, dtype=np.float32).reshape(2, 3)
MASK = np.array([[True, False, True], [False, False, True]])


@pytest.mark.parametrize("value", [9.5, np.float64(9.5)])
def test_masked_fill_with_a_number(value):
    x = fastop.to_tensor(X)
    out = fastop.masked_fill(x, fastop.to_tensor(MASK), value)
    np.testing.assert_array_equal(out.numpy(), np.where(MASK, 9.5, X))
    assert out.dtype == fastop.float32
    np.testing.assert_array_equal(x.masked_fill(fastop.to_tensor(MASK), value).numpy(),
                                  out.numpy())


def test_masked_fill_value_takes_xs_dtype_and_the_mask_broadcasts():
    ints = fastop.to_tensor([[1, 2, 3], [4, 5, 6]])
    out = fastop.masked_fill(ints, fastop.to_tensor([True, False, False]), 7.9)
    assert out.dtype == fastop.int64                      # value taken in x's dtype
    np.testing.assert_array_equal(out.numpy(), [[7, 2, 3], [7, 5, 6]])
    # a mask of more dims broadcasts x, as PaddlePaddle's where does
    out = fastop.masked_fill(fastop.to_tensor([1.0, 2.0]),
                             fastop.to_tensor([[True, False], [False, True]]), 0.0)
    np.testing.assert_array_equal(out.numpy(), [[0, 2], [1, 0]])
    zero_d = fastop.masked_fill(fastop.to_tensor(3.0), fastop.to_tensor(True), -1.0)
    assert zero_d.shape == [] and zero_d.item() == -1.0


def test_masked_fill_gradients():
    x = fastop.to_tensor(X.astype("float64"), stop_gradient=False)
    value = fastop.to_tensor(2.0, dtype="float64", stop_gradient=False)
    weights = np.arange(1.0, 7.0).reshape(2, 3)
    (fastop.masked_fill(x, fastop.to_tensor(MASK), value) * fastop.to_tensor(weights)
     ).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.where(MASK, 0.0, weights))
    assert value.grad.shape == [] and value.grad.item() == weights[MASK].sum()
    # a float32 value into a float64 x: cast, and its gradient comes back in float32
    v32 = fastop.to_tensor(1.0, stop_gradient=False)
    fastop.masked_fill(fastop.to_tensor(weights), fastop.to_tensor(MASK), v32).sum().backward()
    assert v32.grad.dtype == fastop.float32 and v32.grad.item() == 3.0


def test_masked_fill_errors_name_the_function_and_variable():
    x = fastop.to_tensor(X)
    with pytest.raises(TypeError, match="masked_fill: mask must be a bool Tensor, got int64"):
        fastop.masked_fill(x, fastop.to_tensor(MASK.astype("int64")), 1.0)
    with pytest.raises(TypeError, match="masked_fill: value must be a number or a Tensor, "
                                        "got str"):
        fastop.masked_fill(x, fastop.to_tensor(MASK), "1")


def test_scatter_function_and_method_with_paddles_signature():
    params = inspect.signature(fastop.scatter).parameters
    assert list(params) == ["x", "index", "updates", "overwrite", "name"]
    assert params["overwrite"].default is True
    x = fastop.to_tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    index = fastop.to_tensor([2, 1, 0, 1])
    updates = fastop.to_tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
    np.testing.assert_array_equal(fastop.scatter(x, index, updates, overwrite=False).numpy(),
                                  [[3, 3], [6, 6], [1, 1]])
    np.testing.assert_array_equal(x.scatter(index, updates).numpy(), [[3, 3], [4, 4], [1, 1]])


def test_static_masked_fill_and_scatter(run_static):
    updates = np.ones((2, 3), np.float32)
    got = run_static(lambda v, m, i, u: [fastop.masked_fill(v, m, 5.0), v.scatter(i, u)],
                     X, MASK, np.array([1, 0]), updates)
    np.testing.assert_array_equal(got[0], np.where(MASK, 5.0, X))
    np.testing.assert_array_equal(got[1], np.ones((2, 3)))

"""fastop::scatter (PaddlePaddle's scatter): results against PaddlePaddle's documented loop
(overwrite and accumulate, repeated indices, 0-D index, dtypes), the gradient rule
against float64 finite differences and PaddlePaddle's rule for repeated indices, meta,
eager against static, errors naming the op and the variable."""
import numpy as np
import pytest

import fastop
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule

scatter = registry.get("fastop::scatter")


def paddles_loop(x, index, updates, overwrite):
    """The reference of PaddlePaddle's docstring: zero the rows first when accumulating,
    then write (or add) each update in index order."""
    out = x.copy()
    if not overwrite:
        for i in index:
            out[i] = 0
    for i, row in zip(index, updates):
        out[i] = row if overwrite else out[i] + row
    return out


def run(x, index, updates, **attrs):
    return scatter(fastop.to_tensor(x), fastop.to_tensor(index), fastop.to_tensor(updates),
                   **attrs).numpy()


X = np.array([[1, 1], [2, 2], [3, 3]], "float32")
INDEX = np.array([2, 1, 0, 1])
UPDATES = np.array([[1, 1], [2, 2], [3, 3], [4, 4]], "float32")


def test_paddles_docstring_example():
    np.testing.assert_array_equal(run(X, INDEX, UPDATES, overwrite=False),
                                  [[3, 3], [6, 6], [1, 1]])
    # overwrite (the default): the last of the repeated index 1 wins
    np.testing.assert_array_equal(run(X, INDEX, UPDATES), [[3, 3], [4, 4], [1, 1]])


@pytest.mark.parametrize("overwrite", [True, False])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_matches_paddles_loop(dtype, index_dtype, overwrite):
    rng = np.random.default_rng(4)
    x = rng.integers(-9, 9, (5, 2, 3)).astype(dtype)
    index = rng.integers(0, 5, 7).astype(index_dtype)          # repeats included
    updates = rng.integers(-9, 9, (7, 2, 3)).astype(dtype)
    tx = fastop.to_tensor(x)
    got = scatter(tx, fastop.to_tensor(index), fastop.to_tensor(updates),
                  overwrite=overwrite).numpy()
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, paddles_loop(x, index, updates, overwrite))
    np.testing.assert_array_equal(tx.numpy(), x)               # x itself untouched


def test_zero_d_index_replaces_one_row():
    got = run(np.zeros((3, 2)), np.array(1), np.array([5.0, 6.0]))
    np.testing.assert_array_equal(got, [[0, 0], [5, 6], [0, 0]])
    got = run(np.ones((3, 2)), np.array(1), np.array([5.0, 6.0]), overwrite=False)
    np.testing.assert_array_equal(got, [[1, 1], [5, 6], [1, 1]])


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3))
    check_grad_rule(scatter, [x, np.array([3, 0]), rng.standard_normal((2, 3))])
    # accumulating: every repeated update counts, so finite differences agree
    check_grad_rule(scatter, [x, np.array([1, 3, 1]), rng.standard_normal((3, 3))],
                    {"overwrite": False})
    check_grad_rule(scatter, [x, np.array(2), rng.standard_normal(3)])


def test_gradient_of_x_is_zero_on_the_written_rows_and_updates_take_their_rows():
    dout = np.arange(8.0).reshape(4, 2)
    for overwrite in (True, False):
        dx, _, dupdates = check_grad_rule(
            scatter, [np.zeros((4, 2)), np.array([2, 0]), np.ones((2, 2))],
            {"overwrite": overwrite}, douts=[dout])
        np.testing.assert_array_equal(dx, [[0, 0], [2, 3], [0, 0], [6, 7]])
        np.testing.assert_array_equal(dupdates, [[4, 5], [0, 1]])


def test_repeated_indices_with_overwrite_follow_paddles_rule():
    # PaddlePaddle's scatter_grad gathers dout for every index entry: both updates of row 1
    # get its gradient, although only the last was written
    x = fastop.to_tensor(np.zeros((3, 2)), stop_gradient=False)
    updates = fastop.to_tensor(np.ones((3, 2)), stop_gradient=False)
    out = fastop.scatter(x, fastop.to_tensor([1, 1, 2]), updates)
    (out * fastop.to_tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])).sum().backward()
    np.testing.assert_array_equal(updates.grad.numpy(), [[3, 4], [3, 4], [5, 6]])
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 2], [0, 0], [0, 0]])


def test_meta_with_unknown_dims():
    x = TensorMeta([None, 3], "float32")
    index = TensorMeta([None], "int64")
    assert scatter.infer_meta([x, index, TensorMeta([None, 3], "float32")],
                              {"overwrite": True}) == [x]


def test_eager_equals_static(run_static):
    rng = np.random.default_rng(6)
    x, updates = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    index = np.array([4, 0, 4, 2])
    for overwrite in (True, False):
        got = run_static(lambda a, i, u: scatter(a, i, u, overwrite=overwrite),
                         x, index, updates)[0]
        np.testing.assert_array_equal(got, run(x, index, updates, overwrite=overwrite))


@pytest.mark.parametrize("args,error,message", [
    ((X, np.array([0.5]), UPDATES[:1]), TypeError,
     "fastop::scatter: index must be int32 or int64, got float64"),
    ((X, np.array([[1]]), UPDATES[:1]), ValueError,
     r"fastop::scatter: index must be 1-D or 0-D, got shape \[1, 1\]"),
    ((X, np.array([1, 2]), UPDATES[:3]), ValueError,
     r"fastop::scatter: updates must have shape \[2, 2\] .* got \[3, 2\]"),
    ((X, np.array([3]), UPDATES[:1]), ValueError,
     r"fastop::scatter: index holds 3, out of range for x with 3 rows"),
    ((X, np.array([-1]), UPDATES[:1]), ValueError, "fastop::scatter: index holds -1"),
    ((X, np.array([0]), UPDATES[:1].astype("int64")), TypeError,
     "fastop::scatter: updates must have x's dtype float32, got int64"),
    ((X, np.array([0]), UPDATES[:1].astype("float64")), TypeError,
     "fastop::scatter: updates must have x's dtype float32, got float64"),
    ((np.float32(1.0), np.array(0), np.float32(2.0)), ValueError,
     "fastop::scatter: x must have at least 1 dim"),
])
def test_errors_name_the_op_and_the_variable(args, error, message):
    with pytest.raises(error, match=message):
        run(*args)

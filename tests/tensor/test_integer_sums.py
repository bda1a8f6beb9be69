"""Integer sums follow PaddlePaddle's dtype rules (issue 23 item 5): ``sum`` of int32 or
bool is int64, ``cumsum`` of int32 is int64, ``prod`` keeps x's dtype (its docs), ``mean``
takes floats only; int64 and floats keep their dtype; the ``dtype=`` arguments give the
dtype asked for; eager and static agree."""
from __future__ import annotations

import numpy as np
import pytest

import fastop

INT32_MAX = 2**31 - 1


def _eager(fn, *arrays):
    return fn(*[fastop.to_tensor(a) for a in arrays]).numpy()


def _both(run_static, fn, *arrays):
    """fn's result in eager mode and in a static program; they must agree exactly."""
    eager = _eager(fn, *arrays)
    static = run_static(fn, *arrays)[0]
    assert eager.dtype == static.dtype, (eager.dtype, static.dtype)
    np.testing.assert_array_equal(eager, static)
    return eager


def test_the_issues_sum_is_int64_and_exact(run_static):
    x = np.array([INT32_MAX, 1], "int32")
    got = _both(run_static, lambda t: t.sum(), x)
    assert got.dtype == np.int64 and got == 2**31


@pytest.mark.parametrize("axis,keepdim", [(None, False), (0, False), (1, True), ([0, 1], False),
                                          (-1, False)])
def test_int32_sum_over_any_axes_does_not_overflow(run_static, axis, keepdim):
    x = np.full((3, 5), INT32_MAX, "int32")
    x[1, ::2] = -2**31
    got = _both(run_static, lambda t: fastop.sum(t, axis=axis, keepdim=keepdim), x)
    want = x.astype("int64").sum(axis=None if axis is None else tuple(np.atleast_1d(axis)),
                                 keepdims=keepdim)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_int32_sum_of_a_strided_view_and_of_columns():
    x = np.full((4, 3000), 2**30, "int32")
    want = np.full(3000, 2**32, "int64")
    np.testing.assert_array_equal(_eager(lambda t: t.sum(axis=0), x), want)
    t = fastop.to_tensor(x)[:, ::3]
    np.testing.assert_array_equal(t.sum(axis=0).numpy(), want[::3])
    assert t.sum().numpy() == 2**32 * 1000


def test_a_large_int32_sum_runs_threaded_and_exact():
    x = np.full(1 << 20, INT32_MAX, "int32")
    assert _eager(lambda t: t.sum(), x) == INT32_MAX * (1 << 20)
    assert (_eager(lambda t: t.sum(axis=1), x.reshape(16, -1)) == INT32_MAX * (1 << 16)).all()


def test_bool_sum_counts_in_int64(run_static):
    x = np.arange(12).reshape(3, 4) % 3 == 0
    got = _both(run_static, lambda t: t.sum(axis=1), x)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, x.sum(axis=1))
    assert _eager(lambda t: t.sum(), np.ones(70000, bool)) == 70000


def test_an_empty_int32_sum_is_int64_zero():
    got = _eager(lambda t: t.sum(axis=0), np.zeros((0, 3), "int32"))
    assert got.dtype == np.int64 and (got == 0).all()


def test_int64_sum_stays_int64_and_floats_stay(run_static):
    x = np.array([[2**40, 3], [5, -7]], "int64")
    got = _both(run_static, lambda t: t.sum(axis=0), x)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [2**40 + 5, -4])
    for dtype in ("float32", "float64"):
        assert _both(run_static, lambda t: t.sum(), x.astype(dtype)).dtype == dtype


@pytest.mark.parametrize("dtype", ["int32", "int64", "float64"])
def test_sums_dtype_argument_gives_that_dtype(run_static, dtype):
    x = np.array([INT32_MAX, 1, 2], "int32")
    got = _both(run_static, lambda t: fastop.sum(t, dtype=dtype), x)
    assert got.dtype == dtype
    assert got == np.array(x.sum(dtype="int64")).astype(dtype)   # int32 wraps, as asked


def test_sum_of_floats_keeps_its_gradient():
    x = fastop.to_tensor(np.arange(6, dtype="float32").reshape(2, 3), stop_gradient=False)
    (x.sum(axis=1) * fastop.to_tensor(np.array([1.0, 2.0], "float32"))).sum().backward()
    assert x.grad.dtype == fastop.float32
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 1, 1], [2, 2, 2]])


def test_sum_to_shape_keeps_int32():
    """The gradient of a broadcast keeps its dtype (no widening there)."""
    from fastop.ops.builtin._table import B
    got = B.sum_to_shape(fastop.to_tensor(np.ones((3, 4), "int32")), shape=[1, 4])
    assert got.dtype == fastop.int32 and (got.numpy() == 3).all()


def test_int32_cumsum_is_int64(run_static):
    x = np.array([[INT32_MAX, 1, INT32_MAX], [1, 2, 3]], "int32")
    got = _both(run_static, lambda t: fastop.cumsum(t, axis=1), x)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.cumsum(x, axis=1, dtype="int64"))
    flat = _both(run_static, lambda t: fastop.cumsum(t), x)
    np.testing.assert_array_equal(flat, np.cumsum(x, dtype="int64"))


def test_cumsum_of_int64_and_floats_keeps_the_dtype(run_static):
    for dtype in ("int64", "float32", "float64"):
        x = np.arange(6).reshape(2, 3).astype(dtype)
        got = _both(run_static, lambda t: fastop.cumsum(t, axis=0), x)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, np.cumsum(x, axis=0))


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
def test_cumsums_dtype_argument_gives_that_dtype(run_static, dtype):
    x = np.array([INT32_MAX, 1], "int32")
    got = _both(run_static, lambda t: fastop.cumsum(t, axis=0, dtype=dtype), x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.cumsum(x, dtype="int64").astype(dtype))


def test_cumsum_of_floats_keeps_its_gradient():
    x = fastop.to_tensor(np.ones(4, "float64"), stop_gradient=False)
    fastop.cumsum(x, axis=0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4, 3, 2, 1])


def test_prod_keeps_int32_as_paddle_documents_and_dtype_widens(run_static):
    x = np.array([[65536, 3], [65536, 5]], "int32")
    kept = _both(run_static, lambda t: fastop.prod(t, axis=0), x)
    assert kept.dtype == np.int32
    np.testing.assert_array_equal(kept, np.prod(x, axis=0, dtype="int32"))
    wide = _both(run_static, lambda t: fastop.prod(t, axis=0, dtype="int64"), x)
    assert wide.dtype == np.int64
    np.testing.assert_array_equal(wide, [2**32, 15])
    assert _both(run_static, lambda t: fastop.prod(t), x.astype("int64")).dtype == np.int64


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_mean_of_integers_is_refused_naming_the_op(dtype):
    x = fastop.to_tensor(np.ones(3, dtype))
    with pytest.raises(Exception, match="mean") as info:
        x.mean()
    assert dtype in str(info.value)


"""Layer-norm kernels (fastop._core.norm) against their numpy twins
(tests/reference/norm.py) across dtypes, layouts, shapes and norm axes; the backward
kernel against finite differences of the forward; threads; errors and inference."""
import os

import numpy as np
import pytest

from fastop._core import kernel
from fastop._core import norm as K
from ..reference import norm as ref

FLOATS = [np.float32, np.float64]
TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-11, atol=1e-12)}
# (shape, begin_norm_axis)
CASES = [((5,), 0), ((3, 7), 1), ((3, 7), -1), ((2, 3, 4), 1), ((2, 3, 4), 2),
         ((4, 1000), 1), ((64, 256), 1), ((3, 0), 0), ((0, 5), 1), ((2, 2, 2, 3), 2)]


def name(dtype):
    return np.dtype(dtype).name


def data(shape, dtype, layout="contiguous", seed=0, scale=1.0, shift=0.0):
    rng = np.random.default_rng(seed)
    if layout == "transposed" and len(shape) > 1:
        return (rng.standard_normal(shape[::-1]) * scale + shift).astype(dtype).T
    if layout == "strided" and shape:
        wide = shape[:-1] + (2 * shape[-1],)
        return (rng.standard_normal(wide) * scale + shift).astype(dtype)[..., ::2]
    return (rng.standard_normal(shape) * scale + shift).astype(dtype)


def row_size(shape, b):
    return int(np.prod(shape[b % len(shape):]))


def assert_close(got, want, dtype):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **TOL[dtype])


@pytest.mark.parametrize("affine", ["both", "weight", "none"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("shape,b", CASES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_forward_matches_numpy(dtype, shape, b, layout, affine):
    x = data(shape, dtype, layout)
    n = row_size(shape, b)
    w = data((n,), dtype, seed=1) if affine != "none" else None
    bias = data((n,), dtype, seed=2) if affine == "both" else None
    if x.size == 0 and n == 0:
        return          # rows of no elements: a mean of nothing (both give nan)
    got = K.layer_norm(x, w, bias, epsilon=1e-5, begin_norm_axis=b)
    for g, want in zip(got, ref.layer_norm(x, w, bias, 1e-5, b)):
        assert_close(g, want, dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_weight_may_have_the_normalized_shape_or_any_layout(dtype):
    x = data((3, 4, 5), dtype)
    w = data((5, 4), dtype, seed=1).T           # [4, 5], not contiguous
    out, _, _ = K.layer_norm(x, w, None, begin_norm_axis=1)
    assert_close(out, ref.layer_norm(x, np.ascontiguousarray(w), None, 1e-5, 1)[0], dtype)


@pytest.mark.parametrize("dtype,shift,tol", [(np.float32, 1e3, 1e-4), (np.float64, 1e8, 1e-7)],
                         ids=["float32", "float64"])
def test_large_mean_keeps_precision(dtype, shift, tol):
    # E[x^2] - E[x]^2 would lose every digit of the variance here; two passes keep them
    x = data((4, 512), np.float64, shift=shift).astype(dtype)
    out, _, rstd = K.layer_norm(x, None, None, epsilon=0.0, begin_norm_axis=1)
    want = ref.layer_norm(x.astype(np.float64), None, None, 0.0, 1)
    np.testing.assert_allclose(np.asarray(out), want[0], rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(rstd), want[2], rtol=tol)


@pytest.mark.parametrize("with_weight", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("shape,b", [c for c in CASES if 0 not in c[0]], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_backward_matches_numpy(dtype, shape, b, layout, with_weight):
    x = data(shape, dtype, layout)
    w = data((row_size(shape, b),), dtype, seed=1) if with_weight else None
    _, mean, rstd = K.layer_norm(x, w, None, begin_norm_axis=b)
    dy = data(shape, dtype, layout, seed=3)
    got = K.layer_norm_grad(x, mean, rstd, dy, w, begin_norm_axis=b)
    want = ref.layer_norm_grad(x, np.asarray(mean), np.asarray(rstd), dy, w, b)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else TOL[dtype]
    for g, wnt in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), wnt, **tol)


def test_backward_is_the_derivative_of_forward():
    rng = np.random.default_rng(4)
    x, w, bias = rng.standard_normal((3, 5)), rng.standard_normal(5), rng.standard_normal(5)
    dy = rng.standard_normal((3, 5))
    _, mean, rstd = K.layer_norm(x, w, bias)
    dx, dw, db = (np.asarray(t) for t in K.layer_norm_grad(x, mean, rstd, dy, w))

    def loss(x_, w_, b_):
        return float(np.sum(np.asarray(K.layer_norm(x_, w_, b_)[0]) * dy))

    for value, analytic, which in ((x, dx, 0), (w, dw, 1), (bias, db, 2)):
        numeric = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            args = [x.copy(), w.copy(), bias.copy()]
            args[which][idx] += 1e-6
            plus = loss(*args)
            args[which][idx] -= 2e-6
            numeric[idx] = (plus - loss(*args)) / 2e-6
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-7)


def test_in_place_output():
    x = data((6, 8), np.float64)
    want = ref.layer_norm(x, None, None, 1e-5, 1)[0]
    out, mean, rstd = K.layer_norm(x, None, None, out=(x, np.empty((6, 1)), np.empty((6, 1))))
    np.testing.assert_allclose(x, want, rtol=1e-12, atol=1e-12)


def _on_threads(threads, fn, *args, **kwargs):
    saved = kernel._get_num_threads()
    kernel.set_num_threads(threads)
    try:
        return [np.asarray(t).copy() for t in fn(*args, **kwargs)]
    finally:
        kernel.set_num_threads(saved)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one processor")
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_threads_give_the_serial_bits(dtype):
    x, w = data((512, 256), dtype), data((256,), dtype, seed=1)
    serial = _on_threads(1, K.layer_norm, x, w, None)
    assert all(np.array_equal(a, b) for a, b in
               zip(serial, _on_threads(2, K.layer_norm, x, w, None)))
    dy = data((512, 256), dtype, seed=2)
    args = (x, serial[1], serial[2], dy, w)
    one, two = _on_threads(1, K.layer_norm_grad, *args), _on_threads(2, K.layer_norm_grad, *args)
    np.testing.assert_array_equal(one[0], two[0])
    # dweight/dbias: per-piece partials added in piece order (not the serial order)
    for a, b in zip(one[1:], two[1:]):
        np.testing.assert_allclose(a, b, **TOL[dtype])
    assert all(np.array_equal(a, b) for a, b in
               zip(two, _on_threads(2, K.layer_norm_grad, *args)))


def test_inference_with_unknown_dims():
    (out, o_dt), (mean, m_dt), (rstd, _) = K.layer_norm.meta(([None, 3, 4], "float32"),
                                                            ([12], "float32"), None,
                                                            begin_norm_axis=1)
    assert out == [None, 3, 4] and mean == [None, 1, 1] and m_dt.name == "float32"
    grads = K.layer_norm_grad.meta(([None, 4], "float64"), ([None, 1], "float64"),
                                   ([None, 1], "float64"), ([None, 4], "float64"))
    assert [g[0] for g in grads] == [[None, 4], [4], [4]]


@pytest.mark.parametrize("call,message", [
    (lambda: K.layer_norm(np.ones((2, 3)), begin_norm_axis=2), "begin_norm_axis"),
    (lambda: K.layer_norm(np.ones((2, 3)), np.ones(4)), "one element per element of a row"),
    (lambda: K.layer_norm(np.ones((2, 3)), np.ones(3, np.float32)), "x's dtype"),
    (lambda: K.layer_norm(np.ones((2, 3)), epsilon=-1.0), "epsilon"),
    (lambda: K.layer_norm(np.ones((2, 3), np.int32)), "int32"),
    (lambda: K.layer_norm_grad(np.ones((2, 3)), np.ones((3, 1)), np.ones((2, 1)),
                               np.ones((2, 3))), "mean and rstd one per row"),
    (lambda: K.layer_norm_grad(np.ones((2, 3)), np.ones((2, 1)), np.ones((2, 1)),
                               np.ones((2, 3)), np.ones(2)), "one element per element"),
])
def test_errors_name_the_op_and_the_problem(call, message):
    with pytest.raises((ValueError, TypeError), match="layer_norm") as info:
        call()
    assert message in str(info.value)

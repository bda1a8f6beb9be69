"""Every threaded loop of the Cython core run on fastop's thread pool gives the same bits
with 2 threads as with 1: each case is large enough to pass its module's threading
threshold, and the loops split work without changing any reduction order."""
import os

import numpy as np
import pytest

from fastop._core import kernel
from fastop._core import linalg as L
from fastop._core import reduce as R
from fastop._core import shape_ops as G
from fastop._core import optim as O
from fastop._core import softmax as S
from fastop._core.storage import from_numpy


def on_threads(threads, fn, *args, **kwargs):
    """fn(*args, **kwargs) as a numpy array, computed with `threads` kernel threads."""
    saved = kernel._get_num_threads()
    kernel.set_num_threads(threads)
    try:
        return np.asarray(fn(*args, **kwargs)).copy()
    finally:
        kernel.set_num_threads(saved)


def assert_same_on_2_threads(fn, *args, rtol=0.0, **kwargs):
    """fn's result on 2 threads equals (bitwise unless `rtol`) its result on 1."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one processor: fastop caps its threads at 1")
    serial = on_threads(1, fn, *args, **kwargs)
    threaded = on_threads(2, fn, *args, **kwargs)
    if rtol:
        np.testing.assert_allclose(threaded, serial, rtol=rtol)
    else:
        np.testing.assert_array_equal(threaded, serial)
    return threaded


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-1000, 1000, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype,op", [(d, op) for d in (np.float32, np.float64, np.int32,
                                                        np.int64)
                                       for op in ("sum", "max", "mean")
                                       if op != "mean" or np.dtype(d).kind == "f"])
@pytest.mark.parametrize("case", ["everything", "rows", "one long row", "columns",
                                  "strided rows"])
def test_reductions(dtype, op, case):
    x = _data((600, 1000), dtype)
    x, axis = {"everything": (x, None), "rows": (x, -1), "columns": (x, 0),
               "one long row": (x.reshape(1, -1), -1),
               "strided rows": (x.T, 0)}[case]
    floating = np.dtype(dtype).kind == "f"
    # a float sum of one long run is split into per-thread partial sums: the same value
    # to rounding, not the same bits; every other loop only splits independent outputs
    split_run = floating and op != "max" and case in ("everything", "one long row")
    rtol = (1e-6 if dtype == np.float32 else 1e-13) if split_run else 0.0
    got = assert_same_on_2_threads(getattr(R, op), from_numpy(x), axis=axis, rtol=rtol)
    if op == "max":
        np.testing.assert_array_equal(got, np.max(x, axis=axis))
        return
    want = getattr(np, op)(x.astype(np.float64), axis=axis)
    scale = np.sum(np.abs(x.astype(np.float64)), axis=axis) / (x.size / want.size
                                                                if op == "mean" else 1)
    np.testing.assert_array_less(np.abs(got - want), 1e-6 * scale + 1e-300)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("axis", [0, 1])
def test_argmax_along_an_axis(dtype, axis):
    x = _data((600, 1000), dtype)
    got = assert_same_on_2_threads(R.argmax, from_numpy(x), axis=axis)
    np.testing.assert_array_equal(got, np.argmax(x, axis=axis))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(256, 1000), (40, 3000)], ids=["many rows", "few rows"])
def test_softmax_rows(dtype, shape):
    x = _data(shape, dtype, seed=1)
    dy = _data(shape, dtype, seed=2)
    y = assert_same_on_2_threads(S.softmax, x)
    np.testing.assert_allclose(y.sum(axis=-1), 1, rtol=1e-5)
    y0 = assert_same_on_2_threads(S.softmax, x.T, axis=0)
    np.testing.assert_allclose(y0, y.T, rtol=1e-5)       # strided rows: scalar libm loop
    ly = assert_same_on_2_threads(S.log_softmax, x)
    assert_same_on_2_threads(S.softmax_grad, y, dy)
    assert_same_on_2_threads(S.log_softmax_grad, ly, dy)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_rows_and_labels(dtype):
    x = _data((2048, 100), dtype, seed=3)
    label = np.random.default_rng(4).integers(0, 100, 2048)
    label[::7] = -100                                    # ignored rows: loss and grad 0
    dloss = _data((2048, 1), dtype, seed=5)
    loss = assert_same_on_2_threads(lambda: S.softmax_cross_entropy(x, label)[0])
    sm = assert_same_on_2_threads(lambda: S.softmax_cross_entropy(x, label)[1])
    assert np.all(loss[::7] == 0) and np.all(loss[1::7] > 0)
    grad = assert_same_on_2_threads(S.softmax_cross_entropy_grad, label, sm, dloss)
    assert np.all(grad[::7] == 0)
    label[5] = 100                                       # out of range: an error on threads too
    for threads in (1, 2):
        with pytest.raises(Exception, match="softmax_cross_entropy"):
            on_threads(threads, S.softmax_cross_entropy, x, label)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rule", ["sgd", "momentum", "nesterov", "adam", "adamw"])
def test_optimizer_updates(dtype, rule):
    n = 300_001                                    # not a multiple of the piece alignment
    grad = _data((n,), dtype, seed=6)
    decay = {"regularization_method": "l2_decay", "regularization_coeff": 0.01}

    def step():
        param, m1 = _data((n,), dtype, seed=7), np.abs(_data((n,), dtype, seed=8))
        m2 = np.abs(_data((n,), dtype, seed=9))
        lr, scale, pows = np.array([0.1], dtype), np.array([0.5], dtype), np.ones((2, 1), dtype)
        pows *= [[0.9], [0.999]]
        if rule == "sgd":
            O.sgd(param, grad, lr, scale, out=param, **decay)
        elif rule in ("momentum", "nesterov"):
            O.momentum(param, grad, m1, lr, scale, out=(param, m1),
                       use_nesterov=rule == "nesterov", **decay)
        elif rule == "adam":
            O.adam(param, grad, lr, m1, m2, pows[0], pows[1], scale,
                   out=(param, m1, m2, pows[0], pows[1]), **decay)
        else:
            O.adamw(param, grad, lr, m1, m2, pows[0], pows[1], scale,
                    out=(param, m1, m2, pows[0], pows[1]), coeff=0.01)
        return np.concatenate([param, m1, m2])

    threaded = assert_same_on_2_threads(step)         # fresh arrays on every call
    # a skipped piece (a quarter of the elements) would leave its range unchanged
    assert np.mean(threaded[:n] != _data((n,), dtype, seed=7)) > 0.99


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_squared_l2_norm(dtype):
    assert_same_on_2_threads(O.squared_l2_norm, _data((1_000_003,), dtype, seed=10))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_gather_and_its_gradient(dtype, layout):
    rng = np.random.default_rng(10)
    x = _data((400, 300, 4), dtype, seed=11)
    if layout == "strided":
        x = x[:, :, ::2]                                  # inner rows are not contiguous
    index = rng.integers(-300, 300, 500)                  # repeats and negative indices
    got = assert_same_on_2_threads(G.gather, x, index, axis=1)
    np.testing.assert_array_equal(got, np.take(x, index, axis=1))
    if np.dtype(dtype).kind != "f":
        return
    dout = _data(got.shape, dtype, seed=12)
    dx = assert_same_on_2_threads(G.gather_grad, x, index, dout, axis=1)
    want = np.zeros(x.shape)
    np.add.at(want, (slice(None), index % 300), dout)
    np.testing.assert_allclose(dx, want, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("layout", ["contiguous", "strided y", "batched"])
def test_integer_matmul(dtype, layout):
    x, y = _data((200, 150), dtype, seed=13), _data((150, 170), dtype, seed=14)
    if layout == "strided y":
        y = _data((150, 340), dtype, seed=14)[:, ::2]
    elif layout == "batched":
        x, y = _data((3, 100, 150), dtype, seed=13), _data((3, 150, 170), dtype, seed=14)
    got = assert_same_on_2_threads(L.matmul, x, y)
    np.testing.assert_array_equal(got, np.matmul(x, y))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_fc_accumulates_onto_the_bias(dtype):
    x, w = _data((300, 130), dtype, seed=15), _data((130, 90), dtype, seed=16)
    b = _data((90,), dtype, seed=17)
    got = assert_same_on_2_threads(L.fc, x, w, b, activation="relu")
    np.testing.assert_array_equal(got, np.maximum(x @ w + b, 0))


def test_thread_counts_are_capped_at_the_processors_this_process_may_use():
    from fastop._core import blas, parallel
    assert parallel.num_processors() == len(os.sched_getaffinity(0))
    saved_kernel, saved_blas = kernel._get_num_threads(), blas.get_num_threads()
    try:
        kernel.set_num_threads(10_000)
        blas.set_num_threads(10_000)
        assert kernel._get_num_threads() == parallel.num_processors()
        assert blas.get_num_threads() == parallel.num_processors()
    finally:
        kernel.set_num_threads(saved_kernel)
        blas.set_num_threads(saved_blas)

"""Random kernels (fastop._core.random): dropout's mask against its numpy twin bit for
bit (fixed seed), its statistics (drop rate, independence of neighbours and of calls),
the stream's seeding, layout and thread independence, the two modes, the backward
kernel, errors."""
import math
import os

import numpy as np
import pytest

from fastop._core import kernel
from fastop._core import random as K
from ..reference import random as ref

FLOATS = [np.float32, np.float64]


def name(dtype):
    return np.dtype(dtype).name


def data(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("mode", ["upscale_in_train", "downscale_in_infer"])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (2, 3, 4), (33, 65)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_fixed_seed_matches_the_numpy_twin_bit_for_bit(dtype, shape, p, mode):
    x = data(shape, dtype)
    out, mask = K.dropout(x, p=p, mode=mode, seed=12345)
    want_out, want_mask = ref.dropout(x, p, mode, seed=12345)
    np.testing.assert_array_equal(np.asarray(mask), want_mask)
    np.testing.assert_array_equal(np.asarray(out), want_out)
    assert np.asarray(mask).dtype == np.bool_ and np.asarray(out).dtype == dtype


@pytest.mark.parametrize("p", [0.1, 0.5, 0.75])
def test_drop_rate_and_independence(p):
    n = 1 << 18
    K.seed(2024)
    mask = np.asarray(K.dropout(np.ones(n, np.float32), p=p)[1])
    kept = mask.mean()
    # binomial: the kept fraction within 6 standard deviations of 1 - p
    assert abs(kept - (1 - p)) < 6 * math.sqrt(p * (1 - p) / n)
    # neighbours (the two halves of one random word, and across words) are independent:
    # P(both kept) = (1 - p)^2
    for a, b in ((mask[0::2], mask[1::2]), (mask[1:-1:2], mask[2::2])):
        both = (a & b).mean()
        assert abs(both - (1 - p) ** 2) < 6 * math.sqrt((1 - p) ** 2 / len(a))
    # runs of kept elements have the geometric lengths of independent draws
    runs = np.diff(np.flatnonzero(np.diff(np.concatenate([[0], mask.view(np.int8), [0]]))))
    assert abs(np.mean(runs) - (1 / p + 1 / (1 - p)) / 2) < 0.05 * (1 / p + 1 / (1 - p))


def test_each_call_draws_a_fresh_mask_and_seed_restarts_the_stream():
    x = np.ones((64, 64), np.float32)
    K.seed(7)
    first, second = (np.asarray(K.dropout(x, p=0.5)[1]).copy() for _ in range(2))
    assert not np.array_equal(first, second)
    # two masks of independent draws agree on about half the elements
    assert abs((first == second).mean() - 0.5) < 0.05
    K.seed(7)
    np.testing.assert_array_equal(np.asarray(K.dropout(x, p=0.5)[1]), first)
    np.testing.assert_array_equal(np.asarray(K.dropout(x, p=0.5)[1]), second)
    K.seed(8)
    assert not np.array_equal(np.asarray(K.dropout(x, p=0.5)[1]), first)


def test_a_seed_attribute_gives_the_same_mask_on_every_call():
    x = np.ones((10, 10))
    masks = [np.asarray(K.dropout(x, p=0.3, seed=99)[1]) for _ in range(3)]
    assert all(np.array_equal(masks[0], m) for m in masks[1:])
    assert not np.array_equal(masks[0], np.asarray(K.dropout(x, p=0.3, seed=100)[1]))


@pytest.mark.parametrize("layout", ["transposed", "strided", "broadcast"])
def test_the_mask_depends_on_the_c_order_position_not_the_layout(layout):
    base = data((24, 40), np.float64)
    if layout == "transposed":
        x = np.ascontiguousarray(base.T).T
    elif layout == "strided":
        x = np.repeat(base, 2, axis=1)[:, ::2]
    else:
        x = np.broadcast_to(base[:1], base.shape)
    out, mask = K.dropout(x, p=0.4, seed=5)
    want_out, want_mask = ref.dropout(np.ascontiguousarray(x), 0.4, seed=5)
    np.testing.assert_array_equal(np.asarray(mask), want_mask)
    np.testing.assert_array_equal(np.asarray(out), want_out)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one processor")
def test_threads_draw_the_serial_mask():
    x = np.ones(1 << 20, np.float32)
    masks = []
    for threads in (1, 2):
        saved = kernel._get_num_threads()
        kernel.set_num_threads(threads)
        try:
            K.seed(31)
            masks.append(np.asarray(K.dropout(x, p=0.5)[1]).copy())
            masks.append(np.asarray(K.dropout(x, p=0.5, seed=3)[1]).copy())
        finally:
            kernel.set_num_threads(saved)
    np.testing.assert_array_equal(masks[0], masks[2])
    np.testing.assert_array_equal(masks[1], masks[3])


@pytest.mark.parametrize("mode", ["upscale_in_train", "downscale_in_infer"])
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_backward_scales_the_kept_gradients(dtype, mode):
    mask = np.random.default_rng(1).random((6, 7)) < 0.7
    dout = data((6, 7), dtype)
    got = np.asarray(K.dropout_grad(mask, dout, p=0.3, mode=mode))
    np.testing.assert_allclose(got, ref.dropout_grad(mask, dout, 0.3, mode), rtol=1e-6)
    assert got.dtype == dtype and (got[~mask] == 0).all()
    # in place into dout
    K.dropout_grad(mask, dout, p=0.3, mode=mode, out=dout)
    np.testing.assert_allclose(dout, got)


def test_p_one_drops_everything_without_inf():
    out, mask = K.dropout(np.ones((4, 4)), p=1.0)
    assert not np.asarray(mask).any() and (np.asarray(out) == 0).all()
    assert (np.asarray(K.dropout_grad(mask, np.ones((4, 4)), p=1.0)) == 0).all()


@pytest.mark.parametrize("call,error,message", [
    (lambda: K.dropout(np.ones(3), p=1.5), ValueError, "'p' must be a number in [0, 1]"),
    (lambda: K.dropout(np.ones(3), p="half"), ValueError, "'p'"),
    (lambda: K.dropout(np.ones(3), mode="train"), ValueError, "'mode' must be one of"),
    (lambda: K.dropout(np.ones(3), seed=-1), ValueError, "'seed'"),
    (lambda: K.dropout(np.ones(3, np.int32)), TypeError, "int32"),
    (lambda: K.dropout_grad(np.ones(3), np.ones(3)), TypeError, "mask must be bool"),
    (lambda: K.dropout_grad(np.ones(3, bool), np.ones(4)), ValueError, "one shape"),
    (lambda: K.seed(-3), ValueError, "seed"),
])
def test_errors_name_the_op_and_the_argument(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)

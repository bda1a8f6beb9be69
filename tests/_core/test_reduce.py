"""Reduction kernels (fastop._core.reduce) against their numpy twins
(tests/reference/reduce.py): dtypes x shapes x layouts x axes, edge values,
accuracy, the threaded paths, errors, and shape inference with unknown dims."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastop._core import reduce as K
from fastop._core.kernel import _get_num_threads, set_num_threads
from fastop._core.storage import from_numpy
from ..reference import reduce as ref

DTYPES = [np.float32, np.float64, np.uint8, np.int8, np.int16, np.int32, np.int64]
TOL = {
    np.uint8: dict(rtol=0, atol=0),
    np.int8: dict(rtol=0, atol=0),
    np.int16: dict(rtol=0, atol=0),
    np.float32: dict(rtol=1e-5, atol=1e-5),
    np.float64: dict(rtol=1e-12, atol=1e-12),
    np.int32: dict(rtol=0, atol=0),
    np.int64: dict(rtol=0, atol=0),
}
SHAPES = [(), (0,), (7,), (3, 0), (4, 5), (2, 3, 4), (3, 1, 4, 2), (300, 37)]


def values(shape, dtype, rng):
    if np.dtype(dtype).kind == "i":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    if np.dtype(dtype).kind == "u":
        return rng.integers(0, 100, size=shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def _transposed(shape, dtype, rng):
    return values(shape[::-1], dtype, rng).T


def _strided(shape, dtype, rng):
    if not shape:
        return values(shape, dtype, rng)
    return values(shape[:-1] + (2 * shape[-1],), dtype, rng)[..., ::2]


def _reversed(shape, dtype, rng):
    return values(shape, dtype, rng)[::-1] if shape else values(shape, dtype, rng)


def _broadcast(shape, dtype, rng):
    return np.broadcast_to(values((1,) + shape[1:], dtype, rng), shape) if shape \
        else values(shape, dtype, rng)


LAYOUTS = {
    "contiguous": values,
    "transposed": _transposed,
    "strided": _strided,
    "reversed": _reversed,
    "broadcast": _broadcast,
}


def axis_choices(ndim):
    """None, [] and every single axis and pair of axes (negative spellings too)."""
    yield None
    yield []
    for a in range(ndim):
        yield a
        yield a - ndim
    for pair in itertools.combinations(range(ndim), 2):
        yield list(pair)
    if ndim > 2:
        yield [0, -1]


def assert_matches(got, want, dtype, scale=None):
    """Equal dtype and shape; values within TOL, or within a few rounding errors of the
    sum of magnitudes `scale` (a sum's rounding depends on its summation order)."""
    got = np.asarray(got)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    tol = dict(TOL[dtype])
    if scale is not None and np.dtype(dtype).kind == "f":
        tol["atol"] = max(tol["atol"], 8 * np.finfo(dtype).eps * scale)
    np.testing.assert_allclose(got, want, equal_nan=True, **tol)


def empty_reduction(x, axis):
    axes = range(x.ndim) if axis is None or axis == [] else \
        [axis] if isinstance(axis, int) else axis
    return any(x.shape[a] == 0 for a in axes)


# ----------------------------------------------------------------------------- sum mean max

@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_sum_mean_max_match_numpy(dtype, shape, layout):
    rng = np.random.default_rng(len(shape))
    x = LAYOUTS[layout](shape, dtype, rng)
    t = from_numpy(x)
    for axis, keepdim in itertools.product(axis_choices(x.ndim), (False, True)):
        assert_matches(K.sum(t, axis=axis, keepdim=keepdim), ref.sum(x, axis, keepdim), dtype)
        if np.dtype(dtype).kind == "f":
            with np.errstate(invalid="ignore"):
                want = ref.mean(x, axis, keepdim)
            assert_matches(K.mean(t, axis=axis, keepdim=keepdim), want, dtype)
        if empty_reduction(x, axis):
            with pytest.raises(ValueError, match=r"fastop::max: a max over zero elements has no value"):
                K.max(t, axis=axis, keepdim=keepdim)
        else:
            assert_matches(K.max(t, axis=axis, keepdim=keepdim), ref.max(x, axis, keepdim),
                           dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_edge_values_follow_numpy(dtype):
    info = np.finfo(dtype)
    x = np.array([[1.0, np.inf, 2.0], [np.nan, 0.0, -1.0], [-np.inf, np.inf, 0.0],
                  [info.max, info.max, 0.0], [-0.0, 0.0, info.tiny]], dtype=dtype)
    for xx in (x, np.asfortranarray(x), np.tile(x, (1, 40))):
        t = from_numpy(xx)
        for axis in (None, 0, 1):
            with np.errstate(invalid="ignore", over="ignore"):
                assert_matches(K.sum(t, axis=axis), ref.sum(xx, axis), dtype)
                assert_matches(K.mean(t, axis=axis), ref.mean(xx, axis), dtype)
            assert_matches(K.max(t, axis=axis), ref.max(xx, axis), dtype)
            assert_matches(K.argmax(t, axis=axis), ref.argmax(xx, axis), dtype)


def test_nan_anywhere_wins_the_max():
    for n in (5, 33, 100, 1000):
        for pos in (0, n // 2, n - 1):
            x = np.arange(n, dtype=np.float64)
            x[pos] = np.nan
            assert np.isnan(np.asarray(K.max(x)))
            assert int(np.asarray(K.argmax(x))) == pos


def test_integer_sums_wrap_like_numpy():
    x = np.full(1000, 2**30, dtype=np.int32)
    assert_matches(K.sum(x), ref.sum(x), np.int32)
    assert_matches(K.sum(x.reshape(10, 100), axis=1), ref.sum(x.reshape(10, 100), 1), np.int32)


def test_float32_sums_are_pairwise_accurate():
    rng = np.random.default_rng(1)
    x = rng.random(2_000_000, dtype=np.float32)
    exact = np.sum(x, dtype=np.float64)
    for got in (np.asarray(K.sum(x)), np.asarray(K.sum(x.reshape(20, -1), axis=1)).sum()):
        # naive float32 accumulation is off by ~1e-4 here; pairwise by ~1e-7
        assert abs(float(got) - exact) / exact < 2e-6


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int16, np.uint8],
                         ids=lambda d: np.dtype(d).name)
def test_large_inputs_on_threads(dtype, threads):
    saved = _get_num_threads()
    set_num_threads(threads)
    try:
        rng = np.random.default_rng(2)
        x = values((600, 1000), dtype, rng)
        for xx, axis in itertools.product((x, x.T, x[:, ::2]), (None, -1, 0, [0, 1])):
            scale = float(np.max(ref.sum(np.abs(xx), axis)))
            assert_matches(K.sum(xx, axis=axis), ref.sum(xx, axis), dtype, scale)
            assert_matches(K.max(xx, axis=axis), ref.max(xx, axis), dtype)
            if axis != [0, 1]:
                assert_matches(K.argmax(xx, axis=axis), ref.argmax(xx, axis), dtype)
            if np.dtype(dtype).kind == "f":
                count = xx.size / np.asarray(ref.sum(xx, axis)).size
                assert_matches(K.mean(xx, axis=axis), ref.mean(xx, axis), dtype,
                               scale / count)
    finally:
        set_num_threads(saved)


def test_out_argument_may_be_strided():
    x = np.random.default_rng(3).standard_normal((3, 4, 5))
    out = np.zeros((5, 4)).T
    K.sum(x, axis=0, out=out)
    np.testing.assert_allclose(out, x.sum(0), rtol=1e-12)
    out2 = np.zeros(8)[::2]
    K.max(x, axis=[0, 2], out=out2)
    np.testing.assert_allclose(out2, x.max((0, 2)))


@st.composite
def strided_arrays(draw):
    """A float64 array of 0-4 dims viewed through a random permutation and steps."""
    shape = draw(st.lists(st.integers(0, 5), max_size=4))
    steps = [draw(st.sampled_from([1, 2, -1])) for _ in shape]
    base = np.arange(np.prod([abs(s) * max(d, 1) for s, d in zip(steps, shape)],
                             dtype=np.int64), dtype=np.float64)
    base = np.sin(base).reshape([abs(s) * max(d, 1) for s, d in zip(steps, shape)])
    x = base[tuple(slice(None, None, s) for s in steps)][tuple(slice(0, d) for d in shape)]
    return np.transpose(x, draw(st.permutations(range(x.ndim))))


@settings(max_examples=200, deadline=None)
@given(x=strided_arrays(), data=st.data())
def test_any_layout_and_axes_match_numpy(x, data):
    axes = data.draw(st.lists(st.integers(-x.ndim, x.ndim - 1), unique_by=lambda a: a % x.ndim,
                              max_size=x.ndim)) if x.ndim else []
    keepdim = data.draw(st.booleans())
    assert_matches(K.sum(x, axis=axes, keepdim=keepdim), ref.sum(x, axes, keepdim), np.float64)
    if not empty_reduction(x, axes):
        assert_matches(K.max(x, axis=axes, keepdim=keepdim), ref.max(x, axes, keepdim),
                       np.float64)
    target = [d if data.draw(st.booleans()) else 1
              for d in x.shape[data.draw(st.integers(0, x.ndim)):]]
    assert_matches(K.sum_to_shape(x, shape=target), ref.sum_to_shape(x, target), np.float64)


# ----------------------------------------------------------------------------- argmax

@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided", "reversed"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_argmax_matches_numpy(dtype, layout):
    rng = np.random.default_rng(4)
    for shape in [(), (7,), (4, 5), (2, 3, 4), (50, 70)]:
        x = LAYOUTS[layout](shape, dtype, rng)
        for axis, keepdim in itertools.product([None, *range(-x.ndim, x.ndim)], (False, True)):
            got = K.argmax(x, axis=axis, keepdim=keepdim)
            assert_matches(got, ref.argmax(x, axis, keepdim), np.int64)


def test_argmax_takes_the_first_of_ties():
    x = np.array([[1, 3, 3], [2, 2, 0]], dtype=np.int32)
    np.testing.assert_array_equal(np.asarray(K.argmax(x, axis=1)), [1, 0])
    assert int(np.asarray(K.argmax(x))) == 1


# ----------------------------------------------------------------------------- sum_to_shape

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shapes", [((2, 3, 4), [3, 4]), ((2, 3, 4), [1, 4]),
                                    ((2, 3, 4), [2, 1, 1]), ((2, 3, 4), []),
                                    ((2, 3, 4), [-1, 1]), ((5, 1, 3), [1, 3]),
                                    ((), []), ((0, 3), [3]), ((3, 0), [1, 0])], ids=str)
def test_sum_to_shape_matches_numpy(dtype, shapes):
    shape, target = shapes
    x = values(shape, dtype, np.random.default_rng(5))
    for xx in (x, x.T.copy().T if x.ndim else x, _strided(shape, dtype, np.random.default_rng(6))):
        assert_matches(K.sum_to_shape(xx, shape=target), ref.sum_to_shape(xx, target), dtype)


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("kernel", [K.sum, K.mean, K.max], ids=lambda k: k.name)
def test_bad_axes_name_the_op_and_shapes(kernel):
    x = np.zeros((2, 3), dtype=np.float32)
    for axis in (2, -3, [0, 0], [1, -1]):
        with pytest.raises(ValueError, match=rf"{kernel.name}: each axis must be in "
                                             r"\[-ndim, ndim\) of x \(0 or -1 for a 0-D "
                                             r"x\), and given once; got x: shape \[2, 3\] "
                                             r"float32, axis="):
            kernel(x, axis=axis)
    with pytest.raises(ValueError, match=rf"{kernel.name}: each axis must be in"):
        kernel(np.float32(1.0), axis=1)
    # a 0-D x takes axis 0 or -1 (PaddlePaddle's rule): x itself
    assert kernel(np.float32(1.5), axis=-1).numpy() == 1.5


def test_unsupported_dtypes_name_the_op():
    with pytest.raises(TypeError, match=r"fastop::mean: dtype int32 is not supported"):
        K.mean(np.arange(3, dtype=np.int32))
    with pytest.raises(TypeError, match=r"fastop::max: dtype bool is not supported"):
        K.max(np.ones(3, dtype=bool))


@pytest.mark.parametrize("dtype", ["int32", "bool"])
@pytest.mark.parametrize("shape,axis", [((7,), None), ((5, 6), 0), ((5, 6), 1),
                                        ((3, 4, 5), [0, 2]), ((0, 3), 0)])
def test_int32_and_bool_sum_into_int64_without_overflow(dtype, shape, axis):
    x = np.random.default_rng(1).integers(2**31 - 9, 2**31, shape).astype(dtype)
    got = np.asarray(K.sum(x) if axis is None else K.sum(x, axis=axis))
    want = np.sum(x, axis=None if axis is None else tuple(np.atleast_1d(axis)),
                  dtype="int64")
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16"])
def test_narrow_integer_sums_keep_their_dtype_and_wrap(dtype):
    # PaddlePaddle documents int64 for bool and int32 sums only; the others keep x's dtype
    x = np.full((4, 300), np.iinfo(dtype).max, dtype)
    for xx, axis in ((x, None), (x, 1), (x, 0), (x.T, 1), (x[:, ::3], 1)):
        got = np.asarray(K.sum(xx, axis=axis))
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, np.sum(xx, axis=axis, dtype=dtype))


def test_int32_sum_of_strided_columns_into_int64():
    x = np.full((3, 4000), 2**31 - 1, "int32")[:, ::2]
    got = np.asarray(K.sum(x, axis=0))
    assert got.dtype == np.int64 and (got == 3 * (2**31 - 1)).all()


def test_int32_sum_to_shape_keeps_int32():
    got = np.asarray(K.sum_to_shape(np.ones((3, 4), "int32"), shape=[1, 4]))
    assert got.dtype == np.int32 and (got == 3).all()


def test_other_bad_inputs_name_the_op():
    with pytest.raises(ValueError, match=r"fastop::argmax: an argmax over zero elements has no value"):
        K.argmax(np.zeros((0, 3)), axis=0)
    with pytest.raises(ValueError,
                       match=r"fastop::argmax: axis must be in \[-ndim, ndim\) of x; .*axis=2"):
        K.argmax(np.zeros((2, 3)), axis=2)
    with pytest.raises(ValueError, match=r"fastop::sum_to_shape: x must broadcast to shape.*; "
                                         r"got x: shape \[2, 3\] float64, shape=\[2\]"):
        K.sum_to_shape(np.zeros((2, 3)), shape=[2])
    with pytest.raises(ValueError, match=r"fastop::sum_to_shape: x must broadcast to shape"):
        K.sum_to_shape(np.zeros(3), shape=[1, 3, 1])
    with pytest.raises(ValueError, match=r"fastop::sum: out 'out' must have shape \[3\]"):
        K.sum(np.zeros((2, 3)), axis=0, out=np.zeros(2))


# ----------------------------------------------------------------------------- inference

def test_inference_propagates_unknown_dims():
    f32 = "float32"
    assert K.sum.meta(([None, 3, 4], f32), axis=1) == [([None, 4], f32)]
    assert K.mean.meta(([None, 3, 4], f32), axis=[0, 2], keepdim=True) == [([1, 3, 1], f32)]
    assert K.max.meta(([None, 3], f32), axis=-1, keepdim=True) == [([None, 1], f32)]
    assert K.max.meta(([None, 3], f32)) == [([], f32)]
    assert K.argmax.meta(([None, 5], f32), axis=1) == [([None], "int64")]
    assert K.argmax.meta(([None, 5], f32), keepdim=True) == [([1, 1], "int64")]
    assert K.sum_to_shape.meta(([None, 3, 4], f32), shape=[1, 4]) == [([1, 4], f32)]
    assert K.sum_to_shape.meta(([None, 3, 4], f32), shape=[-1, 3, 1]) == [([None, 3, 1], f32)]
    assert K.sum_to_shape.meta(([2, None], f32), shape=[5]) == [([5], f32)]

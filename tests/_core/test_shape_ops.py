"""gather / gather_grad kernels (fastop._core.shape_ops) against their numpy twins
(tests/reference/shape.py), finite differences, threads, errors and inference."""
import numpy as np
import pytest

from fastop._core import shape_ops as K
from fastop._core.kernel import _get_num_threads, set_num_threads
from ..reference import shape as ref

DTYPES = [np.bool_, np.int32, np.int64, np.float32, np.float64]
FLOATS = [np.float32, np.float64]
SHAPES = [(5,), (4, 3), (2, 5, 3), (3, 4, 0), (1, 6, 1, 2)]
INDEX_SHAPES = [(), (4,), (2, 3), (0,)]


def name(dtype):
    return np.dtype(dtype).name


def values(shape, dtype, rng):
    return (rng.standard_normal(shape) * 5).astype(dtype)


def layouts(x):
    yield x
    yield x.T.copy().T if x.ndim > 1 else x      # same logical array, Fortran order
    yield np.repeat(x, 2, axis=-1)[..., ::2] if x.ndim else x   # strided last axis


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=name)
def test_gather_matches_numpy(dtype, shape):
    rng = np.random.default_rng(len(shape))
    for x in layouts(values(shape, dtype, rng)):
        for axis in range(-x.ndim, x.ndim):
            n = x.shape[axis]
            for ishape in INDEX_SHAPES:
                if n == 0 and ishape != (0,):
                    continue
                index = rng.integers(-n, max(n, 1), ishape)
                for idx in (index, index.astype(np.int32), np.asfortranarray(index)):
                    got = np.asarray(K.gather(x, idx, axis=axis))
                    want = ref.gather(x, idx, axis=axis)
                    assert got.dtype == want.dtype and got.shape == want.shape
                    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_gather_grad_matches_numpy(dtype, shape):
    rng = np.random.default_rng(len(shape) + 10)
    for x in layouts(values(shape, dtype, rng)):
        for axis in range(-x.ndim, x.ndim):
            n = x.shape[axis]
            for ishape in INDEX_SHAPES:
                if n == 0 and ishape != (0,):
                    continue
                index = rng.integers(-n, max(n, 1), ishape)   # repeats accumulate
                dout = values(ref.gather(x, index, axis=axis).shape, dtype, rng)
                got = np.asarray(K.gather_grad(x, index, dout, axis=axis))
                want = ref.gather_grad(x, index, dout, axis=axis)
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_gather_grad_is_the_gradient_of_gather():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 2))
    index = np.array([[3, 0], [3, 1]])
    dout = rng.standard_normal((3, 2, 2, 2))
    got = np.asarray(K.gather_grad(x, index, dout, axis=1))
    eps, want = 1e-6, np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        plus = np.sum(np.asarray(K.gather(x, index, axis=1)) * dout)
        x[i] = old - eps
        minus = np.sum(np.asarray(K.gather(x, index, axis=1)) * dout)
        x[i] = old
        want[i] = (plus - minus) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("threads", [1, 2])
def test_large_inputs_on_threads(threads):
    saved = _get_num_threads()
    set_num_threads(threads)
    try:
        rng = np.random.default_rng(2)
        x = rng.standard_normal((400, 300, 2))
        index = rng.integers(0, 300, 500)
        np.testing.assert_array_equal(np.asarray(K.gather(x, index, axis=1)),
                                      ref.gather(x, index, axis=1))
        dout = rng.standard_normal((400, 500, 2))
        np.testing.assert_allclose(np.asarray(K.gather_grad(x, index, dout, axis=1)),
                                   ref.gather_grad(x, index, dout, axis=1), rtol=1e-12)
    finally:
        set_num_threads(saved)


def test_bad_input_names_the_op():
    x = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r"fastop::gather: each index must be in \[-n, n\).*; "
                                         r"got x: shape \[2, 3\] float32, index: shape \[2\] "
                                         r"int64"):
        K.gather(x, np.array([0, 2]), axis=0)
    with pytest.raises(ValueError, match=r"fastop::gather: each index must be in \[-n, n\)"):
        K.gather(x, np.array([-4]), axis=1)
    with pytest.raises(TypeError, match=r"fastop::gather: input dtypes are not accepted"):
        K.gather(x, np.array([0.0]))
    with pytest.raises(ValueError,
                       match=r"fastop::gather: axis must be in \[-ndim, ndim\) of x; .*axis=2"):
        K.gather(x, np.array([0]), axis=2)
    with pytest.raises(ValueError, match=r"fastop::gather_grad: input shapes are incompatible"):
        K.gather_grad(x, np.array([0, 1]), np.zeros((3, 3), np.float32))
    with pytest.raises(TypeError, match=r"fastop::gather_grad: input dtypes"):
        K.gather_grad(x, np.array([0, 1]), np.zeros((2, 3)))
    with pytest.raises(ValueError,
                       match=r"fastop::gather_grad: each index must be in \[-n, n\)"):
        K.gather_grad(x, np.array([0, 5]), np.zeros((2, 3), np.float32))


def test_inference_propagates_unknown_dims():
    f32, i64 = "float32", "int64"
    assert K.gather.meta(([None, 5], f32), ([7], i64), axis=1) == [([None, 7], f32)]
    assert K.gather.meta(([4, 5], f32), ([None, 2], i64)) == [([None, 2, 5], f32)]
    assert K.gather.meta(([4, 5], f32), ([], "int32"), axis=-1) == [([4], f32)]
    assert K.gather_grad.meta(([None, 5], f32), ([3], i64), ([None, 3], f32), axis=1) == \
        [([None, 5], f32)]

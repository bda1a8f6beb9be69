"""Softmax kernels (fastop._core.softmax) against their numpy twins
(tests/reference/softmax.py), backward kernels against finite differences of the
forward kernels in float64, edge values, labels, threads, errors and inference."""
import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fastop._core import softmax as K
from fastop._core.kernel import _get_num_threads, set_num_threads
from ..reference import softmax as ref

FLOATS = [np.float32, np.float64]
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-14)}
SHAPES = [(), (0,), (5,), (3, 7), (2, 3, 4), (4, 1000), (3, 0)]


def name(dtype):
    return np.dtype(dtype).name


def logits(shape, dtype, rng, layout="contiguous"):
    if layout == "transposed":
        return (rng.standard_normal(shape[::-1]) * 4).astype(dtype).T
    if layout == "strided" and shape:
        return (rng.standard_normal(shape[:-1] + (2 * shape[-1],)) * 4).astype(dtype)[..., ::2]
    return (rng.standard_normal(shape) * 4).astype(dtype)


def assert_close(got, want, dtype):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, equal_nan=True, **TOL[dtype])


def numeric_grad(f, x, dy, eps=1e-6):
    """d sum(f(x) * dy) / dx by central differences (float64)."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + eps
        plus = np.sum(np.asarray(f(x)) * dy)
        x[idx] = old - eps
        minus = np.sum(np.asarray(f(x)) * dy)
        x[idx] = old
        g[idx] = (plus - minus) / (2 * eps)
    return g


# ----------------------------------------------------------------------------- forward

@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_softmax_and_log_softmax_match_numpy(dtype, shape, layout):
    x = logits(shape, dtype, np.random.default_rng(len(shape)), layout)
    for axis in range(-max(x.ndim, 1), max(x.ndim, 1)):
        if x.size == 0:   # no row to take a max of: the twin cannot, the kernel is a no-op
            assert np.asarray(K.softmax(x, axis=axis)).shape == x.shape
            continue
        assert_close(K.softmax(x, axis=axis), ref.softmax(x, axis=axis), dtype)
        assert_close(K.log_softmax(x, axis=axis), ref.log_softmax(x, axis=axis), dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_edge_values(dtype):
    big = np.finfo(dtype).max / 4
    rows = np.array([[big, 0.0, -big, 1.0],          # huge inputs: exp must not overflow
                     [1000.0, 999.0, 998.0, -1000.0],
                     [np.inf, 0.0, 1.0, 2.0],        # +inf: inf - inf is NaN (as numpy)
                     [-np.inf, 0.0, 1.0, 2.0],       # -inf: probability 0
                     [-np.inf, -np.inf, -np.inf, -np.inf],
                     [np.nan, 0.0, 1.0, 2.0],        # NaN poisons its row only
                     [0.0, 0.0, 0.0, 0.0]], dtype=dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for x in (rows, np.asfortranarray(rows), np.tile(rows, (1, 50))):
            assert_close(K.softmax(x), ref.softmax(x), dtype)
            assert_close(K.log_softmax(x), ref.log_softmax(x), dtype)
    y = np.asarray(K.softmax(rows))
    np.testing.assert_allclose(y[0], [1, 0, 0, 0])
    np.testing.assert_allclose(y[3, 0], 0)
    assert np.isfinite(np.asarray(K.log_softmax(rows))[1]).all()
    assert np.isnan(y[5]).all() and np.isfinite(y[6]).all()


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_softmax_in_place(dtype):
    """out= the input itself: each row's fused exp-sum pass reads an element before it
    writes it, so in place gives the same result."""
    x = logits((7, 1037), dtype, np.random.default_rng(15))
    want = ref.softmax(x)
    y = x.copy()
    K.softmax(y, out=y)
    assert_close(y, want, dtype)


@pytest.mark.parametrize("threads", [1, 2])
def test_large_inputs_on_threads(threads):
    saved = _get_num_threads()
    set_num_threads(threads)
    try:
        rng = np.random.default_rng(7)
        x = logits((256, 1000), np.float32, rng)
        assert_close(K.softmax(x), ref.softmax(x), np.float32)
        assert_close(K.log_softmax(x.T, axis=0), ref.log_softmax(x.T, axis=0), np.float32)
        label = rng.integers(0, 1000, 256)
        loss, sm = K.softmax_cross_entropy(x, label)
        want_loss, want_sm = ref.softmax_cross_entropy(x, label)
        assert_close(loss, want_loss, np.float32)
        dloss = rng.standard_normal((256, 1)).astype(np.float32)
        assert_close(K.softmax_cross_entropy_grad(label, sm, dloss),
                     ref.softmax_cross_entropy_grad(label, want_sm, dloss), np.float32)
    finally:
        set_num_threads(saved)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("classes", [1, 3, 10, 32, 33])
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_short_rows_in_blocks_match_numpy(dtype, classes, threads):
    """Rows of up to 32 classes run as blocks of 512 elements (one SIMD exp per block):
    row counts across block ends, a NaN row, an ignored row and in-place softmax give
    what the row-by-row twins give."""
    saved = _get_num_threads()
    set_num_threads(threads)
    try:
        rng = np.random.default_rng(classes)
        rows = 2 * (512 // classes) + 3
        x = logits((rows, classes), dtype, rng)
        x[1, classes // 2] = np.nan
        label = rng.integers(0, classes, rows)
        label[2] = -100
        assert_close(K.softmax(x), ref.softmax(x), dtype)
        y = x.copy()
        K.softmax(y, out=y)
        assert_close(y, ref.softmax(x), dtype)
        loss, sm = K.softmax_cross_entropy(x, label)
        want_loss, want_sm = ref.softmax_cross_entropy(x, label)
        assert np.isnan(np.asarray(loss)[1, 0]) and np.asarray(loss)[2, 0] == 0
        assert_close(loss, want_loss, dtype)
        assert_close(sm, want_sm, dtype)
        dloss = rng.standard_normal((rows, 1)).astype(dtype)
        assert_close(K.softmax_cross_entropy_grad(label, sm, dloss),
                     ref.softmax_cross_entropy_grad(label, want_sm, dloss), dtype)
        same = np.broadcast_to(np.array([[0.5]], dtype), (rows, 1))   # one loss, stride 0
        g = np.asarray(K.softmax_cross_entropy_grad(label, sm, same))
        assert not g[2].any()
        assert_close(g, ref.softmax_cross_entropy_grad(label, want_sm, np.full((rows, 1), 0.5,
                                                                         dtype)), dtype)
    finally:
        set_num_threads(saved)


# ----------------------------------------------------------------------------- backward

@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("shape", [(), (5,), (3, 7), (2, 3, 4), (4, 1000)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_backward_kernels_match_numpy(dtype, shape, layout):
    rng = np.random.default_rng(8)
    x = logits(shape, dtype, rng, layout)
    dy = logits(shape, dtype, rng, layout)
    for axis in range(-max(x.ndim, 1), max(x.ndim, 1)):
        y = ref.softmax(x, axis=axis)
        assert_close(K.softmax_grad(y, dy, axis=axis), ref.softmax_grad(y, dy, axis=axis),
                     dtype)
        ly = ref.log_softmax(x, axis=axis)
        assert_close(K.log_softmax_grad(ly, dy, axis=axis),
                     ref.log_softmax_grad(ly, dy, axis=axis), dtype)


@pytest.mark.parametrize("shape,axis", [((6,), 0), ((3, 4), -1), ((3, 4), 0),
                                        ((2, 3, 2), 1)], ids=str)
def test_backward_kernels_match_finite_differences(shape, axis):
    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape)
    dy = rng.standard_normal(shape)
    got = np.asarray(K.softmax_grad(np.asarray(K.softmax(x, axis=axis)), dy, axis=axis))
    np.testing.assert_allclose(got, numeric_grad(lambda v: K.softmax(v, axis=axis), x, dy),
                               rtol=1e-6, atol=1e-8)
    got = np.asarray(K.log_softmax_grad(np.asarray(K.log_softmax(x, axis=axis)), dy,
                                        axis=axis))
    np.testing.assert_allclose(got, numeric_grad(lambda v: K.log_softmax(v, axis=axis), x, dy),
                               rtol=1e-6, atol=1e-8)


# ----------------------------------------------------------------------------- cross-entropy

@pytest.mark.parametrize("label_form", ["flat", "column"])
@pytest.mark.parametrize("label_dtype", [np.int32, np.int64], ids=name)
@pytest.mark.parametrize("shape", [(64, 10), (5, 1), (0, 4), (2, 3, 5)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_cross_entropy_matches_numpy(dtype, shape, label_dtype, label_form):
    rng = np.random.default_rng(10)
    for layout in ("contiguous", "transposed"):
        x = logits(shape, dtype, rng, layout)
        label = rng.integers(0, shape[-1], shape[:-1]).astype(label_dtype)
        if label_form == "column":
            label = label[..., None]
        loss, sm = K.softmax_cross_entropy(x, label)
        want_loss, want_sm = ref.softmax_cross_entropy(x, label)
        assert np.asarray(loss).shape == shape[:-1] + (1,)
        assert_close(loss, want_loss, dtype)
        assert_close(sm, want_sm, dtype)
        dloss = rng.standard_normal(shape[:-1] + (1,)).astype(dtype)
        assert_close(K.softmax_cross_entropy_grad(label, sm, dloss),
                     ref.softmax_cross_entropy_grad(label, want_sm, dloss), dtype)


def test_cross_entropy_is_stable_for_huge_logits():
    x = np.array([[1e30, 0.0, -1e30], [3e38, -3e38, 0.0]], dtype=np.float32)
    loss, sm = K.softmax_cross_entropy(x, np.array([0, 1]))
    np.testing.assert_allclose(np.asarray(loss)[0], [0.0])
    assert np.asarray(loss)[1, 0] == np.float32(np.inf) or np.asarray(loss)[1, 0] > 1e38
    np.testing.assert_allclose(np.asarray(sm), [[1, 0, 0], [1, 0, 0]])


def test_cross_entropy_ignores_ignore_index_rows():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 3))
    label = np.array([2, 1, 0, 7])
    loss, sm = K.softmax_cross_entropy(x, label, ignore_index=7)
    want_loss, want_sm = ref.softmax_cross_entropy(x, label, ignore_index=7)
    assert np.asarray(loss)[3, 0] == 0
    assert_close(loss, want_loss, np.float64)
    dloss = np.ones((4, 1))
    g = np.asarray(K.softmax_cross_entropy_grad(label, sm, dloss, ignore_index=7))
    assert not g[3].any() and g[:3].any()
    assert_close(g, ref.softmax_cross_entropy_grad(label, want_sm, dloss, ignore_index=7),
                 np.float64)
    with pytest.raises(ValueError, match="each label must be"):  # -100 is only the default
        K.softmax_cross_entropy(x, np.array([2, -100, 0, 7]), ignore_index=7)
    loss, _ = K.softmax_cross_entropy(x, np.array([2, -100, 0, 1]))
    assert np.asarray(loss)[1, 0] == 0


def test_cross_entropy_without_classes():
    """No class is a valid label: only ignored rows are accepted (loss 0)."""
    x = np.zeros((2, 0))
    label = np.array([-100, -100])
    loss, sm = K.softmax_cross_entropy(x, label)
    want_loss, _ = ref.softmax_cross_entropy(x, label)
    assert_close(loss, want_loss, np.float64)
    assert np.asarray(K.softmax_cross_entropy_grad(label, sm, np.ones((2, 1)))).shape == (2, 0)
    with pytest.raises(ValueError, match="fastop::softmax_cross_entropy: each label must be"):
        K.softmax_cross_entropy(x, np.array([0, -100]))
    with pytest.raises(ValueError, match="fastop::softmax_cross_entropy_grad: each label must be"):
        K.softmax_cross_entropy_grad(np.array([-100, 0]), x, np.ones((2, 1)))


def test_cross_entropy_grad_matches_finite_differences():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 5))
    label = np.array([[0], [4], [2], [2]])
    dloss = rng.standard_normal((4, 1))
    _, sm = K.softmax_cross_entropy(x, label)
    got = np.asarray(K.softmax_cross_entropy_grad(label, sm, dloss))
    want = numeric_grad(lambda v: K.softmax_cross_entropy(v, label)[0], x, dloss)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_cross_entropy_long_rows(dtype):
    """Rows of several exp-sum blocks plus a partial vector: loss (log of the fused sum)
    and softmax against the numpy twin, and against float64 for the sum's accuracy."""
    rng = np.random.default_rng(13)
    x = logits((3, 4099), dtype, rng)
    label = np.array([0, 4098, 2050])
    loss, sm = K.softmax_cross_entropy(x, label)
    want_loss, want_sm = ref.softmax_cross_entropy(x, label)
    assert_close(loss, want_loss, dtype)
    assert_close(sm, want_sm, dtype)
    exact, _ = ref.softmax_cross_entropy(x.astype(np.float64), label)
    np.testing.assert_allclose(np.asarray(loss), exact, rtol=4 * np.finfo(dtype).eps * 10)
    np.testing.assert_allclose(np.asarray(sm).sum(axis=1), 1, rtol=1e3 * np.finfo(dtype).eps)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_cross_entropy_grad_streams_large_results(dtype, threads):
    """A gradient of 8 MB or more is written with non-temporal stores, the onehot folded
    into the streamed vectors (labels at every position of a row and of its head/tail
    around the 64-byte lines; rows alternate between two alignments): bitwise equal to
    the same rows computed through the cache, and close to the numpy twin."""
    saved = _get_num_threads()
    set_num_threads(threads)
    try:
        rng = np.random.default_rng(14)
        rows = (8 << 20) // (1000 * np.dtype(dtype).itemsize) + 100
        x = logits((rows, 1000), dtype, rng)
        label = np.arange(rows) % 1000
        label[::7] = -100                                   # ignored rows
        dloss = rng.standard_normal((rows, 1)).astype(dtype)
        _, sm = K.softmax_cross_entropy(x, label)
        streamed = np.asarray(K.softmax_cross_entropy_grad(label, sm, dloss))
        sm = np.asarray(sm)
        cached = np.concatenate([
            np.asarray(K.softmax_cross_entropy_grad(label[i:i + 500], sm[i:i + 500],
                                                    dloss[i:i + 500]))
            for i in range(0, rows, 500)])
        np.testing.assert_array_equal(streamed, cached)
        assert_close(streamed, ref.softmax_cross_entropy_grad(label, sm, dloss), dtype)
        assert not streamed[::7].any()
    finally:
        set_num_threads(saved)


SIMD_BUILD_CHECK = textwrap.dedent("""
    import numpy as np
    from fastop._core import softmax as K
    from reference import softmax as ref
    rng = np.random.default_rng(0)
    for dtype, tol in ((np.float32, 2e-5), (np.float64, 1e-12)):
        for shape in ((64, 10), (5, 1037), (2, 3, 17), ((8 << 20) // 4000 + 3, 1000)):
            x = (rng.standard_normal(shape) * 4).astype(dtype)
            x.flat[::97] = 80.0                   # large logits dominate their rows
            label = rng.integers(0, shape[-1], shape[:-1])
            loss, sm = K.softmax_cross_entropy(x, label)
            want_loss, want_sm = ref.softmax_cross_entropy(x, label)
            np.testing.assert_allclose(np.asarray(loss), want_loss, rtol=tol, atol=tol)
            np.testing.assert_allclose(np.asarray(sm), want_sm, rtol=tol, atol=tol / 10)
            np.testing.assert_allclose(np.asarray(K.softmax(x)), want_sm, rtol=tol,
                                       atol=tol / 10)
            dloss = rng.standard_normal(shape[:-1] + (1,)).astype(dtype)
            np.testing.assert_allclose(
                np.asarray(K.softmax_cross_entropy_grad(label, sm, dloss)),
                ref.softmax_cross_entropy_grad(label, want_sm, dloss), rtol=tol,
                atol=tol / 10)
    print("ok")
""")


# the scripts find the numpy twins (tests/reference) on their PYTHONPATH
TWINS_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    filter(None, [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                  os.environ.get("PYTHONPATH")])))

GUARD_PAGE_CHECK = textwrap.dedent("""
    import ctypes, mmap
    import numpy as np
    from fastop._core import softmax as K
    from reference import softmax as ref
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, 2 * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(ctypes.c_void_p(base + page), page, 0) == 0   # PROT_NONE
    for n in (1, 10, 17, 33):
        x = np.frombuffer(buf, np.float32, count=n, offset=page - 4 * n).reshape(1, n)
        x[...] = np.arange(n, dtype=np.float32) / 3
        loss, sm = K.softmax_cross_entropy(x, np.array([n - 1]))
        np.testing.assert_allclose(np.asarray(sm), ref.softmax(x), rtol=2e-6)
        x = np.frombuffer(buf, np.float32, count=n, offset=page - 4 * n).reshape(1, n)
        out = np.frombuffer(buf, np.float32, count=n, offset=page - 4 * n).reshape(1, n)
        K.softmax(x.copy(), out=out)
        np.testing.assert_allclose(out.sum(), 1, rtol=1e-6)
    print("ok")
""")


def test_row_tails_stop_at_the_end_of_the_row():
    """Rows ending right before an inaccessible page: the masked vector tails of the
    SIMD loops read and write no byte past the row (a fault would kill the process)."""
    done = subprocess.run([sys.executable, "-c", GUARD_PAGE_CHECK], env=TWINS_ENV,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr


@pytest.mark.parametrize("level", ["0", "1"], ids=["baseline", "avx2"])
def test_every_simd_build_of_the_row_loops(level):
    """The baseline and AVX2+FMA builds of the fused exp-sum and scaling loops (forced
    with FASTOP_SIMD_LEVEL; this machine otherwise runs the AVX-512 ones)."""
    env = dict(TWINS_ENV, FASTOP_SIMD_LEVEL=level)
    done = subprocess.run([sys.executable, "-c", SIMD_BUILD_CHECK], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr


# ----------------------------------------------------------------------------- errors

def test_labels_out_of_range_name_the_op():
    x = np.zeros((2, 3), dtype=np.float32)
    for bad in ([0, 3], [-1, 0], [[1], [5]]):
        label = np.array(bad)
        loss, sm = np.full((2, 1), 7, np.float32), np.full((2, 3), 7, np.float32)
        with pytest.raises(ValueError, match=r"fastop::softmax_cross_entropy: each label must "
                                             r"be a class in \[0, C\).*; got logits: shape "
                                             r"\[2, 3\] float32, label: shape \[2(, 1)?\] "
                                             r"int64"):
            K.softmax_cross_entropy(x, label, out=(loss, sm))
        # labels are checked before any row is written: the good row 0 is not either
        assert (loss == 7).all() and (sm == 7).all()
        dlogits = np.full((2, 3), 7, np.float32)
        with pytest.raises(ValueError, match=r"fastop::softmax_cross_entropy_grad: each "
                                             r"label must be a class"):
            K.softmax_cross_entropy_grad(label, x, np.ones((2, 1), np.float32), out=dlogits)
        assert (dlogits == 7).all()


def test_bad_shapes_and_dtypes_name_the_op():
    x = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(TypeError, match=r"fastop::softmax_cross_entropy: input dtypes are "
                                        r"not accepted.*label: shape \[2\] float32"):
        K.softmax_cross_entropy(x, np.zeros(2, dtype=np.float32))
    with pytest.raises(ValueError, match=r"fastop::softmax_cross_entropy: input shapes"):
        K.softmax_cross_entropy(x, np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match=r"fastop::softmax_cross_entropy: input shapes"):
        K.softmax_cross_entropy(x, np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match=r"fastop::softmax_cross_entropy_grad: input shapes"):
        K.softmax_cross_entropy_grad(np.zeros(2, np.int64), x, np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match=r"fastop::softmax_cross_entropy_grad: input dtypes"):
        K.softmax_cross_entropy_grad(np.zeros(2, np.int64), x, np.ones((2, 1)))
    with pytest.raises(ValueError, match=r"fastop::softmax: axis must be in \[-ndim, ndim\); "
                                         r"got x: shape \[2, 3\] float32, axis=2"):
        K.softmax(x, axis=2)
    with pytest.raises(ValueError, match=r"fastop::softmax_grad: input shapes"):
        K.softmax_grad(x, np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match=r"fastop::log_softmax_grad: input dtypes"):
        K.log_softmax_grad(x, np.zeros((2, 3)))
    with pytest.raises(TypeError, match=r"fastop::softmax: dtype int64 is not supported"):
        K.softmax(np.zeros(3, dtype=np.int64))


# ----------------------------------------------------------------------------- inference

def test_inference_propagates_unknown_dims():
    f32, i64 = "float32", "int64"
    assert K.softmax.meta(([None, 10], f32)) == [([None, 10], f32)]
    assert K.log_softmax.meta(([None, 10], f32), axis=0) == [([None, 10], f32)]
    assert K.softmax_grad.meta(([None, 10], f32), ([None, 10], f32)) == [([None, 10], f32)]
    assert K.softmax_cross_entropy.meta(([None, 10], f32), ([None], i64)) == \
        [([None, 1], f32), ([None, 10], f32)]
    assert K.softmax_cross_entropy.meta(([None, 10], f32), ([None, 1], "int32")) == \
        [([None, 1], f32), ([None, 10], f32)]
    assert K.softmax_cross_entropy_grad.meta(([None, 1], i64), ([None, 10], f32),
                                             ([None, 1], f32)) == [([None, 10], f32)]
    for combo in itertools.product([None, 4], repeat=2):
        shapes = K.softmax_cross_entropy.meta(([combo[0], 3], f32), ([combo[1], 1], i64))
        assert shapes[1][0] == [combo[0], 3]


def test_outputs_interleaved_in_one_buffer_are_accepted_overlapping_ones_refused():
    # the outputs' address ranges intersect, their elements do not: no staging needed
    rng = np.random.default_rng(3)
    x, label = logits((4, 3), np.float64, rng), np.array([0, 2, 1, 0])
    buf = np.zeros((4, 4))
    K.softmax_cross_entropy(x, label, out=(buf[:, :1], buf[:, 1:]))
    want_loss, want_sm = ref.softmax_cross_entropy(x, label)
    assert_close(buf[:, :1], want_loss, np.float64)
    assert_close(buf[:, 1:], want_sm, np.float64)
    with pytest.raises(ValueError, match="out 'softmax' shares memory with out 'loss'"):
        K.softmax_cross_entropy(x, label, out=(buf[:, :1], buf[:, :3]))

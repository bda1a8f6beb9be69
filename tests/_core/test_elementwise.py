"""Elementwise kernels (fastop._core.elementwise) against their numpy twins
(tests/reference/elementwise.py): dtypes x shapes x layouts, broadcasting (with
hypothesis), edge values, SIMD accuracy in ULP, out= and in place, the threaded paths,
backward kernels against finite differences, shape inference, and errors."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fastop._core import elementwise as K
from fastop._core.kernel import _get_num_threads, set_num_threads
from fastop._core.storage import DenseTensor, from_numpy
from ..reference import elementwise as ref

FLOATS = [np.float32, np.float64]
NARROW = [np.uint8, np.int8, np.int16]     # their loops wrap like numpy's on overflow
NUMERIC = [*NARROW, np.int32, np.int64, np.float32, np.float64]
ALL = [np.bool_, *NUMERIC]
TOL = {
    np.float32: dict(rtol=4e-7, atol=0),     # a few ULP (SIMD exp/log/tanh/sigmoid)
    np.float64: dict(rtol=6e-16, atol=0),
    np.uint8: dict(rtol=0, atol=0),
    np.int8: dict(rtol=0, atol=0),
    np.int16: dict(rtol=0, atol=0),
    np.int32: dict(rtol=0, atol=0),
    np.int64: dict(rtol=0, atol=0),
    np.bool_: dict(rtol=0, atol=0),
}
# 0-d, empty, tails shorter than a SIMD vector, several vectors plus a tail, n-d
SHAPES = [(), (0,), (1,), (7,), (33,), (3, 0), (4, 5), (2, 3, 4), (3, 1, 4, 2), (129, 37)]

UNARY_ALL = ["neg", "abs", "sign", "square", "relu"]        # int and float
UNARY_FLOAT = ["sqrt", "exp", "log", "tanh", "sigmoid"]
BINARY_ALL = ["add", "subtract", "multiply", "maximum", "minimum"]
COMPARE = ["equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal"]
GRADS = ["tanh_grad", "sigmoid_grad", "relu_grad", "sqrt_grad"]


def values(shape, dtype, rng, kind=None):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "i":
        return rng.integers(-20, 20, size=shape).astype(dtype)
    if dtype.kind == "u":
        return rng.integers(0, 40, size=shape).astype(dtype)
    x = rng.standard_normal(shape) * 3
    if kind == "positive":
        x = np.abs(x) + 0.1
    return x.astype(dtype)


def _transposed(x):
    if x.ndim < 2:
        return x
    return np.ascontiguousarray(x.T).T


def _strided(x):
    if x.ndim == 0:
        return x
    wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    wide[..., ::2] = x
    return wide[..., ::2]


def _reversed(x):
    if x.ndim == 0:
        return x
    return np.ascontiguousarray(x[::-1])[::-1]


LAYOUTS = {"contiguous": lambda x: x, "transposed": _transposed, "strided": _strided,
           "reversed": _reversed}


def check(got, want, dtype=None):
    got = np.asarray(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, **TOL[(dtype or want.dtype).type], equal_nan=True)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def threads():
    """Run with 2 threads (the kernels' threaded paths), restoring the setting after."""
    saved = _get_num_threads()
    set_num_threads(2)
    yield
    set_num_threads(saved)


# --------------------------------------------------------------------------- unary

UNARY_CASES = [(n, d) for n in UNARY_ALL for d in NUMERIC] + \
    [(n, d) for n in UNARY_FLOAT for d in FLOATS]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name,dtype", UNARY_CASES,
                         ids=[f"{n}-{np.dtype(d).name}" for n, d in UNARY_CASES])
def test_unary_matches_numpy(name, dtype, shape, layout, rng):
    x = LAYOUTS[layout](values(shape, dtype, rng, "positive" if name in ("log", "sqrt")
                               else None))
    check(getattr(K, name)(from_numpy(x)), getattr(ref, name)(x))


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", UNARY_ALL + UNARY_FLOAT)
def test_unary_edge_values(name, dtype):
    info = np.finfo(dtype)
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 1e-3, -1e-3, 0.5, 20.0,
                  -20.0, 88.5, 89.0, -87.5, -103.0, -104.0, 700.0, 710.0, -745.0, -746.0,
                  1e4, -1e4, 1e30, -1e30, info.max, -info.max, info.tiny, info.tiny / 8,
                  info.smallest_subnormal, -info.smallest_subnormal], dtype=dtype)
    with np.errstate(all="ignore"):
        want = getattr(ref, name)(x)
        got = np.asarray(getattr(K, name)(from_numpy(x)))
    # results in the subnormal range may differ by a few subnormal steps
    np.testing.assert_allclose(got, want, rtol=TOL[dtype]["rtol"],
                               atol=4 * info.smallest_subnormal, equal_nan=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def ulp_error(got, want, dtype):
    """|got - want| in units of the spacing of `want` rounded to dtype (normal range)."""
    info = np.finfo(dtype)
    keep = np.isfinite(want) & (np.abs(want) >= info.tiny) & (np.abs(want) <= info.max)
    spacing = np.spacing(np.abs(want[keep]).astype(dtype)).astype(np.longdouble)
    return np.abs(got[keep].astype(np.longdouble) - want[keep].astype(np.longdouble)) / spacing


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid"])
def test_simd_float32_accuracy_over_all_exponents(name):
    """Every 4099th float32 bit pattern (all binades, both signs) within 4 ULP of the
    float64 result rounded."""
    x = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = x[np.isfinite(x)]
    with np.errstate(all="ignore"):
        want = getattr(ref, name)(x.astype(np.float64))
    got = np.asarray(getattr(K, name)(from_numpy(x)))
    assert ulp_error(got, want, np.float32).max() <= 4


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid"])
def test_simd_float64_accuracy(name, rng):
    x = np.concatenate([rng.standard_normal(20000) * 5, rng.uniform(-740, 709, 20000),
                        np.exp(rng.uniform(-700, 700, 20000)), rng.uniform(0.5, 2, 20000),
                        rng.uniform(-1e-3, 1e-3, 20000)])
    if name == "log":
        x = np.abs(x)
    with np.errstate(all="ignore"):
        want = getattr(ref, name)(x.astype(np.longdouble))
    got = np.asarray(getattr(K, name)(from_numpy(x)))
    assert ulp_error(got, want, np.float64).max() <= 4


SIMD_BUILD_CHECK = textwrap.dedent("""
    import numpy as np
    from fastop._core import elementwise as K
    rng = np.random.default_rng(0)
    special = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, 90.0, -90.0, 800.0, -800.0]
    for dtype in (np.float32, np.float64):
        info = np.finfo(dtype)
        x = np.concatenate([rng.standard_normal(5000) * 4, rng.uniform(-100, 100, 5000),
                            special]).astype(dtype)
        for name, f in [("exp", np.exp), ("log", np.log), ("tanh", np.tanh),
                        ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
                        ("relu", lambda v: np.maximum(v, 0))]:
            v = np.abs(x) if name == "log" else x
            with np.errstate(all="ignore"):
                want = f(v.astype(np.longdouble))
            got = np.asarray(getattr(K, name)(v)).astype(np.longdouble)
            normal = np.isfinite(want) & (np.abs(want) >= info.tiny) & (np.abs(want) <= info.max)
            ulps = np.abs(got - want)[normal] / np.spacing(np.abs(want[normal]).astype(dtype))
            assert ulps.max() <= 4, (dtype, name, ulps.max())
            rest = ~normal & ~np.isnan(want)      # inf, 0 and subnormal results
            near = want[rest].astype(dtype).astype(np.longdouble)
            assert np.all((got[rest] == near)
                          | (np.abs(got[rest] - near) <= 4 * info.smallest_subnormal)), (dtype, name)
            assert np.array_equal(np.isnan(got), np.isnan(want)), (dtype, name)
        a, b = x[:5000], x[5000:10000]
        for name, f in [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                        ("divide", np.divide), ("maximum", np.maximum), ("minimum", np.minimum)]:
            assert np.array_equal(np.asarray(getattr(K, name)(a, b)), f(a, b)), (dtype, name)
        y = np.tanh(a)
        want = b.astype(np.float64) * (1 - y.astype(np.float64) ** 2)
        np.testing.assert_allclose(np.asarray(K.tanh_grad(y, b)), want, rtol=1e-5,
                                   atol=1e-6 * np.abs(b).max())
    print("ok")
""")


@pytest.mark.parametrize("level", ["0", "1"], ids=["baseline", "avx2"])
def test_every_simd_build_is_accurate(level):
    """The baseline and AVX2+FMA builds of simd_math (forced with FASTOP_SIMD_LEVEL; this
    machine otherwise runs the AVX-512 one) meet the same accuracy."""
    env = dict(os.environ, FASTOP_SIMD_LEVEL=level)
    done = subprocess.run([sys.executable, "-c", SIMD_BUILD_CHECK], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr


def test_exp_huge_inputs_overflow_and_underflow():
    x = np.array([88.8, 100.0, 1e10, np.inf, -110.0, -1e10, -np.inf], np.float32)
    got = np.asarray(K.exp(x))
    np.testing.assert_array_equal(got, [np.inf] * 4 + [0.0] * 3)
    subnormal = np.array([-100.0, -88.0], np.float32)
    np.testing.assert_allclose(np.asarray(K.exp(subnormal)), np.exp(subnormal),
                               rtol=1e-6, atol=2 * np.finfo(np.float32).smallest_subnormal)


def test_tanh_saturates_to_exactly_one():
    x = np.array([10.0, 50.0, 1e30, np.inf], np.float32)
    np.testing.assert_array_equal(np.asarray(K.tanh(x)), [1, 1, 1, 1])
    np.testing.assert_array_equal(np.asarray(K.tanh(-x)), [-1, -1, -1, -1])


# --------------------------------------------------------------------------- binary

BROADCAST_PAIRS = [((), ()), ((5,), ()), ((), (5,)), ((0,), (1,)), ((4, 5), (5,)),
                   ((4, 1), (1, 5)), ((2, 3, 4), (3, 1)), ((3, 1, 4, 1), (2, 1, 6)),
                   ((129, 37), (129, 37)), ((1, 37), (129, 1))]


BINARY_CASES = [(n, d) for n in BINARY_ALL + ["pow"] for d in NUMERIC] + \
    [("divide", d) for d in FLOATS]


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("name,dtype", BINARY_CASES,
                         ids=[f"{n}-{np.dtype(d).name}" for n, d in BINARY_CASES])
def test_binary_matches_numpy(name, dtype, shapes, rng):
    a = values(shapes[0], dtype, rng)
    b = values(shapes[1], dtype, rng)
    if name == "pow":
        a = np.abs(a) + (a.dtype.kind == "f")
        b = np.abs(b) % 5 if b.dtype.kind in "iu" else b
    if name == "divide":
        b = np.where(b == 0, 1, b).astype(dtype)
    check(getattr(K, name)(from_numpy(a), from_numpy(b)), getattr(ref, name)(a, b))


@pytest.mark.parametrize("layout", ["transposed", "strided", "reversed"])
@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", BINARY_ALL)
def test_binary_on_views(name, dtype, layout, rng):
    a = LAYOUTS[layout](values((6, 35), dtype, rng))
    b = LAYOUTS[layout](values((6, 35), dtype, rng))
    check(getattr(K, name)(a, b), getattr(ref, name)(a, b))
    col = values((6, 1), dtype, rng)
    check(getattr(K, name)(a, col), getattr(ref, name)(a, col))


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: np.dtype(d).name)
def test_python_scalars_take_the_tensor_dtype(dtype, rng):
    x = values((3, 4), dtype, rng)
    got = K.multiply(from_numpy(x), 3)
    assert got.dtype == np.dtype(dtype)
    check(got, x * np.asarray(3, dtype))
    check(K.subtract(from_numpy(x), 2), x - np.asarray(2, dtype))


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_propagate_nan(name):
    a = np.array([np.nan, 1.0, np.nan, -np.inf], np.float32)
    b = np.array([1.0, np.nan, np.nan, np.inf], np.float32)
    check(getattr(K, name)(a, b), getattr(ref, name)(a, b))


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", COMPARE)
def test_comparisons_return_bool(name, dtype, shapes, rng):
    a = values(shapes[0], dtype, rng)
    b = values(shapes[1], dtype, rng)
    got = getattr(K, name)(a, b)
    assert got.dtype == np.bool_
    check(got, getattr(ref, name)(a, b))


def test_comparisons_with_nan():
    a = np.array([np.nan, 1.0, np.nan], np.float64)
    b = np.array([1.0, np.nan, np.nan], np.float64)
    for name in COMPARE:
        check(getattr(K, name)(a, b), getattr(ref, name)(a, b))


@settings(max_examples=60, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=5,
                                                max_side=4),
       name=st.sampled_from(BINARY_ALL + ["less_than"]),
       dtype=st.sampled_from([np.float32, np.int64]),
       layout=st.sampled_from(list(LAYOUTS)), seed=st.integers(0, 2**16))
def test_broadcasting_property(shapes, name, dtype, layout, seed):
    """Any mutually broadcastable shapes, in any layout, give numpy's result."""
    rng = np.random.default_rng(seed)
    a = LAYOUTS[layout](values(shapes.input_shapes[0], dtype, rng))
    b = values(shapes.input_shapes[1], dtype, rng)
    got = getattr(K, name)(a, b)
    assert got.shape == list(shapes.result_shape)
    check(got, getattr(ref, name)(a, b))


@settings(max_examples=40, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=4,
                                                max_side=4),
       seed=st.integers(0, 2**16))
def test_where_broadcasting_property(shapes, seed):
    rng = np.random.default_rng(seed)
    c, x, y = shapes.input_shapes
    cond, xs, ys = values(c, np.bool_, rng), values(x, np.float64, rng), values(y, np.float64, rng)
    check(K.where(cond, xs, ys), ref.where(cond, xs, ys))


@settings(max_examples=40, deadline=None)
@given(a=hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=4),
       b=hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=4))
def test_incompatible_shapes_raise_naming_op_and_shapes(a, b):
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(ValueError, match=r"add: .*do not broadcast.*"
                                             + r"\[" + ", ".join(map(str, a)) + r"\]"):
            K.add(np.zeros(a), np.zeros(b))
    else:
        assert K.add(np.zeros(a), np.zeros(b)).shape == list(np.broadcast_shapes(a, b))


# --------------------------------------------------------------------------- where, cast, fill

@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_where(dtype, rng):
    cond = values((4, 5), np.bool_, rng)
    x, y = values((4, 5), dtype, rng), values((5,), dtype, rng)
    check(K.where(cond, x, y), ref.where(cond, x, y))
    xt = _transposed(x)
    check(K.where(cond[:1], xt, y), ref.where(cond[:1], xt, y))


@pytest.mark.parametrize("dst", ALL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("src", ALL, ids=lambda d: np.dtype(d).name)
def test_cast_every_pair(src, dst, rng):
    x = _strided(_cast_source(src, dst, rng))
    check(K.cast(x, dtype=np.dtype(dst).name), ref.cast(x, np.dtype(dst).name))


STORAGE = [np.float16]                 # the storage dtype: only cast computes in it


def _cast_source(src, dst, rng):
    """Values of `src` that `dst` holds without undefined behaviour (float to uint8:
    in [0, 256))."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src == np.uint8:
        return rng.integers(0, 256, size=(3, 7)).astype(np.uint8)
    if src.kind == "f" and dst == np.uint8:
        return (rng.random((3, 7)) * 255.9).astype(src)
    return values((3, 7), src, rng)


@pytest.mark.parametrize("src, dst", [(s, d) for s in ALL + STORAGE for d in ALL + STORAGE
                                      if s in STORAGE or d in STORAGE],
                         ids=lambda d: np.dtype(d).name)
def test_cast_to_and_from_storage_dtypes_as_numpy(src, dst, rng):
    x = _cast_source(src, dst, rng)
    for layout in (x, _strided(x), _transposed(x)):
        got = np.asarray(K.cast(layout, dtype=np.dtype(dst).name))
        want = layout.astype(dst)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)      # exact: numpy's own conversions


def test_cast_to_float16_rounds_as_numpy():
    # halfway cases, the largest half, overflow to inf, subnormals, underflow, nan
    x = np.array([65504, 65519.99, 65520, 1e5, -1e5, 6.1e-5, 6e-8, 3e-8, 2.9e-8, 1e-8,
                  0.1, 1 + 2**-11, 1 + 3 * 2**-11, np.nan, -np.inf, -0.0], np.float64)
    for src in (x, x.astype(np.float32)):
        got = np.asarray(K.cast(src, dtype="float16"))
        with np.errstate(over="ignore"):       # 1e5 overflows to inf, as intended
            want = src.astype(np.float16)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("dst", NARROW, ids=lambda d: np.dtype(d).name)
def test_cast_to_a_narrow_integer_wraps_integers(dst):
    x = np.array([-1, 0, 127, 128, 255, 256, 300, -129, 32768, -32769, 2**40 + 5], np.int64)
    for src in (x, x.astype(np.int32), x.astype(np.int16)):
        got = np.asarray(K.cast(src, dtype=np.dtype(dst).name))
        assert got.dtype == dst
        np.testing.assert_array_equal(got, src.astype(dst))


@pytest.mark.parametrize("dst", NARROW, ids=lambda d: np.dtype(d).name)
def test_cast_float_to_a_narrow_integer_truncates_then_wraps(dst):
    # through int64, as numpy defines it for values in range; 300.7 -> 300 -> 44 (int8)
    x = np.array([-2.7, -0.5, 0.5, 2.7, 127.9, 300.7, 40000.2], np.float64)
    for src in (x, x.astype(np.float32), x.astype(np.float16)):
        got = np.asarray(K.cast(src, dtype=np.dtype(dst).name))
        np.testing.assert_array_equal(got, np.trunc(src).astype(np.int64).astype(dst))


def test_cast_float_to_int_truncates_and_to_bool_tests_nonzero():
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, np.nan], np.float64)
    check(K.cast(x[:5], dtype="int32"), np.array([-2, 0, 0, 0, 2], np.int32))
    check(K.cast(x, dtype="bool"), np.array([1, 1, 0, 1, 1, 1], bool))


FILLS = [(d, v) for d in ALL for v in (0, 3, True, -2.5, 2**40 + 1)
         if not (v == -2.5 and np.dtype(d).kind in "iub")
         and not (v == 2**40 + 1 and np.dtype(d) in (np.bool_, *NARROW, np.int32, np.float32))]


@pytest.mark.parametrize("dtype,value", FILLS, ids=[f"{np.dtype(d).name}-{v}" for d, v in FILLS])
def test_full_like(dtype, value, rng):
    x = _transposed(values((4, 3), dtype, rng))
    check(K.full_like(x, fill_value=value), ref.full_like(x, value))


# --------------------------------------------------------------------------- out=, in place

def test_out_is_written_and_returned_without_copy(rng):
    x = values((5, 6), np.float32, rng)
    out = np.empty_like(x)
    t = from_numpy(out)
    result = K.tanh(from_numpy(x), out=t)
    assert result is t
    np.testing.assert_allclose(out, np.tanh(x), rtol=4e-7)


@pytest.mark.parametrize("name", ["exp", "relu", "neg"])
def test_in_place_unary(name, rng):
    x = values((7, 9), np.float64, rng)
    want = getattr(ref, name)(x)
    t = from_numpy(x)
    getattr(K, name)(t, out=t)
    check(x, want)


@pytest.mark.parametrize("which", [0, 1])
def test_in_place_binary_with_broadcast_operand(which, rng):
    x = values((6, 5), np.float32, rng)
    bias = values((5,), np.float32, rng)
    want = x + bias
    t = from_numpy(x)
    K.add(*((t, bias) if which == 0 else (bias, t)), out=t)
    check(x, want)


def test_in_place_on_a_view(rng):
    base = values((6, 8), np.float64, rng)
    want = base.copy()
    want[:, ::2] = np.square(want[:, ::2])
    view = from_numpy(base)[:, ::2]
    K.square(view, out=view)
    check(base, want)


@pytest.mark.parametrize("shift", [1, -1])
def test_partially_overlapping_out_reads_inputs_first(shift, rng):
    buf = values((40,), np.float64, rng) / 10
    src, dst = (slice(0, 39), slice(1, 40)) if shift == 1 else (slice(1, 40), slice(0, 39))
    want = buf.copy()
    want[dst] = np.exp(buf[src]) + buf[src]
    t = from_numpy(buf)
    K.add(K.exp(t[src]), t[src], out=t[dst])
    check(buf, want)
    want = buf.copy()
    want[dst] = np.exp(buf[src])
    K.exp(t[src], out=t[dst])
    check(buf, want)


def test_out_shape_and_dtype_are_checked(rng):
    x = values((3, 4), np.float32, rng)
    with pytest.raises(ValueError, match=r"tanh: out 'out' must have shape \[3, 4\]"):
        K.tanh(x, out=np.empty((4, 3), np.float32))
    with pytest.raises(ValueError, match="dtype float32"):
        K.tanh(x, out=np.empty((3, 4), np.float64))
    with pytest.raises(ValueError, match="read-only"):
        K.tanh(x, out=from_numpy(np.empty((1, 4), np.float32)).broadcast_to([3, 4]))


# --------------------------------------------------------------------------- threads

@pytest.mark.parametrize("name", ["tanh", "exp", "add", "multiply", "less_than", "cast"])
def test_threaded_paths_match_single_threaded(name, threads, rng):
    n = 600_001           # above the thread threshold even for cheap ops; odd split
    x = values((n,), np.float32, rng)
    y = values((n,), np.float32, rng)
    args = (x,) if name in ("tanh", "exp", "cast") else (x, y)
    attrs = {"dtype": "float64"} if name == "cast" else {}
    got = getattr(K, name)(*args, **attrs)
    check(got, getattr(ref, name)(*args, *attrs.values()))
    # strided and broadcast operands take the buffered path on each thread
    xs = _strided(values((1000, 700), np.float32, rng))
    col = values((1000, 1), np.float32, rng)
    if len(args) == 2:
        check(getattr(K, name)(xs, col), getattr(ref, name)(xs, col))
    else:
        check(getattr(K, name)(xs, **attrs), getattr(ref, name)(xs, *attrs.values()))


def test_large_results_use_streaming_stores_correctly(rng):
    """Results above 8 MB are computed in chunks and streamed out (also unaligned)."""
    x = values((3_000_001,), np.float32, rng)
    out = np.empty(3_000_002, np.float32)[1:]       # 4-byte aligned, not 64
    K.tanh(x, out=out)
    np.testing.assert_allclose(out, np.tanh(x), rtol=4e-7)
    K.add(x, x, out=out)
    np.testing.assert_array_equal(out, x + x)
    odd = np.frombuffer(bytearray(4 * x.size + 1), np.float32, offset=1)   # misaligned
    K.exp(x, out=odd)
    np.testing.assert_allclose(odd, np.exp(x), rtol=4e-7)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_streamed_binary_results_at_every_alignment(dtype, threads, rng):
    """A binary result of 8 MB or more is streamed out in chunks aligned to the output's
    cache lines: at every element offset within a 64-byte line, out of place and in place
    on either operand, it equals numpy exactly and writes nothing outside the output."""
    item = np.dtype(dtype).itemsize
    n = (8 << 20) // item + 1237                # not a multiple of the chunk or a line
    a = values((n,), dtype, rng)
    b = values((n,), dtype, rng)
    want = a * b
    saved = _get_num_threads()
    set_num_threads(threads)
    try:
        for shift in range(64 // item):
            block = np.full(n + 64 // item + 2, 7, dtype)
            out = block[shift + 1:shift + 1 + n]
            K.multiply(a, b, out=out)
            np.testing.assert_array_equal(out, want)
            assert (block[:shift + 1] == 7).all() and (block[shift + 1 + n:] == 7).all()
            out[:] = a                               # in place: y = y * b
            K.multiply(out, b, out=out)
            np.testing.assert_array_equal(out, want)
            out[:] = b                               # y = a * y
            K.multiply(a, out, out=out)
            np.testing.assert_array_equal(out, want)
    finally:
        set_num_threads(saved)


# --------------------------------------------------------------------------- backward kernels

FORWARD_OF = {"tanh_grad": "tanh", "sigmoid_grad": "sigmoid", "relu_grad": "relu",
              "sqrt_grad": "sqrt"}


@pytest.mark.parametrize("name", GRADS)
def test_backward_kernels_match_finite_differences(name, rng):
    fwd = getattr(K, FORWARD_OF[name])
    x = values((5, 4), np.float64, rng, "positive" if name == "sqrt_grad" else None)
    x[np.abs(x) < 1e-3] = 0.5                  # keep relu away from its kink
    dy = values((5, 4), np.float64, rng)
    h = 1e-6
    numeric = dy * (np.asarray(fwd(x + h)) - np.asarray(fwd(x - h))) / (2 * h)
    got = getattr(K, name)(fwd(x), dy)
    np.testing.assert_allclose(np.asarray(got), numeric, rtol=1e-6, atol=1e-8)


# The kernels may fuse a multiply-add (1 - y*y in one rounding), numpy does not.
GRAD_TOL = {np.float32: dict(rtol=1e-6, atol=1e-7), np.float64: dict(rtol=1e-14, atol=1e-15)}


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", GRADS)
def test_backward_kernels_broadcast_and_match_numpy(name, dtype, rng):
    y = np.abs(values((3, 1, 4), dtype, rng)) / 10 + 0.05
    y[0, 0, :2] = -y[0, 0, :2]                     # relu_grad's zero branch
    dy = values((2, 4), dtype, rng)
    got = np.asarray(getattr(K, name)(y, dy))
    want = getattr(ref, name)(y, dy)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **GRAD_TOL[dtype])


# --------------------------------------------------------------------------- inference

def test_meta_propagates_unknown_dims():
    (shape, dtype), = K.add.meta(([None, 3], "float32"), ([1, 3], "float32"))
    assert shape == [None, 3] and dtype == "float32"
    (shape, dtype), = K.less_than.meta(([None, 1], "int64"), ([1, 4], "int64"))
    assert shape == [None, 4] and dtype == "bool"
    (shape, _), = K.multiply.meta(([None, 5], "float64"), ([7, 5], "float64"))
    assert shape == [7, 5]
    (shape, dtype), = K.cast.meta(([None, 2], "float32"), dtype="int64")
    assert shape == [None, 2] and dtype == "int64"
    with pytest.raises(ValueError, match="add: input shapes do not broadcast"):
        K.add.meta(([None, 3], "float32"), ([4], "float32"))


# --------------------------------------------------------------------------- errors

def test_binary_dtype_mismatch_names_op_and_both_dtypes():
    with pytest.raises(TypeError, match=r"multiply: .*x: shape \[2\] float32, "
                                        r"y: shape \[2\] float64"):
        K.multiply(np.ones(2, np.float32), np.ones(2, np.float64))


def test_shape_mismatch_names_op_and_shapes():
    with pytest.raises(ValueError, match=r"subtract: input shapes do not broadcast together; "
                                         r"got x: shape \[2, 3\] float32, y: shape \[4\] float32"):
        K.subtract(np.ones((2, 3), np.float32), np.ones(4, np.float32))


@pytest.mark.parametrize("name,dtype", [("exp", np.int64), ("tanh", np.int32),
                                        ("log", np.bool_), ("divide", np.int32),
                                        ("add", np.bool_), ("neg", np.bool_),
                                        ("tanh_grad", np.int64), ("exp", np.int8),
                                        ("divide", np.uint8), ("sqrt", np.int16)])
def test_unsupported_dtype_names_op_and_dtype(name, dtype):
    args = [np.ones(3, dtype)] * (1 if name in UNARY_ALL + UNARY_FLOAT else 2)
    with pytest.raises(TypeError, match=f"{name}: dtype {np.dtype(dtype).name} is not supported"):
        getattr(K, name)(*args)


def test_where_needs_a_bool_condition_and_equal_dtypes():
    with pytest.raises(TypeError, match=r"where: .*condition: shape \[3\] float32"):
        K.where(np.ones(3, np.float32), np.ones(3), np.ones(3))
    with pytest.raises(TypeError, match=r"where: .*x: shape \[3\] float64, y: shape \[3\] int64"):
        K.where(np.ones(3, bool), np.ones(3), np.ones(3, np.int64))


@pytest.mark.parametrize("n", [4, 1 << 20], ids=["small", "threaded"])
def test_integer_pow_rejects_negative_exponents_before_writing(n):
    x = np.full(n, 2, np.int64)
    y = np.full(n, 3, np.int64)
    y[-2] = -1                     # the last piece: a late check would have written the rest
    with pytest.raises(ValueError, match="pow: integers cannot be raised to a negative "
                                         "integer power; got x: shape"):
        K.pow(x, y, out=x)
    assert (x == 2).all()          # in place, and nothing written
    with pytest.raises(ValueError, match="negative integer power"):
        K.pow(np.arange(3, dtype=np.int32), np.array([[1, 2, 0], [0, -1, 1]], np.int32)[:, ::-1])
    np.testing.assert_array_equal(np.asarray(K.pow(np.arange(3), np.array([[0], [2]]))),
                                  [[1, 1, 1], [0, 1, 4]])


@pytest.mark.parametrize("dtype, value", [
    (np.int32, 2**31), (np.int32, -2**31 - 1), (np.int32, 1e10), (np.int32, float("nan")),
    (np.int64, 2**63), (np.int64, float("inf")), (np.int8, 128), (np.int8, -129),
    (np.int16, 2**15), (np.uint8, -1), (np.uint8, 256),
])
def test_full_like_refuses_a_value_its_integer_dtype_cannot_hold(dtype, value):
    # it used to wrap (2**31 -> -2**31) or give 0 for nan; numpy raises OverflowError
    x = np.full(3, 7, dtype)
    with pytest.raises(ValueError, match=r"fastop::full_like: fill_value does not fit x's "
                                         r"integer dtype; got x: shape \[3\] .*fill_value="):
        K.full_like(x, fill_value=value, out=x)
    assert (x == 7).all()


@pytest.mark.parametrize("dtype, value, want", [
    (np.int32, -2**31, -2**31), (np.int64, -2**63, -2**63), (np.int32, 2.9, 2),
    (np.int32, -2.9, -2), (np.float32, 2**63, 2.0**63), (np.bool_, 5, True),
    (np.int8, -128, -128), (np.int16, 32767, 32767), (np.uint8, 255.9, 255),
])
def test_full_like_edge_values_match_numpy(dtype, value, want):
    got = np.asarray(K.full_like(np.zeros(2, dtype), fill_value=value))
    np.testing.assert_array_equal(got, np.full(2, want, dtype))


def test_cast_and_full_like_attribute_errors():
    with pytest.raises(TypeError, match="cast: missing attribute 'dtype'"):
        K.cast(np.ones(2))
    with pytest.raises(TypeError, match="unsupported dtype"):
        K.cast(np.ones(2), dtype="complex64")
    with pytest.raises(TypeError, match="full_like: fill_value must be a number"):
        K.full_like(np.ones(2), fill_value="x")


def test_results_are_dense_tensors_that_share_memory_with_numpy(rng):
    x = values((4,), np.float32, rng)
    out = K.relu(x)
    assert isinstance(out, DenseTensor)
    arr = np.asarray(out)
    arr[0] = 123.0
    assert out.numpy()[0] == 123.0

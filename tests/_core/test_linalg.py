"""fastop._core.linalg: matmul and fc against their numpy twins (tests/reference/linalg.py)
over dtypes, shapes (1-D, batched, broadcast, empty, k = 0) and layouts (transposed,
strided, reversed and broadcast views), plus shape inference and errors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fastop._core import linalg
from fastop._core.storage import from_numpy
from fastop._threads import get_num_threads, set_num_threads
from ..reference import linalg as ref

DTYPES = ["float32", "float64", "int32", "int64"]
TOL = {"float32": dict(rtol=2e-5, atol=2e-5), "float64": dict(rtol=1e-12, atol=1e-12),
       "int32": dict(rtol=0, atol=0), "int64": dict(rtol=0, atol=0)}


def data(shape, dtype, seed=0):
    """Random values: small integers for int dtypes (no overflow), normals for floats."""
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(-4, 5, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def check(got, expected, dtype):
    got = np.asarray(got)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, **TOL[dtype])


def layout(a, kind):
    """`a`, or for "broadcast" its first row repeated, in another memory layout."""
    if kind == "contiguous":
        return np.ascontiguousarray(a)
    if kind == "transposed":      # column-major last two dims: a BLAS trans flag
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)
    if kind == "strided":         # every other element of a larger array
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        big[..., ::2] = a
        return big[..., ::2]
    if kind == "padded":          # rows of a wider array: a leading dim > cols
        big = np.zeros(a.shape[:-1] + (a.shape[-1] + 3,), a.dtype)
        big[..., :a.shape[-1]] = a
        return big[..., :a.shape[-1]]
    if kind == "reversed":        # negative strides: copied before BLAS
        return np.ascontiguousarray(a[..., ::-1, ::-1])[..., ::-1, ::-1]
    if kind == "broadcast":       # zero row stride (repeated rows): copied before BLAS
        return np.broadcast_to(a[..., :1, :], a.shape)
    raise ValueError(kind)


LAYOUTS = ["contiguous", "transposed", "strided", "padded", "reversed", "broadcast"]

# (x shape, y shape) of op(x), op(y): before the transpose flags are undone.
MATMUL_CASES = {
    "vec.vec": ((3,), (3,)),
    "vec.mat": ((3,), (3, 4)),
    "mat.vec": ((2, 3), (3,)),
    "mat.mat": ((2, 3), (3, 4)),
    "row.col": ((1, 5), (5, 1)),
    "batch.mat": ((5, 2, 3), (3, 4)),
    "mat.batch": ((2, 3), (5, 3, 4)),
    "batch.batch": ((5, 2, 3), (5, 3, 4)),
    "broadcast-batch": ((2, 1, 2, 3), (3, 3, 4)),
    "vec.batch": ((3,), (5, 3, 4)),
    "batch.vec": ((5, 2, 3), (3,)),
    "k=0": ((2, 0), (0, 4)),
    "m=0": ((0, 3), (3, 4)),
    "n=0": ((2, 3), (3, 0)),
    "empty-batch": ((0, 2, 3), (3, 4)),
    "vec.vec k=0": ((0,), (0,)),
}


def physical(a, transpose):
    """The operand to pass so that the transpose flag gives back `a`."""
    return np.ascontiguousarray(np.swapaxes(a, -1, -2)) if transpose and a.ndim > 1 else a


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", MATMUL_CASES, ids=str)
@pytest.mark.parametrize("tx,ty", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["NN", "TN", "NT", "TT"])
def test_matmul_matches_numpy(dtype, case, tx, ty):
    xs, ys = MATMUL_CASES[case]
    x, y = physical(data(xs, dtype, 1), tx), physical(data(ys, dtype, 2), ty)
    expected = ref.matmul(x, y, transpose_x=tx, transpose_y=ty)
    check(linalg.matmul(x, y, transpose_x=tx, transpose_y=ty), expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_layout", LAYOUTS)
@pytest.mark.parametrize("y_layout", LAYOUTS)
def test_matmul_reads_any_layout(dtype, x_layout, y_layout):
    x = layout(data((3, 4, 5), dtype, 1), x_layout)
    y = layout(data((3, 5, 6), dtype, 2), y_layout)
    check(linalg.matmul(x, y), ref.matmul(x, y), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_of_a_transposed_view_with_the_flag(dtype):
    x = data((6, 4), dtype)
    y = data((6, 3), dtype)
    check(linalg.matmul(x.T, y.T, transpose_y=True), ref.matmul(x.T, y.T, transpose_y=True),
          dtype)
    check(linalg.matmul(x[::2], y[::2], transpose_x=True),
          ref.matmul(x[::2], y[::2], transpose_x=True), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_batch_views_that_do_not_merge_or_go_backwards(dtype):
    # A batch slice of a permuted array: batch dims with unrelated strides.
    x = data((4, 3, 2, 5), dtype).transpose(1, 0, 2, 3)[:, ::2]
    y = data((3, 2, 5, 6), dtype)
    check(linalg.matmul(x, y), ref.matmul(x, y), dtype)
    # a batch walked backwards: negative batch strides
    x, y = data((5, 2, 3), dtype)[::-1], data((5, 3, 4), dtype)[::-2]
    check(linalg.matmul(x[:3], y), ref.matmul(x[:3], y), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mnk", [(70, 300, 600), (33, 129, 257)], ids=lambda s: "x".join(map(str, s)))
def test_matmul_across_the_blocking_of_the_integer_loop(dtype, mnk):
    m, k, n = mnk
    x, y = data((m, k), dtype, 3), data((k, n), dtype, 4)
    tol = TOL[dtype] if dtype != "float32" else dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(linalg.matmul(x, y)), ref.matmul(x, y), **tol)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["int32", "float32"])
@pytest.mark.parametrize("mkn", [(512, 96, 128), (128, 96, 512)], ids=["rows", "columns"])
def test_threaded_paths_match_single_threaded(threads, dtype, mkn):
    # 6.3 M multiply-adds: 2 threads each take a block of rows (or columns) of the output
    m, k, n = mkn
    before = get_num_threads()
    set_num_threads(threads)
    try:
        x, y, b = data((m, k), dtype, 5), data((k, n), dtype, 6), data((n,), dtype, 7)
        tol = TOL[dtype] if dtype != "float32" else dict(rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(linalg.matmul(x, y)), ref.matmul(x, y), **tol)
        for act in ("relu", "tanh", "sigmoid") if dtype == "float32" else ("relu",):
            np.testing.assert_allclose(np.asarray(linalg.fc(x, y, b, activation=act)),
                                       ref.fc(x, y, b, act), **tol)
    finally:
        set_num_threads(before)


@settings(max_examples=60, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                 max_side=3),
       mnk=st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)),
       flags=st.tuples(st.booleans(), st.booleans()))
def test_matmul_broadcasts_batch_dims_like_numpy(shapes, mnk, flags):
    (bx, by), _ = shapes
    m, n, k = mnk
    tx, ty = flags
    x = physical(data(bx + (m, k), "float64", 1), tx)
    y = physical(data(by + (k, n), "float64", 2), ty)
    check(linalg.matmul(x, y, transpose_x=tx, transpose_y=ty),
          ref.matmul(x, y, transpose_x=tx, transpose_y=ty), "float64")


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_out_may_be_strided_or_an_input(dtype):
    x, y = data((4, 4), dtype, 1), data((4, 4), dtype, 2)
    expected = ref.matmul(x, y)
    out = np.zeros((4, 8), dtype)[:, ::2]
    linalg.matmul(x, y, out=out)
    check(out, expected, dtype)
    linalg.matmul(x, y, out=x)          # in place: computed aside, then copied
    check(x, expected, dtype)


def test_matmul_takes_dense_tensors_and_returns_one():
    x, y = from_numpy(data((2, 3), "float32")), from_numpy(data((3, 4), "float32"))
    out = linalg.matmul(x, y)
    assert out.shape == [2, 4] and out.dtype == "float32" and out.is_contiguous()


@pytest.mark.parametrize("xs,ys,flags,expected", [
    ([None, 3], [3, 4], {}, [None, 4]),
    ([None, 2, 3], [5, 3, 4], {}, [5, 2, 4]),
    ([1, 2, 3], [None, 3, 4], {}, [None, 2, 4]),
    ([3, None], [3, 4], {"transpose_x": True}, [None, 4]),
    ([None], [None], {}, []),
])
def test_matmul_meta_propagates_unknown_dims(xs, ys, flags, expected):
    [(shape, dtype)] = linalg.matmul.meta((xs, "float32"), (ys, "float32"), **flags)
    assert shape == expected and dtype == "float32"


@pytest.mark.parametrize("x,y,kwargs,error,message", [
    ((2, 3), (4, 5), {}, ValueError, r"fastop::matmul: input shapes are incompatible; "
                                     r"got x: shape \[2, 3\] float32, y: shape \[4, 5\]"),
    ((2, 3), (2, 3), {}, ValueError, r"incompatible.*x: shape \[2, 3\].*y: shape \[2, 3\]"),
    ((2, 3), (2, 3), {"transpose_y": True}, None, None),
    ((3,), (4,), {}, ValueError, r"fastop::matmul: .*incompatible.*\[3\].*\[4\]"),
    ((2, 2, 3), (3, 3, 4), {}, ValueError, r"fastop::matmul: input shapes do not broadcast"
                                           r".*\[2, 2, 3\].*\[3, 3, 4\]"),
    ((), (3,), {}, ValueError, r"fastop::matmul: input shapes are incompatible; got x: "
                               r"shape \[\]"),
])
def test_matmul_shape_errors_name_the_op_and_the_shapes(x, y, kwargs, error, message):
    a, b = np.ones(x, "float32"), np.ones(y, "float32")
    if error is None:
        check(linalg.matmul(a, b, **kwargs), ref.matmul(a, b, **kwargs), "float32")
    else:
        with pytest.raises(error, match=message):
            linalg.matmul(a, b, **kwargs)


def test_matmul_dtype_errors_name_the_op_and_the_dtypes():
    with pytest.raises(TypeError, match=r"fastop::matmul: input dtypes are not accepted; "
                                        r"got x: shape \[2, 3\] float32, y: shape \[3, 2\] "
                                        r"float64"):
        linalg.matmul(np.ones((2, 3), "float32"), np.ones((3, 2), "float64"))
    with pytest.raises(TypeError, match=r"fastop::matmul: dtype bool is not supported"):
        linalg.matmul(np.ones((2, 3), bool), np.ones((3, 2), bool))


def test_matmul_rejects_unknown_attributes():
    with pytest.raises(TypeError, match=r"fastop::matmul: unknown attribute\(s\) "
                                        r"\['transpose'\]"):
        linalg.matmul(np.ones((2, 2)), np.ones((2, 2)), transpose=True)


# ----------------------------------------------------------------------------- fc

FC_SHAPES = {"2-D": (4, 5), "1-D": (5,), "3-D": (2, 3, 5), "no rows": (0, 5)}


# tanh/sigmoid of an integer product is an error (test_fc_dtype_errors).
FC_ACTIVATIONS = [(dtype, act) for dtype in DTYPES for act in ("", "tanh", "sigmoid", "relu")
                  if dtype.startswith("float") or act in ("", "relu")]


@pytest.mark.parametrize("dtype,activation", FC_ACTIVATIONS,
                         ids=[f"{d}-{a or 'none'}" for d, a in FC_ACTIVATIONS])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("shape", FC_SHAPES, ids=str)
def test_fc_matches_numpy(dtype, activation, bias, shape):
    x, w = data(FC_SHAPES[shape], dtype, 1), data((5, 6), dtype, 2)
    b = data((6,), dtype, 3) if bias else None
    expected = ref.fc(x, w, b, activation)
    got = linalg.fc(x, w, b, activation=activation) if bias else \
        linalg.fc(x, w, activation=activation)
    check(got, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_layout", LAYOUTS)
@pytest.mark.parametrize("w_layout", ["contiguous", "transposed", "strided", "reversed"])
def test_fc_reads_any_layout(dtype, x_layout, w_layout):
    x = layout(data((7, 5), dtype, 1), x_layout)
    w = layout(data((5, 6), dtype, 2), w_layout)
    b = data((12,), dtype, 3)[::2]
    check(linalg.fc(x, w, b, activation="relu"), ref.fc(x, w, b, "relu"), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fc_3d_input_whose_rows_do_not_merge(dtype):
    x = data((3, 2, 5), dtype).transpose(1, 0, 2)      # (2, 3, 5), rows not one stride
    w, b = data((5, 4), dtype, 2), data((4,), dtype, 3)
    check(linalg.fc(x, w, b, activation="tanh"), ref.fc(x, w, b, "tanh"), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fc_with_k_zero_is_the_activated_bias(dtype):
    x, w, b = np.ones((3, 0), dtype), np.ones((0, 4), dtype), data((4,), dtype)
    check(linalg.fc(x, w, b, activation="relu"), ref.fc(x, w, b, "relu"), dtype)
    check(linalg.fc(x, w), np.zeros((3, 4), dtype), dtype)


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_fc_out_may_be_strided_or_an_input(dtype):
    x, w, b = data((4, 4), dtype, 1), data((4, 4), dtype, 2), data((4,), dtype, 3)
    expected = ref.fc(x, w, b, "relu")
    out = np.zeros((4, 8), dtype)[:, 1::2]
    linalg.fc(x, w, b, activation="relu", out=out)
    check(out, expected, dtype)
    linalg.fc(x, w, b, activation="relu", out=x)
    check(x, expected, dtype)


def test_fc_bias_may_be_none_or_omitted():
    x, w = data((2, 3), "float32"), data((3, 4), "float32")
    expected = ref.fc(x, w)
    check(linalg.fc(x, w, None), expected, "float32")
    check(linalg.fc(x, w), expected, "float32")
    assert linalg.fc.input_names == ("x", "w", "b?")
    with pytest.raises(TypeError, match="fastop::fc: input 'x' is required, got None"):
        linalg.fc(None, w)


def test_fc_meta():
    assert linalg.fc.meta(([None, 3], "float64"), ([3, 4], "float64"), ([4], "float64")) \
        == [([None, 4], "float64")]
    assert linalg.fc.meta(([2, 7, 3], "float32"), ([3, None], "float32"), None) \
        == [([2, 7, None], "float32")]


@pytest.mark.parametrize("x,w,b,kwargs,error,message", [
    ((2, 3), (4, 5), (5,), {}, ValueError,
     r"fastop::fc: input shapes are incompatible; got x: shape \[2, 3\] float32, "
     r"w: shape \[4, 5\] float32"),
    ((2, 3), (3, 5), (4,), {}, ValueError, r"fastop::fc: .*incompatible.*b: shape \[4\]"),
    ((2, 3), (3, 5), (1, 5), {}, ValueError, r"fastop::fc: .*incompatible.*\[1, 5\]"),
    ((2, 3), (3,), None, {}, ValueError, r"fastop::fc: .*incompatible.*w: shape \[3\]"),
    ((2, 3), (3, 5), None, {"activation": "gelu"}, ValueError,
     r"fastop::fc: activation must be one of \['', 'tanh', 'sigmoid', 'relu'\], got 'gelu'"),
])
def test_fc_errors_name_the_op_and_the_shapes(x, w, b, kwargs, error, message):
    args = [np.ones(s, "float32") for s in (x, w, b) if s is not None]
    with pytest.raises(error, match=message):
        linalg.fc(*args, **kwargs)


def test_fc_dtype_errors():
    x, w = np.ones((2, 3), "float32"), np.ones((3, 4), "float32")
    with pytest.raises(TypeError, match=r"fastop::fc: input dtypes are not accepted.*"
                                        r"b: shape \[4\] float64"):
        linalg.fc(x, w, np.ones(4))
    with pytest.raises(ValueError, match=r"fastop::fc: an attribute is invalid for these "
                                         r"inputs; got x: shape \[2, 3\] int32"):
        linalg.fc(x.astype("int32"), w.astype("int32"), activation="tanh")

"""The registered shape ops (fastop::reshape, transpose, concat, slice, gather, squeeze,
unsqueeze and the backward ops slice_grad, gather_grad): definitions, which are views,
values against the numpy twins, meta with unknown dims, errors, and gradient rules run
directly on DenseTensors against central finite differences in float64."""
from functools import partial

import numpy as np
import pytest

from fastop._core.storage import from_numpy
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule
from ..reference import shape as ref


def op(name):
    return registry.get(f"fastop::{name}")


check_rule = partial(check_grad_rule, wrt=(0,))


def rand(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


def meta(name, *metas, **attrs):
    opdef = op(name)
    return opdef.infer_meta(metas, opdef.check_attrs(attrs))


# ----------------------------------------------------------------------------- definitions

def test_ops_are_defined_with_their_signatures():
    assert op("reshape").signature() == "fastop::reshape(x, shape) -> (out)"
    assert op("transpose").signature() == "fastop::transpose(x, perm) -> (out)"
    assert op("concat").signature() == "fastop::concat(xs*, axis=0) -> (out)"
    assert op("slice").signature() == \
        "fastop::slice(x, axes, starts, ends, strides=[], decrease_axis=[]) -> (out)"
    assert op("gather").signature() == "fastop::gather(x, index, axis=0) -> (out)"
    assert op("squeeze").signature() == "fastop::squeeze(x, axis=None) -> (out)"
    assert op("unsqueeze").signature() == "fastop::unsqueeze(x, axis) -> (out)"
    assert op("gather").differentiable_inputs == ("x",)


# ----------------------------------------------------------------------------- views

VIEW_CASES = [
    ("reshape", (2, 3, 4), {"shape": [4, -1]}),
    ("reshape", (2, 3, 4), {"shape": [0, 12]}),
    ("reshape", (6,), {"shape": [1, 2, 1, 3]}),
    ("reshape", (), {"shape": [1, 1]}),
    ("transpose", (2, 3, 4), {"perm": [2, 0, 1]}),
    ("transpose", (2, 3), {"perm": [-1, 0]}),
    ("slice", (5, 6), {"axes": [1], "starts": [1], "ends": [5]}),
    ("slice", (5, 6), {"axes": [0, 1], "starts": [-4, 0], "ends": [100, 6],
                       "strides": [2, 3]}),
    ("slice", (5, 6), {"axes": [1], "starts": [5], "ends": [0], "strides": [-2]}),
    ("slice", (5, 6), {"axes": [0], "starts": [3], "ends": [1]}),
    ("squeeze", (1, 3, 1, 2), {}),
    ("squeeze", (1, 3, 1, 2), {"axis": [2, 1]}),
    ("squeeze", (1, 3, 1, 2), {"axis": -4}),
    ("unsqueeze", (3, 2), {"axis": [0, -1]}),
    ("unsqueeze", (3, 2), {"axis": 1}),
    ("unsqueeze", (), {"axis": [0, 0]}),
]


@pytest.mark.parametrize("name,shape,attrs", VIEW_CASES, ids=str)
def test_view_ops_share_memory_and_match_numpy(name, shape, attrs):
    base = rand(*shape)
    for x in (base, np.asfortranarray(base)):   # C order, and a non-C-contiguous layout
        t = from_numpy(x)
        out = op(name)(t, **attrs)
        want = getattr(ref, name)(x, **attrs)
        assert out.shape == list(want.shape) and out.dtype == t.dtype
        np.testing.assert_array_equal(np.asarray(out), want)
        if name != "reshape" or x.flags.c_contiguous:
            if out.size:
                assert np.shares_memory(np.asarray(out), x)
            assert meta(name, TensorMeta(list(x.shape), "float64"), **attrs) == \
                [TensorMeta(list(want.shape), "float64")]


def test_view_of_a_view_writes_through():
    x = np.zeros((4, 6))
    out = op("slice")(op("transpose")(x, perm=[1, 0]), axes=[0], starts=[1], ends=[6],
                      strides=[2])
    np.asarray(out)[:] = 7.0
    np.testing.assert_array_equal(x[:, 1::2], 7.0)


def test_concat_and_gather_copy_and_match_numpy():
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((2, n, 3)) for n in (1, 4, 2)]
    for axis in (1, -2):
        out = op("concat")([from_numpy(x) for x in xs], axis=axis)
        np.testing.assert_array_equal(np.asarray(out), ref.concat(xs, axis=axis))
    ints = [np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((1, 3), np.int32)]
    np.testing.assert_array_equal(np.asarray(op("concat")(ints)), ref.concat(ints))
    x, index = rand(3, 5), np.array([[4, 0], [0, 2]])
    np.testing.assert_array_equal(np.asarray(op("gather")(x, index, axis=1)),
                                  ref.gather(x, index, axis=1))


def test_meta_propagates_unknown_dims():
    f32 = "float32"
    assert meta("reshape", TensorMeta([None, 3, 4], f32), shape=[0, -1]) == \
        [TensorMeta([None, 12], f32)]
    assert meta("reshape", TensorMeta([None, 3, 4], f32), shape=[-1, 4]) == \
        [TensorMeta([None, 4], f32)]
    assert meta("transpose", TensorMeta([None, 3], f32), perm=[1, 0]) == \
        [TensorMeta([3, None], f32)]
    assert meta("slice", TensorMeta([None, 10], f32), axes=[1], starts=[2], ends=[-1],
                strides=[3]) == [TensorMeta([None, 3], f32)]
    assert meta("concat", [TensorMeta([None, 2], f32), TensorMeta([None, 3], f32)],
                axis=1) == [TensorMeta([None, 5], f32)]
    assert meta("concat", [TensorMeta([None, 2], f32), TensorMeta([4, 2], f32)]) == \
        [TensorMeta([None, 2], f32)]
    assert meta("squeeze", TensorMeta([None, 1, 3], f32)) == [TensorMeta([None, 3], f32)]
    assert meta("unsqueeze", TensorMeta([None, 3], f32), axis=[1]) == \
        [TensorMeta([None, 1, 3], f32)]
    assert meta("gather", TensorMeta([None, 5], f32), TensorMeta([2], "int64"), axis=1) == \
        [TensorMeta([None, 2], f32)]


def test_bad_input_names_the_op():
    x = rand(2, 3)
    with pytest.raises(ValueError, match=r"fastop::reshape: the new shape must hold as many "
                                         r"elements as x; got x: shape \[2, 3\] float64, "
                                         r"shape=\[4, -1\]"):
        op("reshape")(x, shape=[4, -1])
    with pytest.raises(ValueError, match=r"fastop::reshape: shape may hold one -1"):
        op("reshape")(x, shape=[-1, -1])
    with pytest.raises(ValueError, match=r"fastop::transpose: perm must be a permutation of "
                                         r"x's axes; .*perm=\[0, 0\]"):
        op("transpose")(x, perm=[0, 0])
    with pytest.raises(ValueError, match=r"fastop::slice: axes, starts, ends"):
        op("slice")(x, axes=[0], starts=[0, 1], ends=[1])
    with pytest.raises(ValueError, match=r"fastop::slice: each axis must be in \[-ndim, "
                                         r"ndim\) of x.*axes=\[2\]"):
        op("slice")(x, axes=[2], starts=[0], ends=[1])
    with pytest.raises(ValueError, match=r"fastop::slice: an index \(decrease_axis\) is out "
                                         r"of range"):
        op("slice")(x, axes=[0], starts=[2], ends=[3], decrease_axis=[0])
    with pytest.raises(TypeError, match=r"fastop::concat: all inputs need one dtype; xs\[0\] "
                                        r"is float64, xs\[1\] is float32"):
        op("concat")([x, x.astype(np.float32)])
    with pytest.raises(ValueError, match=r"fastop::concat: shapes must match except along "
                                         r"axis 0; xs\[0\] has \[2, 3\], xs\[1\] has \[2, 2\]"):
        op("concat")([x, rand(2, 2)])
    with pytest.raises(ValueError, match=r"fastop::unsqueeze: each axis must be in "
                                         r"\[-ndim-1, ndim\].*axis=4"):
        op("unsqueeze")(x, axis=4)
    with pytest.raises(ValueError, match=r"fastop::gather: each index must be in \[-n, n\)"):
        op("gather")(x, np.array([2]))


# ----------------------------------------------------------------------------- gradients

@pytest.mark.parametrize("name,shape,attrs", VIEW_CASES, ids=str)
def test_view_op_grads(name, shape, attrs):
    check_rule(f"fastop::{name}", [rand(*shape)], attrs)


def test_slice_grad_is_differentiable_again():
    attrs = {"axes": [1], "starts": [0], "ends": [6], "strides": [2]}
    grads = check_rule("fastop::slice_grad", [rand(4, 6), rand(4, 3)], attrs, wrt=(1,))
    assert grads[0] is None


def test_concat_grad_slices_dy():
    xs = [rand(2, n, seed=n) for n in (1, 3, 2)]
    dy = rand(2, 6, seed=9)
    grads = op("concat").grad_rule.fn([from_numpy(x) for x in xs], from_numpy(dy), axis=-1)
    for g, want in zip(grads, np.split(dy, [1, 4], axis=1)):
        np.testing.assert_array_equal(np.asarray(g), want)


def test_concat_grad_allows_one_unknown_size():
    """In a static graph one input's size along the axis may be unknown (None)."""
    from types import SimpleNamespace
    dy = rand(2, 9, seed=4)
    for sizes in ([2, None, 4], [None, 3, 4], [2, 3, None]):
        xs = [SimpleNamespace(shape=[2, s]) for s in sizes]
        grads = op("concat").grad_rule.fn(xs, from_numpy(dy), axis=1)
        for g, want in zip(grads, np.split(dy, [2, 5], axis=1)):
            np.testing.assert_array_equal(np.asarray(g), want)
    with pytest.raises(ValueError, match=r"fastop::concat: the gradient needs the size"):
        op("concat").grad_rule.fn([SimpleNamespace(shape=[None])] * 2, from_numpy(dy[0]),
                                  axis=0)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_and_gather_grad_grads(axis):
    index = np.array([[2, 0], [2, 1]])
    x = rand(3, 3, 3)
    grads = check_rule("fastop::gather", [x, index], {"axis": axis})
    assert grads[1] is None
    dout = np.asarray(op("gather")(x, index, axis=axis))
    grads = check_rule("fastop::gather_grad", [x, index, rand(*dout.shape)], {"axis": axis},
                       wrt=(2,))
    assert grads[0] is None and grads[1] is None


# ----------------------------------------------------------------------------- view kernels

@pytest.mark.parametrize("x_shape, target", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 3), (2, 3)),
                                             ((), (2, 2)), ((4, 1, 2), (4, 0, 2))])
def test_view_kernels_broadcast_like_numpy_without_copying(x_shape, target):
    from fastop._core import views
    x = rand(*x_shape) if x_shape else np.array(1.5)
    want = np.broadcast_to(x, target)
    for out in (views.expand_as(x, np.zeros(target)),
                views.broadcast_to(from_numpy(x), shape=list(target))):
        got = np.asarray(out)
        np.testing.assert_array_equal(got, want)
        assert got.strides == want.strides and out.readonly
        assert out.data_ptr == from_numpy(x).data_ptr


def test_broadcast_to_view_keeps_dims_given_as_minus_one():
    from fastop._core import views
    x = rand(3, 1)
    out = views.broadcast_to(x, shape=[2, -1, 4])
    np.testing.assert_array_equal(np.asarray(out), np.broadcast_to(x, (2, 3, 4)))


def test_view_kernel_errors_name_the_op_and_shapes():
    from fastop._core import views
    with pytest.raises(ValueError, match=r"fastop::expand_as: x's shape must broadcast to the "
                                         r"target shape .*x: shape \[2, 3\] float64, y: "
                                         r"shape \[3, 3\]"):
        views.expand_as(rand(2, 3), rand(3, 3))
    with pytest.raises(ValueError, match=r"fastop::broadcast_to: x's shape must broadcast.*"
                                         r"shape=\[-1, 3\]"):
        views.broadcast_to(rand(3), shape=[-1, 3])       # -1 at a new leading dim
    with pytest.raises(ValueError, match=r"fastop::broadcast_to: the target shape holds dims "
                                         r">= 0, or -1"):
        views.broadcast_to(rand(3), shape=[-2])
    with pytest.raises(TypeError, match=r"fastop::expand_as: expected 2 inputs \(x, y\), "
                                        r"got 1"):
        views.expand_as(rand(3))

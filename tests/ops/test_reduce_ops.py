"""The registered reduction ops (fastop::sum, mean, max, argmax, sum_to_shape,
broadcast_to, expand_as): definitions, meta with unknown dims, views, and gradient rules
run directly on DenseTensors against central finite differences in float64."""
from functools import partial

import numpy as np
import pytest

import fastop
from fastop._core.storage import from_numpy
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule
from ..reference import reduce as ref

F32 = "float32"


check_rule = partial(check_grad_rule, wrt=(0,))


def rand(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


# ----------------------------------------------------------------------------- definitions

def test_ops_are_defined_with_their_signatures():
    sig = {n: registry.get(f"fastop::{n}").signature() for n in
           ("sum", "mean", "max", "argmax", "sum_to_shape", "broadcast_to", "expand_as")}
    assert sig["sum"] == "fastop::sum(x, axis=None, keepdim=False) -> (out)"
    assert sig["max"] == "fastop::max(x, axis=None, keepdim=False) -> (out)"
    assert sig["argmax"] == "fastop::argmax(x, axis=None, keepdim=False) -> (out)"
    assert sig["sum_to_shape"] == "fastop::sum_to_shape(x, shape) -> (out)"
    assert sig["broadcast_to"] == "fastop::broadcast_to(x, shape) -> (out)"
    assert sig["expand_as"] == "fastop::expand_as(x, y) -> (out)"
    assert registry.get("fastop::mean").dtypes == ["float32", "float64"]
    assert registry.get("fastop::argmax").differentiable_inputs == ()


def test_meta_propagates_unknown_dims():
    def meta(name, *metas, **attrs):
        op = registry.get(f"fastop::{name}")
        return op.infer_meta([TensorMeta(*m) for m in metas], op.check_attrs(attrs))

    assert meta("sum", ([None, 3, 4], F32), axis=[1, 2]) == [TensorMeta([None], F32)]
    assert meta("mean", ([None, 3], F32), keepdim=True) == [TensorMeta([1, 1], F32)]
    assert meta("argmax", ([None, 3], F32), axis=1) == [TensorMeta([None], "int64")]
    assert meta("sum_to_shape", ([None, 3], F32), shape=[1, 3]) == [TensorMeta([1, 3], F32)]
    assert meta("broadcast_to", ([None, 1], F32), shape=[-1, 5]) == \
        [TensorMeta([None, 5], F32)]
    assert meta("broadcast_to", ([3], F32), shape=[2, 3]) == [TensorMeta([2, 3], F32)]
    assert meta("expand_as", ([1, 3], F32), ([None, 3], "float64")) == \
        [TensorMeta([None, 3], F32)]
    assert meta("expand_as", ([4, 1], F32), ([None, None], F32)) == \
        [TensorMeta([4, None], F32)]


def test_calling_the_ops_computes():
    x = rand(3, 4)
    np.testing.assert_allclose(np.asarray(registry.get("fastop::sum")(x, axis=1)),
                               ref.sum(x, 1))
    np.testing.assert_allclose(np.asarray(registry.get("fastop::mean")(x, [0, 1], True)),
                               ref.mean(x, [0, 1], True))
    assert np.asarray(registry.get("fastop::argmax")(x, axis=0)).dtype == np.int64


# ----------------------------------------------------------------------------- views

@pytest.mark.parametrize("shapes", [((3,), [2, 3]), ((2, 1), [2, 5]), ((1, 3), [-1, 3]),
                                    ((), [2, 2]), ((4, 1, 2), [3, -1, 6, 2])], ids=str)
def test_broadcast_to_is_a_read_only_view(shapes):
    shape, target = shapes
    x = from_numpy(rand(*shape) if shape else np.float64(1.5).reshape(()))
    out = registry.get("fastop::broadcast_to")(x, shape=target)
    want = ref.broadcast_to(np.asarray(x), target)
    assert out.shape == list(want.shape)
    np.testing.assert_array_equal(np.asarray(out), want)
    assert out.readonly and out.data_ptr == x.data_ptr
    y = registry.get("fastop::expand_as")(x, np.zeros(want.shape, np.float32))
    assert y.shape == list(want.shape) and y.dtype == x.dtype and y.data_ptr == x.data_ptr


def test_broadcast_errors_name_the_op():
    with pytest.raises(ValueError, match=r"fastop::broadcast_to: x's shape must broadcast to "
                                         r"the target shape \(numpy's rules\); got x: shape "
                                         r"\[2, 3\] float64, shape=\[2, 4\]"):
        registry.get("fastop::broadcast_to")(rand(2, 3), shape=[2, 4])
    with pytest.raises(ValueError, match=r"fastop::broadcast_to: x's shape must broadcast"):
        registry.get("fastop::broadcast_to")(rand(2, 3), shape=[3])
    with pytest.raises(ValueError, match=r"fastop::expand_as: x's shape must broadcast"):
        registry.get("fastop::expand_as")(rand(2, 3), rand(3, 2))
    with pytest.raises(ValueError, match=r"fastop::sum: each axis must be in \[-ndim, ndim\).*axis=5"):
        registry.get("fastop::sum")(rand(2, 3), axis=5)


# ----------------------------------------------------------------------------- gradients

@pytest.mark.parametrize("axis,keepdim", [(None, False), ([], True), (1, False), (-1, True),
                                          ([0, 2], False), ([2, 0], True)], ids=str)
def test_sum_grad(axis, keepdim):
    check_rule("fastop::sum", [rand(2, 3, 2)], {"axis": axis, "keepdim": keepdim})


def test_sum_grad_of_a_scalar():
    check_rule("fastop::sum", [np.array(2.5)], {})


@pytest.mark.parametrize("axis,keepdim", [(None, False), (1, False), ([0, 2], True)], ids=str)
def test_mean_grad(axis, keepdim):
    check_rule("fastop::mean", [rand(2, 3, 2)], {"axis": axis, "keepdim": keepdim})


@pytest.mark.parametrize("axis,keepdim", [(None, False), (1, False), ([0, 2], True)], ids=str)
def test_max_grad(axis, keepdim):
    check_rule("fastop::max", [rand(2, 3, 2)], {"axis": axis, "keepdim": keepdim})


def test_max_grad_splits_ties_evenly():
    op = registry.get("fastop::max")
    x = from_numpy(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]]))
    out = op(x, axis=1)
    dx = op.grad_rule.fn(x, out, from_numpy(np.array([1.0, 4.0])), axis=1, keepdim=False)
    np.testing.assert_allclose(np.asarray(dx), [[0, 0.5, 0.5], [4, 0, 0]])


@pytest.mark.parametrize("shapes", [((2, 3, 4), [3, 4]), ((2, 3, 4), [1, 4]),
                                    ((2, 3, 4), [2, 1, 1]), ((2, 3), []), ((2, 3), [-1, 1])],
                         ids=str)
def test_sum_to_shape_grad(shapes):
    shape, target = shapes
    check_rule("fastop::sum_to_shape", [rand(*shape)], {"shape": target})


@pytest.mark.parametrize("shapes", [((3,), [2, 3]), ((2, 1), [2, 5]), ((1, 3), [-1, 3]),
                                    ((4, 1, 2), [3, 4, 6, 2])], ids=str)
def test_broadcast_to_and_expand_as_grads(shapes):
    shape, target = shapes
    x = rand(*shape)
    check_rule("fastop::broadcast_to", [x], {"shape": target})
    like = ref.broadcast_to(x, target)
    grads = check_rule("fastop::expand_as", [x, np.zeros(like.shape)], {})
    assert grads[1] is None


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
def test_a_0d_tensor_reduces_over_axis_0_or_minus_1_to_itself(name):
    """PaddlePaddle's 0-D rule: axis None, [], 0 or -1 of a 0-D x give a 0-D result
    (x's value) and a 0-D gradient; any other axis is refused."""
    fn = getattr(fastop, name)
    x = fastop.to_tensor(2.5, stop_gradient=False)
    for axis in (None, [], 0, -1):
        out = fn(x, axis=axis)
        assert out.shape == [] and out.item() == 2.5
        out.backward()
    assert x.grad.shape == [] and x.grad.item() == 4.0
    assert fn(x, axis=0, keepdim=True).shape == []
    with pytest.raises(ValueError, match="0 or -1 for a 0-D x|axis"):
        fn(x, axis=1)
    y = fastop.to_tensor([1.0, 2.0, 3.0])
    assert fn(y, axis=0).shape == [] and fn(y.reshape([1, 3]), keepdim=True).shape == [1, 1]

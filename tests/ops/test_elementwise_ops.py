"""The registered elementwise ops: definitions, meta, the generic call path, and where the
gradient rules route their gradients (every rule against finite differences, first and
second order, is tests/ops/test_every_op.py's opcheck over the ops' samples)."""
import numpy as np
import pytest

from fastop._core.storage import from_numpy
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule
from ..reference import elementwise as ref


check_rule = check_grad_rule


def rand(*shape, seed=1):
    return np.array(np.random.default_rng(seed).standard_normal(shape))


# ----------------------------------------------------------------------------- definitions

def test_signatures_of_the_ops_with_attributes_or_no_inputs():
    assert registry.get("fastop::where").signature() == \
        "fastop::where(condition, x, y) -> (out)"
    assert registry.get("fastop::cast").signature() == "fastop::cast(x, dtype) -> (out)"
    assert registry.get("fastop::full_like").signature() == \
        "fastop::full_like(x, fill_value=0.0) -> (out)"
    assert registry.get("fastop::full").signature() == \
        "fastop::full(, shape, fill_value=0.0, dtype=fastop.float32) -> (out)"


def test_dtypes_and_differentiability():
    assert registry.get("fastop::tanh").dtypes == ["float32", "float64"]
    assert registry.get("fastop::add").dtypes == ["uint8", "int8", "int16", "int32", "int64",
                                                  "float32", "float64"]
    assert registry.get("fastop::equal").dtypes == ["bool", "uint8", "int8", "int16", "int32",
                                                    "int64", "float32", "float64"]
    assert registry.get("fastop::equal").differentiable_inputs == ()
    assert registry.get("fastop::full_like").differentiable_inputs == ()
    assert registry.get("fastop::where").differentiable_inputs == ("x", "y")
    assert registry.get("fastop::relu_grad").differentiable_inputs == ("dy",)


def test_meta_broadcasts_with_unknown_dims():
    def meta(name, *metas, **attrs):
        op = registry.get(f"fastop::{name}")
        return op.infer_meta([TensorMeta(*m) for m in metas], op.check_attrs(attrs))

    assert meta("add", ([None, 3], "float32"), ([3], "float32")) == \
        [TensorMeta([None, 3], "float32")]
    assert meta("less_than", ([None, 1], "int64"), ([1, 5], "int64")) == \
        [TensorMeta([None, 5], "bool")]
    assert meta("where", ([None, 1], "bool"), ([4], "float64"), ([1], "float64")) == \
        [TensorMeta([None, 4], "float64")]
    assert meta("cast", ([None, 2], "float32"), dtype="int32") == \
        [TensorMeta([None, 2], "int32")]
    assert meta("full", shape=[2, 3], fill_value=1, dtype="int64") == \
        [TensorMeta([2, 3], "int64")]


def test_calls_through_the_registry_with_python_scalars():
    x = from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    out = registry.get("fastop::multiply")(x, 2)
    assert out.dtype == "float32"
    np.testing.assert_array_equal(np.asarray(out), np.asarray(x) * 2)
    mask = registry.get("fastop::greater_equal")(x, 2.5)
    np.testing.assert_array_equal(np.asarray(mask), np.asarray(x) >= 2.5)


def test_full_creates_filled_tensors():
    full = registry.get("fastop::full")
    out = full(shape=[2, 3], fill_value=7, dtype="int64")
    assert out.dtype == "int64" and out.shape == [2, 3]
    np.testing.assert_array_equal(np.asarray(out), ref.full([2, 3], 7, "int64"))
    np.testing.assert_array_equal(np.asarray(full(shape=[4], fill_value=0.5)),
                                  ref.full([4], 0.5, "float32"))
    assert full(shape=[0, 2]).shape == [0, 2]


def test_dtype_mismatch_through_the_registry_names_op_and_dtypes():
    x = from_numpy(np.ones(3, np.int32))
    y = from_numpy(np.ones(3, np.float64))
    with pytest.raises(TypeError, match=r"add: x and y must have the same dtype.*int32.*float64"):
        registry.get("fastop::add")(x, y)


def test_float32_and_float64_tensors_compute_in_float64():
    x = from_numpy(np.full(3, 0.1, np.float32))
    y = from_numpy(np.full(3, 0.2, np.float64))
    out = registry.get("fastop::add")(x, y)
    assert out.dtype == "float64"
    np.testing.assert_array_equal(np.asarray(out), np.float32(0.1).astype(np.float64) + 0.2)


# ----------------------------------------------------------------------------- gradients
# Every rule against finite differences, first and second order: tests/ops/test_every_op.py
# (opcheck on each op's samples). Here: what a rule must route, beyond matching numbers.

def test_where_gradient_routes_to_the_selected_operand():
    cond = np.random.default_rng(8).integers(0, 2, (3, 4)).astype(bool)
    grads = check_rule("fastop::where", [cond, rand(3, 4, seed=9), rand(4, seed=10)],
                       wrt=[1, 2])
    assert grads[0] is None


def test_cast_gradient_casts_back_to_the_input_dtype():
    op = registry.get("fastop::cast")
    x = from_numpy(rand(2, 3).astype(np.float32))
    g = from_numpy(rand(2, 3, seed=4))
    dx = op.grad_rule.fn(x, g, dtype=op.check_attrs({"dtype": "float64"})["dtype"])
    assert dx.dtype == "float32"
    np.testing.assert_array_equal(np.asarray(dx), np.asarray(g).astype(np.float32))

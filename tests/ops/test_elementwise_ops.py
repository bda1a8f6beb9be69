"""The registered elementwise ops: definitions, meta, the generic call path, and every
gradient rule run directly on DenseTensors against central finite differences of the
forward kernel in float64 (double backward through the *_grad ops included)."""
import numpy as np
import pytest

from fastop._core.storage import from_numpy
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule
from ..reference import elementwise as ref


check_rule = check_grad_rule


def rand(*shape, seed=1, away_from_zero=False):
    x = np.array(np.random.default_rng(seed).standard_normal(shape))
    if away_from_zero:          # keep kinks (abs, relu, sign) out of the differences
        x[np.abs(x) < 0.1] = 0.5
    return x


# ----------------------------------------------------------------------------- definitions

UNARY = ["neg", "abs", "sign", "exp", "log", "sqrt", "square", "tanh", "sigmoid", "relu"]
BINARY = ["add", "subtract", "multiply", "divide", "pow", "maximum", "minimum"]
COMPARE = ["equal", "not_equal", "less_than", "less_equal", "greater_than", "greater_equal"]
BACKWARD = ["tanh_grad", "sigmoid_grad", "relu_grad", "sqrt_grad"]


def test_every_elementwise_op_is_registered_with_its_signature():
    for name in UNARY:
        assert registry.get(f"fastop::{name}").signature() == f"fastop::{name}(x) -> (out)"
    for name in BINARY + COMPARE:
        assert registry.get(f"fastop::{name}").signature() == \
            f"fastop::{name}(x, y) -> (out)"
    for name in BACKWARD:
        assert registry.get(f"fastop::{name}").signature() == \
            f"fastop::{name}(y, dy) -> (dx)"
    assert registry.get("fastop::where").signature() == \
        "fastop::where(condition, x, y) -> (out)"
    assert registry.get("fastop::cast").signature() == "fastop::cast(x, dtype) -> (out)"
    assert registry.get("fastop::full_like").signature() == \
        "fastop::full_like(x, fill_value=0.0) -> (out)"
    assert registry.get("fastop::full").signature() == \
        "fastop::full(, shape, fill_value=0.0, dtype=fastop.float32) -> (out)"


def test_dtypes_and_differentiability():
    assert registry.get("fastop::tanh").dtypes == ["float32", "float64"]
    assert registry.get("fastop::add").dtypes == ["int32", "int64", "float32", "float64"]
    assert registry.get("fastop::equal").dtypes == ["bool", "int32", "int64", "float32",
                                                    "float64"]
    for name in COMPARE + ["full_like"]:
        assert registry.get(f"fastop::{name}").differentiable_inputs == ()
    assert registry.get("fastop::where").differentiable_inputs == ("x", "y")
    assert registry.get("fastop::relu_grad").differentiable_inputs == ("dy",)
    for name in UNARY + BINARY + BACKWARD + ["where", "cast"]:
        assert registry.get(f"fastop::{name}").grad_rule is not None, name


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

@pytest.mark.parametrize("name", UNARY)
def test_unary_gradient_rules(name):
    x = rand(3, 4, away_from_zero=True)
    if name in ("log", "sqrt"):
        np.abs(x, out=x)
    check_rule(f"fastop::{name}", [x])


@pytest.mark.parametrize("name", ["tanh_grad", "sigmoid_grad", "sqrt_grad"])
def test_backward_kernels_are_differentiable_again(name):
    y = np.abs(rand(3, 4, seed=2)) / 2 + 0.1      # a valid tanh/sigmoid/sqrt output
    check_rule(f"fastop::{name}", [y, rand(3, 4, seed=3)])


def test_relu_grad_is_differentiable_in_dy():
    y = np.maximum(rand(3, 4, seed=2, away_from_zero=True), 0)
    grads = check_rule("fastop::relu_grad", [y, rand(3, 4, seed=3)], wrt=[1])
    assert grads[0] is None


@pytest.mark.parametrize("name", BINARY)
def test_binary_gradient_rules_same_shape(name):
    x, y = rand(3, 4, seed=4, away_from_zero=True), rand(3, 4, seed=5, away_from_zero=True)
    if name == "pow":
        np.abs(x, out=x)
    check_rule(f"fastop::{name}", [x, y])


@pytest.mark.parametrize("shapes", [((3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)),
                                    ((2, 1, 3), (4, 1))], ids=str)
@pytest.mark.parametrize("name", BINARY)
def test_binary_gradient_rules_sum_broadcast_dims_back(name, shapes):
    x, y = rand(*shapes[0], seed=6, away_from_zero=True), rand(*shapes[1], seed=7,
                                                              away_from_zero=True)
    if name == "pow":
        np.abs(x, out=x)
    check_rule(f"fastop::{name}", [x, y])


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

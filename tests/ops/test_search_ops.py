"""The numpy-kernel search ops (fastop::argmin, topk, take_along_axis(+_grad), nonzero):
results against numpy, ties and NaN, meta (nonzero's count is unknown), rules against
finite differences, eager against static, errors."""
import numpy as np
import pytest

import fastop
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule


def op(name):
    return registry.get(f"fastop::{name}")


def t(x):
    return fastop.to_tensor(x)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_argmin_matches_numpy(dtype):
    x = np.random.default_rng(0).integers(-9, 9, (3, 4, 5)).astype(dtype)
    assert op("argmin")(t(x)).item() == np.argmin(x)
    for axis in (0, 1, -1):
        got = op("argmin")(t(x), axis=axis, keepdim=True).numpy()
        np.testing.assert_array_equal(got, np.argmin(x, axis=axis, keepdims=True))
        assert got.dtype == np.int64
    assert op("argmin")(t(x), keepdim=True).shape == [1, 1, 1]
    nan = np.array([3.0, np.nan, -1.0, np.nan])
    assert op("argmin")(t(nan)).item() == 1           # the first NaN counts as the minimum


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_topk_matches_a_stable_sort(dtype, largest):
    x = np.random.default_rng(1).integers(-3, 4, (4, 7)).astype(dtype)   # many ties
    values, indices = op("topk")(t(x), k=3, axis=1, largest=largest)
    order = np.argsort(-x.astype(np.float64) if largest else x, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, order, axis=1))
    ext = np.array([np.iinfo(dtype).min, 0, np.iinfo(dtype).max], dtype) \
        if dtype.startswith("int") else np.array([-np.inf, 0, np.inf], dtype)
    assert op("topk")(t(ext), k=1, largest=largest)[0].item() == \
        (ext[2] if largest else ext[0])


def test_take_along_axis_and_nonzero_match_numpy():
    x = np.arange(12.0).reshape(3, 4)
    idx = np.array([[0, 2], [1, 1], [3, 0]])
    np.testing.assert_array_equal(op("take_along_axis")(t(x), t(idx), axis=1).numpy(),
                                  np.take_along_axis(x, idx, axis=1))
    mask = x % 3 == 0
    np.testing.assert_array_equal(op("nonzero")(t(mask)).numpy(), np.argwhere(mask))
    assert op("nonzero").infer_meta([TensorMeta([3, 4], "bool")], {}) == \
        [TensorMeta([None, 2], "int64")]


def test_rules_match_finite_differences():
    rng = np.random.default_rng(3)
    check_grad_rule("fastop::topk", [rng.standard_normal((3, 5))], {"k": 2, "axis": 1},
                    douts=[rng.standard_normal((3, 2)), None])
    check_grad_rule("fastop::topk", [rng.standard_normal((4, 3))],
                    {"k": 3, "axis": 0, "largest": False}, douts=[rng.standard_normal((3, 3)),
                                                                  None])
    idx = np.array([[0, 2], [2, 2]])                  # a repeated index accumulates
    check_grad_rule("fastop::take_along_axis", [rng.standard_normal((3, 2)), idx],
                    {"axis": 0}, wrt=[0])
    check_grad_rule("fastop::take_along_axis_grad",
                    [rng.standard_normal((3, 2)), idx, rng.standard_normal((2, 2))],
                    {"axis": 0}, wrt=[2])


def test_eager_equals_static(run_static):
    x = np.random.default_rng(4).standard_normal((4, 6))
    eager = [v.numpy() for v in op("topk")(t(x), k=2)]
    static = run_static(lambda v: op("topk")(v, k=2), x)
    assert all(np.array_equal(a, b) for a, b in zip(eager, static))
    np.testing.assert_array_equal(run_static(lambda v: op("argmin")(v, axis=0), x)[0],
                                  op("argmin")(t(x), axis=0).numpy())
    np.testing.assert_array_equal(run_static(lambda v: op("nonzero")(v), x > 0)[0],
                                  np.argwhere(x > 0))


@pytest.mark.parametrize("call,error,message", [
    (lambda: op("topk")(t(np.ones((2, 3))), k=4), ValueError, r"fastop::topk: k must be in"),
    (lambda: op("argmin")(t(np.ones((0,)))), ValueError, "fastop::argmin: cannot take"),
    (lambda: op("take_along_axis")(t(np.ones((2, 3))), t(np.ones((2,), "int64")), axis=0),
     ValueError, "fastop::take_along_axis: indices must have arr's number of dims"),
    (lambda: op("take_along_axis")(t(np.ones((2, 3))), t(np.ones((2, 3))), axis=0),
     TypeError, "fastop::take_along_axis: indices must be int32 or int64"),
])
def test_errors_name_the_op(call, error, message):
    with pytest.raises(error, match=message):
        call()

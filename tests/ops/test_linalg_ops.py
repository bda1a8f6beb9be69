"""The registered linalg ops (fastop::matmul, fastop::fc): definitions, meta, calls, and
their gradient rules against central finite differences in float64."""
import numpy as np
import pytest

import fastop
from fastop._core.storage import from_numpy
from fastop.ops import TensorMeta, registry
from ..reference import linalg as ref

GRAD_TOL = dict(rtol=1e-6, atol=1e-7)


def numeric_grads(f, arrays, dy, eps=1e-6):
    """d sum(f(*arrays) * dy) / d arrays[i] by central differences, for every array."""
    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            old = a[idx]
            a[idx] = old + eps
            plus = np.sum(f(*arrays) * dy)
            a[idx] = old - eps
            minus = np.sum(f(*arrays) * dy)
            a[idx] = old
            g[idx] = (plus - minus) / (2 * eps)
        grads.append(g)
    return grads


def dense(*arrays):
    return [None if a is None else from_numpy(np.ascontiguousarray(a)) for a in arrays]


# ----------------------------------------------------------------------------- definitions

def test_ops_are_defined_with_their_signatures():
    assert registry.get("fastop::matmul").signature() == \
        "fastop::matmul(x, y, transpose_x=False, transpose_y=False) -> (out)"
    assert registry.get("fastop::fc").signature() == \
        "fastop::fc(x, w, b?, activation='') -> (out)"
    assert fastop.ops.fastop.fc.dtypes == ["int32", "int64", "float32", "float64"]


def test_meta_functions_come_from_the_kernels():
    mm, fc = registry.get("fastop::matmul"), registry.get("fastop::fc")
    assert mm.infer_meta([TensorMeta([None, 2, 3], "float32"), TensorMeta([3, 4], "float32")],
                         {"transpose_x": False, "transpose_y": False}) \
        == [TensorMeta([None, 2, 4], "float32")]
    assert mm.infer_meta([TensorMeta([3, 2], "float64"), TensorMeta([3], "float64")],
                         {"transpose_x": True, "transpose_y": False}) \
        == [TensorMeta([2], "float64")]
    assert fc.infer_meta([TensorMeta([None, 3], "float32"), TensorMeta([3, 5], "float32"),
                          None], {"activation": "tanh"}) == [TensorMeta([None, 5], "float32")]
    assert fc.infer_meta([TensorMeta([8, 3], "float32"), TensorMeta([3, 5], "float32"),
                          TensorMeta([5], "float32")], {"activation": ""}) \
        == [TensorMeta([8, 5], "float32")]


def test_calling_the_ops_computes():
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal(5)
    out = fastop.ops.fastop.fc(x, w, b, activation="sigmoid")
    np.testing.assert_allclose(np.asarray(out), ref.fc(x, w, b, "sigmoid"), rtol=1e-12)
    out = fastop.ops.fastop.fc(x, w, activation="relu")
    np.testing.assert_allclose(np.asarray(out), ref.fc(x, w, None, "relu"), rtol=1e-12)
    out = fastop.ops.fastop.matmul(x, x, transpose_x=True)
    np.testing.assert_allclose(np.asarray(out), x.T @ x, rtol=1e-12)


def test_op_errors_name_the_op():
    with pytest.raises(ValueError, match=r"fastop::matmul: input shapes are incompatible"):
        fastop.ops.fastop.matmul(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(TypeError, match=r"fastop::fc: attribute 'activation' expects str"):
        fastop.ops.fastop.fc(np.ones((2, 3)), np.ones((3, 2)), activation=1)


# ----------------------------------------------------------------------------- gradients

# (x shape, y shape) as passed (transpose flags apply to them).
MATMUL_GRAD_CASES = {
    "mat.mat": ((3, 4), (4, 2)),
    "batch.batch": ((2, 3, 4), (2, 4, 2)),
    "broadcast-batch": ((2, 1, 3, 4), (3, 4, 2)),
    "mat.batch": ((3, 4), (2, 4, 2)),
    "vec.mat": ((4,), (4, 2)),
    "mat.vec": ((3, 4), (4,)),
    "vec.vec": ((4,), (4,)),
    "vec.batch": ((4,), (2, 4, 3)),
    "batch.vec": ((2, 3, 4), (4,)),
}


@pytest.mark.parametrize("case", MATMUL_GRAD_CASES, ids=str)
@pytest.mark.parametrize("tx,ty", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["NN", "TN", "NT", "TT"])
def test_matmul_grad_rule_matches_finite_differences(case, tx, ty):
    xs, ys = MATMUL_GRAD_CASES[case]
    rng = np.random.default_rng(1)
    x = rng.standard_normal(xs[:-2] + xs[:-3:-1] if tx and len(xs) > 1 else xs)
    y = rng.standard_normal(ys[:-2] + ys[:-3:-1] if ty and len(ys) > 1 else ys)
    attrs = {"transpose_x": tx, "transpose_y": ty}
    dy = rng.standard_normal(ref.matmul(x, y, **attrs).shape)
    rule = registry.get("fastop::matmul").grad_rule
    assert rule.needs == ("x", "y")
    dx, dw = rule.fn(*dense(x, y, dy), **attrs)
    nx, nw = numeric_grads(lambda a, b: ref.matmul(a, b, **attrs), [x, y], dy)
    np.testing.assert_allclose(np.asarray(dx), nx, **GRAD_TOL)
    np.testing.assert_allclose(np.asarray(dw), nw, **GRAD_TOL)


FC_GRAD_SHAPES = {"2-D": (5, 3), "1-D": (3,), "3-D": (2, 2, 3)}


@pytest.mark.parametrize("activation", ["", "tanh", "sigmoid", "relu"],
                         ids=lambda a: a or "none")
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("shape", FC_GRAD_SHAPES, ids=str)
def test_fc_grad_rule_matches_finite_differences(activation, bias, shape):
    x_shape = FC_GRAD_SHAPES[shape]
    for seed in range(100):   # pre-activations away from relu's kink at 0
        rng = np.random.default_rng(seed)
        x, w = rng.standard_normal(x_shape), rng.standard_normal((3, 4))
        b = rng.standard_normal(4) if bias else None
        if np.abs(ref.fc(x, w, b)).min() > 1e-3:
            break
    out = ref.fc(x, w, b, activation)
    dy = rng.standard_normal(out.shape)
    rule = registry.get("fastop::fc").grad_rule
    assert rule.needs == ("x", "w", "b", "out")
    grads = rule.fn(*dense(x, w, b, out, dy), activation=activation)
    inputs = [x, w] + ([b] if bias else [])
    numeric = numeric_grads(lambda *a: ref.fc(*a, activation=activation) if bias else
                            ref.fc(a[0], a[1], None, activation), inputs, dy)
    assert len(grads) == 3 and (grads[2] is None) == (not bias)
    for got, expected in zip(grads, numeric):
        np.testing.assert_allclose(np.asarray(got), expected, **GRAD_TOL)


def test_eager_backward_through_fc_and_matmul():
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((4, 3)), rng.standard_normal((3, 2)), rng.standard_normal(2)]
    x, w, b = [fastop.to_tensor(a, stop_gradient=False) for a in arrays]
    out = fastop.matmul(fastop.ops.fastop.fc(x, w, b, activation="tanh"), w, transpose_y=True)
    dy = rng.standard_normal((4, 3))
    out.backward(fastop.to_tensor(dy))
    expected = numeric_grads(lambda xv, wv, bv: ref.fc(xv, wv, bv, "tanh") @ wv.T, arrays, dy)
    for t, e in zip((x, w, b), expected):
        np.testing.assert_allclose(t.grad.numpy(), e, **GRAD_TOL)


def test_rules_compute_only_the_gradients_asked_for():
    """A first layer's input takes no gradient: the rule is told so (needs_input_grad) and
    its GEMM is not computed at all."""
    from fastop.ops._registry import apply_grad_rule
    x = fastop.to_tensor(np.ones((4, 3)))
    w = fastop.to_tensor(np.ones((3, 2)))
    fc, matmul = registry.get("fastop::fc"), registry.get("fastop::matmul")
    out = fc(x, w, None)
    dout = fastop.ones([4, 2], dtype="float64")
    dx, dw, db = apply_grad_rule(fc, [x, w, None, out], [dout], {"activation": ""},
                                 (False, True, False))
    assert dx is None and db is None
    np.testing.assert_allclose(dw.numpy(), np.full((3, 2), 4.0))
    dx, dy = apply_grad_rule(matmul, [x, w], [dout],
                             {"transpose_x": False, "transpose_y": False}, (False, True))
    assert dx is None and dy is not None


def test_eager_backward_asks_no_gradient_of_stop_gradient_inputs(monkeypatch):
    x = fastop.to_tensor(np.ones((4, 3)))                 # data: stop_gradient=True
    w = fastop.to_tensor(np.ones((3, 2)), stop_gradient=False)
    matmul = registry.get("fastop::matmul")
    asked = []
    rule = matmul.grad_rule.fn

    def spy(*args, needs_input_grad=None, **attrs):
        asked.append(tuple(needs_input_grad))
        return rule(*args, needs_input_grad=needs_input_grad, **attrs)
    monkeypatch.setattr(matmul.grad_rule, "fn", spy)
    (x @ w).sum().backward()
    assert asked == [(False, True)]
    np.testing.assert_allclose(w.grad.numpy(), np.full((3, 2), 4.0))

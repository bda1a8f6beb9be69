"""fastop::layer_norm and fastop::layer_norm_grad as registry ops: signatures, meta with
unknown dims, eager against numpy and against static, and the gradient rules against
central finite differences in float64 (check_grad_rule), including gradients flowing into
the mean and rstd outputs and the second-order rule."""
import numpy as np
import pytest

import fastop
from fastop.ops import TensorMeta, registry
from fastop.ops.checking import check_grad_rule
from ..reference import norm as ref

layer_norm = registry.get("fastop::layer_norm")
layer_norm_grad = registry.get("fastop::layer_norm_grad")


def rand(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


def test_signatures():
    assert layer_norm.signature() == ("fastop::layer_norm(x, weight?, bias?, epsilon=1e-05, "
                                      "begin_norm_axis=1) -> (out, mean, rstd)")
    assert layer_norm_grad.signature() == ("fastop::layer_norm_grad(x, mean, rstd, dout, "
                                           "weight?, begin_norm_axis=1) -> (dx, dweight, dbias)")


def test_meta_with_unknown_batch():
    metas = layer_norm.infer_meta([TensorMeta([None, 8, 4], "float32"),
                                   TensorMeta([32], "float32"), None],
                                  {"epsilon": 1e-5, "begin_norm_axis": 1})
    assert metas == [TensorMeta([None, 8, 4], "float32"), TensorMeta([None, 1, 1], "float32"),
                     TensorMeta([None, 1, 1], "float32")]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_eager_matches_numpy_and_static(dtype, run_static):
    x, w, b = rand(4, 3, 5).astype(dtype), rand(15, seed=2).astype(dtype), \
        rand(15, seed=3).astype(dtype)
    eager = [t.numpy() for t in layer_norm(fastop.to_tensor(x), fastop.to_tensor(w),
                                           fastop.to_tensor(b), begin_norm_axis=1)]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12)
    for got, want in zip(eager, ref.layer_norm(x, w, b, 1e-5, 1)):
        np.testing.assert_allclose(got, want, **tol)
    static = run_static(lambda *v: layer_norm(*v, begin_norm_axis=1), x, w, b)
    for e, s in zip(eager, static):
        np.testing.assert_array_equal(e, s)


@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, True), (False, False)],
                         ids=["both", "weight", "bias", "none"])
def test_rule_matches_finite_differences(affine):
    x = rand(3, 2, 4)
    params = [rand(8, seed=2) if affine[0] else None, rand(2, 4, seed=3) if affine[1] else None]
    wrt = [0] + [i + 1 for i, p in enumerate(params) if p is not None]
    for douts in (None, [rand(3, 2, 4, seed=4), None, None]):
        check_grad_rule("fastop::layer_norm", [x, *params], {"begin_norm_axis": 1}, wrt=wrt,
                        douts=douts)


def test_rule_of_the_backward_kernel_matches_finite_differences():
    # mean and rstd are independent inputs here (the way the rule treats them)
    x, w, dout = rand(3, 4), rand(4, seed=2), rand(3, 4, seed=3)
    mean, rstd = rand(3, 1, seed=5), np.abs(rand(3, 1, seed=6)) + 0.5
    inputs = [x, mean, rstd, dout, w]
    check_grad_rule("fastop::layer_norm_grad", inputs)
    check_grad_rule("fastop::layer_norm_grad", [x, mean, rstd, dout, None], wrt=[0, 1, 2, 3])
    # a gradient into dx only, and into dweight/dbias only
    check_grad_rule("fastop::layer_norm_grad", inputs, douts=[rand(3, 4, seed=7), None, None])
    check_grad_rule("fastop::layer_norm_grad", inputs,
                    douts=[None, rand(4, seed=8), rand(4, seed=9)])


def test_static_backward_matches_eager(run_static):
    x, w = rand(4, 6), rand(6, seed=2)
    xt, wt = fastop.to_tensor(x, stop_gradient=False), fastop.to_tensor(w, stop_gradient=False)
    out = layer_norm(xt, wt, None)[0]
    (out * out).sum().backward()

    def program(xv, wv):
        xv.stop_gradient = wv.stop_gradient = False
        o = layer_norm(xv, wv, None)[0]
        loss = (o * o).sum()
        return fastop.static.gradients([loss], [xv, wv])

    gx, gw = run_static(program, x, w)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, wt.grad.numpy(), rtol=1e-12, atol=1e-12)

"""Adagrad and Adamax (PaddlePaddle's formulas), composed of elementwise ops: steps
against numpy, weight decay, clipping, state dicts, static mode and errors."""
import numpy as np
import pytest

import fastop
from fastop import optimizer, static


def params(dtype="float64"):
    rng = np.random.default_rng(3)
    return [fastop.to_tensor(rng.standard_normal(s).astype(dtype), stop_gradient=False)
            for s in ((4, 3), (3,))]


def grads_of(step, ps):
    rng = np.random.default_rng(50 + step)
    return [rng.standard_normal(p.shape).astype(p.dtype.numpy_dtype) for p in ps]


def run(opt, ps, steps):
    seen = []
    for step in range(steps):
        gs = grads_of(step, ps)
        for p, g in zip(ps, gs):
            p.grad = fastop.to_tensor(g)
        opt.step()
        opt.clear_grad()
        seen.append(gs)
    return seen


def adagrad_ref(p, grads, lr, eps, init, wd=0.0):
    moment = np.full_like(p, init)
    for g in grads:
        g = g + wd * p
        moment = moment + g * g
        p = p - lr * g / (np.sqrt(moment) + eps)
    return p


def adamax_ref(p, grads, lr, b1, b2, eps, wd=0.0):
    m, u, b1p = np.zeros_like(p), np.zeros_like(p), b1
    for g in grads:
        g = g + wd * p
        m = b1 * m + (1 - b1) * g
        u = np.maximum(b2 * u + eps, np.abs(g))
        p = p - lr / (1 - b1p) * m / u
        b1p *= b1
    return p


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("wd", [None, 0.1])
def test_adagrad_matches_numpy(dtype, wd):
    ps = params(dtype)
    start = [p.numpy().astype("float64") for p in ps]
    opt = optimizer.Adagrad(0.1, epsilon=1e-3, parameters=ps, weight_decay=wd,
                            initial_accumulator_value=0.5)
    seen = run(opt, ps, 3)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12)
    for i, p in enumerate(ps):
        want = adagrad_ref(start[i], [s[i] for s in seen], 0.1, 1e-3, 0.5, wd or 0.0)
        np.testing.assert_allclose(p.numpy(), want, **tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("wd", [None, 0.1])
def test_adamax_matches_numpy(dtype, wd):
    ps = params(dtype)
    start = [p.numpy().astype("float64") for p in ps]
    opt = optimizer.Adamax(0.05, beta1=0.8, beta2=0.9, epsilon=1e-4, parameters=ps,
                           weight_decay=wd)
    seen = run(opt, ps, 3)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12)
    for i, p in enumerate(ps):
        want = adamax_ref(start[i], [s[i] for s in seen], 0.05, 0.8, 0.9, 1e-4, wd or 0.0)
        np.testing.assert_allclose(p.numpy(), want, **tol)


def test_defaults_are_paddles():
    ps = params()
    adamax = optimizer.Adamax(parameters=ps)
    assert (adamax.get_lr(), adamax._beta1, adamax._beta2, adamax._epsilon) == \
        (0.001, 0.9, 0.999, 1e-8)
    adagrad = optimizer.Adagrad(0.1, parameters=ps)
    assert (adagrad._epsilon, adagrad._initial_accumulator_value) == (1e-6, 0.0)


def test_clipping_and_parameter_groups_reach_the_composed_update():
    a, b = params()
    a0, b0 = a.numpy().copy(), b.numpy().copy()
    opt = optimizer.Adagrad(1.0, epsilon=0.0, parameters=[
        {"params": [a], "learning_rate": 0.5},
        {"params": [b], "grad_clip": fastop.nn.ClipGradByValue(0.1)}])
    ga, gb = np.full(a.shape, 2.0), np.full(b.shape, -3.0)
    a.grad, b.grad = fastop.to_tensor(ga), fastop.to_tensor(gb)
    opt.step()
    np.testing.assert_allclose(a.numpy(), a0 - 0.5, rtol=1e-12)   # g / |g| = 1
    np.testing.assert_allclose(b.numpy(), b0 + 1.0, rtol=1e-12)   # clipped to -0.1


def test_adamax_state_dict_resumes_identically():
    ps, qs = params(), params()
    first = optimizer.Adamax(0.01, parameters=ps)
    run(first, ps, 2)
    sd = first.state_dict()
    assert sorted(sd) == ["LR", "param_0_beta1_pow", "param_0_inf_norm", "param_0_moment",
                          "param_1_beta1_pow", "param_1_inf_norm", "param_1_moment"]
    for p, q in zip(ps, qs):
        q.set_value(p.numpy())
    second = optimizer.Adamax(0.01, parameters=qs)
    second.set_state_dict({k: np.asarray(v).copy() if k != "LR" else v
                           for k, v in sd.items()})
    for opt, ts in ((first, ps), (second, qs)):
        gs = grads_of(9, ts)
        for t, g in zip(ts, gs):
            t.grad = fastop.to_tensor(g)
        opt.step()
    for p, q in zip(ps, qs):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


@pytest.mark.parametrize("make", [
    lambda ps=None: optimizer.Adagrad(0.1, epsilon=1e-3, initial_accumulator_value=0.5,
                                      parameters=ps),
    lambda ps=None: optimizer.Adamax(0.1, beta1=0.8, beta2=0.9, epsilon=1e-4,
                                     parameters=ps)])
def test_static_minimize_matches_eager(make):
    w0 = np.random.default_rng(0).standard_normal((3, 2)).astype("float32")
    x = np.random.default_rng(1).standard_normal((4, 3)).astype("float32")
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            xv = static.data("x", [None, 3], "float32")
            w = static.create_parameter([3, 2], "float32", name="composed_w",
                                        initializer=lambda shape, dtype: w0.copy())
            make().minimize(fastop.matmul(xv, w).square().mean())
        exe = static.Executor()
        exe.run(startup)
        for _ in range(2):
            exe.run(main, feed={"x": x})
        got = np.asarray(static.global_scope().find_var("composed_w")).copy()
    finally:
        fastop.disable_static()
    we = fastop.to_tensor(w0.copy(), stop_gradient=False)
    opt = make([we])
    for _ in range(2):
        fastop.matmul(fastop.to_tensor(x), we).square().mean().backward()
        opt.step()
        opt.clear_grad()
    np.testing.assert_allclose(got, we.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make,error,match", [
    (lambda ps: optimizer.Adagrad(None, parameters=ps), ValueError,
     "Adagrad: learning_rate is not set"),
    (lambda ps: optimizer.Adagrad(0.1, epsilon=-1.0, parameters=ps), ValueError,
     "Adagrad: epsilon must be >= 0"),
    (lambda ps: optimizer.Adagrad(0.1, parameters=ps, initial_accumulator_value=-1.0),
     ValueError, "initial_accumulator_value must be a finite number >= 0"),
    (lambda ps: optimizer.Adamax(beta1=1.0, parameters=ps), ValueError,
     r"Adamax: beta1 must be in \[0, 1\)"),
    (lambda ps: optimizer.Adamax(learning_rate=None, parameters=ps), ValueError,
     "Adamax: learning_rate is not set"),
])
def test_bad_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make(params())

"""Optimizers in eager mode (against numpy reference updates), state dicts, errors,
and static minimize."""
import numpy as np
import pytest

import fastop
from fastop import nn, optimizer

TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-12, atol=1e-14)}


def make_params(dtype="float32"):
    rng = np.random.default_rng(1)
    return [fastop.to_tensor(rng.standard_normal(s).astype(dtype), stop_gradient=False)
            for s in ((4, 3), (3,))]


def set_grads(params, step):
    rng = np.random.default_rng(100 + step)
    grads = [rng.standard_normal(p.shape).astype(p.dtype.numpy_dtype) for p in params]
    for p, g in zip(params, grads):
        p.grad = fastop.to_tensor(g)
    return grads


def run(opt, params, steps=3, start=0):
    grads = []
    for step in range(start, start + steps):
        grads.append(set_grads(params, step))
        opt.step()
        opt.clear_grad()
    return grads


def reference(kind, values, grads_per_step, lr, wd, **hp):
    values = [v.astype("float64") for v in values]
    state = [dict(v=np.zeros_like(v), m=np.zeros_like(v), t=0) for v in values]
    for grads in grads_per_step:
        for i, (p, g) in enumerate(zip(values, grads)):
            g = g + wd * p
            s = state[i]
            if kind == "sgd":
                values[i] = p - lr * g
            elif kind == "momentum":
                s["v"] = hp["momentum"] * s["v"] + g
                upd = g + hp["momentum"] * s["v"] if hp["use_nesterov"] else s["v"]
                values[i] = p - lr * upd
            else:
                b1, b2, eps = hp["beta1"], hp["beta2"], hp["epsilon"]
                s["t"] += 1
                s["m"] = b1 * s["m"] + (1 - b1) * g
                s["v"] = b2 * s["v"] + (1 - b2) * g * g
                mhat, vhat = s["m"] / (1 - b1 ** s["t"]), s["v"] / (1 - b2 ** s["t"])
                values[i] = p - lr * mhat / (np.sqrt(vhat) + eps)
    return values


CASES = [
    ("sgd", lambda ps, wd: optimizer.SGD(0.1, parameters=ps, weight_decay=wd), {}),
    ("momentum", lambda ps, wd: optimizer.Momentum(0.1, momentum=0.8, parameters=ps,
                                                   weight_decay=wd),
     dict(momentum=0.8, use_nesterov=False)),
    ("nesterov", lambda ps, wd: optimizer.Momentum(0.1, momentum=0.8, parameters=ps,
                                                   use_nesterov=True, weight_decay=wd),
     dict(momentum=0.8, use_nesterov=True)),
    ("adam", lambda ps, wd: optimizer.Adam(0.01, beta1=0.8, beta2=0.95, epsilon=1e-7,
                                           parameters=ps, weight_decay=wd),
     dict(beta1=0.8, beta2=0.95, epsilon=1e-7)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("wd", [0.0, 0.05])
@pytest.mark.parametrize("kind,make,hp", CASES, ids=[c[0] for c in CASES])
def test_steps_match_numpy(kind, make, hp, wd, dtype):
    params = make_params(dtype)
    start = [p.numpy().copy() for p in params]
    opt = make(params, wd)
    grads = run(opt, params)
    lr = opt.get_lr()
    want = reference("momentum" if kind == "nesterov" else kind, start, grads, lr, wd, **hp)
    for p, w in zip(params, want):
        np.testing.assert_allclose(p.numpy(), w, **TOL[dtype])


def test_adam_formula_matches_paddle_epsilon_placement():
    """Paddle's Adam puts epsilon as eps * sqrt(1 - b2^t) inside the unbiased form."""
    (p,) = make_params("float64")[:1]
    start = p.numpy().copy()
    opt = optimizer.Adam(0.1, epsilon=0.5, parameters=[p])
    grads = run(opt, [p], steps=1)
    g = grads[0][0]
    m, v = 0.1 * g, 0.001 * g * g
    want = start - 0.1 * np.sqrt(1 - 0.999) / (1 - 0.9) * m / (np.sqrt(v) + 0.5 * np.sqrt(0.001))
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-12)


def test_step_skips_params_without_grad_or_frozen():
    a, b = make_params()
    b.stop_gradient = True
    before_a, before_b = a.numpy().copy(), b.numpy().copy()
    opt = optimizer.SGD(0.1, parameters=[a, b])
    opt.step()                                  # no grads at all
    np.testing.assert_array_equal(a.numpy(), before_a)
    set_grads([a, b], 0)
    opt.step()
    assert not np.array_equal(a.numpy(), before_a)
    np.testing.assert_array_equal(b.numpy(), before_b)


def test_clear_grad_zero_or_none():
    params = make_params()
    set_grads(params, 0)
    opt = optimizer.SGD(0.1, parameters=params)
    opt.clear_grad()
    assert all((p.grad.numpy() == 0).all() for p in params)
    opt.clear_grad(set_to_zero=False)
    assert all(p.grad is None for p in params)


def test_update_is_in_place():
    params = make_params()
    address = [p.data_ptr for p in params]
    opt = optimizer.Adam(0.01, parameters=params)
    run(opt, params, steps=2)
    assert [p.data_ptr for p in params] == address


def test_set_lr_takes_effect():
    (p,) = make_params()[:1]
    start = p.numpy().copy()
    opt = optimizer.SGD(0.1, parameters=[p])
    opt.set_lr(0.5)
    grads = run(opt, [p], steps=1)
    np.testing.assert_allclose(p.numpy(), start - 0.5 * grads[0][0], rtol=1e-6)
    assert opt.get_lr() == 0.5


@pytest.mark.parametrize("kind,make,hp", CASES[1:], ids=[c[0] for c in CASES[1:]])
def test_state_dict_resumes_identically(kind, make, hp, tmp_path):
    params = make_params("float64")
    opt = make(params, 0.0)
    run(opt, params, steps=2)
    fastop.save({"params": {str(i): p for i, p in enumerate(params)},
                 "opt": opt.state_dict()}, tmp_path / "ckpt.npz")
    run(opt, params, steps=2, start=2)
    expected = [p.numpy().copy() for p in params]

    ckpt = fastop.load(tmp_path / "ckpt.npz")
    resumed = [fastop.to_tensor(ckpt["params"][str(i)].numpy(), stop_gradient=False)
               for i in range(len(params))]
    opt2 = make(resumed, 0.0)
    opt2.set_state_dict(ckpt["opt"])
    run(opt2, resumed, steps=2, start=2)     # the gradients the original run used
    for p, w in zip(resumed, expected):
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-12)


def test_state_dict_keys():
    layer = nn.Linear(2, 2)
    opt = optimizer.Adam(parameters=layer.parameters())
    layer.weight.grad = fastop.to_tensor(np.ones((2, 2), "float32"))
    opt.step()
    keys = list(opt.state_dict())
    name = layer.weight.name
    assert keys == [f"{name}_moment1", f"{name}_moment2", f"{name}_beta1_pow",
                    f"{name}_beta2_pow", "LR"]


def test_set_state_dict_shape_mismatch_raises():
    params = make_params()
    opt = optimizer.Momentum(parameters=params)
    with pytest.raises(ValueError, match=r"state 'velocity'.*shape \[4, 3\], got \[2\]"):
        opt.set_state_dict({f"{params[0].name or 'param_0'}_velocity": np.zeros(2)})


@pytest.mark.parametrize("set_to_zero", [True, False])
def test_minimize_eager_runs_backward_unless_already_done(set_to_zero):
    if any(f"fastop::{n}" not in fastop.ops.registry for n in ("fc", "mean", "multiply")):
        pytest.skip("the fc/mean/multiply ops are not built yet")
    fastop.seed(0)
    layer = nn.Linear(3, 1)
    x = fastop.to_tensor(np.ones((2, 3), "float32"))
    opt = optimizer.SGD(0.1, parameters=layer.parameters())
    step = np.full((3, 1), 0.1)
    before = layer.weight.numpy().copy()
    opt.minimize(layer(x).mean())               # backward + step
    np.testing.assert_allclose(before - layer.weight.numpy(), step, rtol=1e-6)
    opt.clear_grad(set_to_zero)
    before = layer.weight.numpy().copy()
    loss = layer(x).mean()
    loss.backward()
    _, params_grads = opt.minimize(loss)        # PaddlePaddle's pattern: no second backward
    np.testing.assert_allclose(before - layer.weight.numpy(), step, rtol=1e-6)
    assert len(params_grads) == 2
    opt.clear_grad(set_to_zero)
    before = layer.weight.numpy().copy()
    opt.minimize(layer(x).mean())               # cleared gradients are not reused
    np.testing.assert_allclose(before - layer.weight.numpy(), step, rtol=1e-6)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(learning_rate=-1.0), TypeError, "non-negative float"),
    (dict(learning_rate="0.1"), TypeError, "non-negative float"),
    (dict(weight_decay="l2"), TypeError, "weight_decay must be a float"),
    (dict(parameters=[]), ValueError, "empty parameter list"),
    (dict(weight_decay=-0.1), ValueError, "weight_decay must be finite and non-negative"),
    (dict(grad_clip=1.0), TypeError, "grad_clip must be a fastop.nn.ClipGradByGlobalNorm"),
])
def test_bad_arguments(kwargs, error, match):
    kwargs.setdefault("parameters", make_params())
    with pytest.raises(error, match=match):
        optimizer.SGD(**kwargs)


def test_parameters_required_in_eager_mode():
    with pytest.raises(ValueError, match="parameters are required in eager mode"):
        optimizer.SGD(0.1)


def test_adam_bad_beta_raises():
    with pytest.raises(ValueError, match=r"beta2 must be in \[0, 1\)"):
        optimizer.Adam(parameters=make_params(), beta2=1.0)


def test_step_in_static_mode_raises():
    opt = optimizer.SGD(0.1, parameters=make_params())
    fastop.enable_static()
    try:
        with pytest.raises(RuntimeError, match="step\\(\\) runs in eager mode"):
            opt.step()
        with pytest.raises(RuntimeError, match="clear_grad\\(\\) runs in eager mode"):
            opt.clear_grad()
    finally:
        fastop.disable_static()

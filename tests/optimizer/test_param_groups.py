"""Parameter groups (PaddlePaddle's list of dicts): per-group learning-rate scale, weight
decay and hyper-parameters, in eager and static mode, and their errors."""
import numpy as np
import pytest

import fastop
from fastop import optimizer, static


def params(n=2, seed=0):
    rng = np.random.default_rng(seed)
    return [fastop.to_tensor(rng.standard_normal((3, 2)).astype("float64"),
                             stop_gradient=False) for _ in range(n)]


def one_step(opt, ps, grads):
    for p, g in zip(ps, grads):
        p.grad = fastop.to_tensor(g)
    opt.step()
    opt.clear_grad()


GRADS = [np.full((3, 2), 0.5), np.full((3, 2), -1.0)]


def test_sgd_group_learning_rate_scales_the_global_rate_and_weight_decay_is_per_group():
    a, b = params()
    a0, b0 = a.numpy().copy(), b.numpy().copy()
    opt = optimizer.SGD(0.1, parameters=[
        {"params": [a]},
        {"params": [b], "learning_rate": 0.5, "weight_decay": 0.2}])
    one_step(opt, [a, b], GRADS)
    np.testing.assert_allclose(a.numpy(), a0 - 0.1 * GRADS[0], rtol=1e-12)
    np.testing.assert_allclose(b.numpy(), b0 - 0.05 * (GRADS[1] + 0.2 * b0), rtol=1e-12)


def test_a_group_scale_follows_set_lr_and_schedulers():
    a, b = params()
    b0 = b.numpy().copy()
    sched = optimizer.lr.StepDecay(1.0, step_size=1, gamma=0.5)
    opt = optimizer.SGD(sched, parameters=[{"params": [a]},
                                           {"params": [b], "learning_rate": 0.1}])
    sched.step()                                    # rate 0.5, group rate 0.05
    one_step(opt, [a, b], GRADS)
    np.testing.assert_allclose(b.numpy(), b0 - 0.05 * GRADS[1], rtol=1e-12)


def test_momentum_groups_take_their_own_momentum():
    a, b = params()
    a0, b0 = a.numpy().copy(), b.numpy().copy()
    opt = optimizer.Momentum(0.1, momentum=0.9, parameters=[
        {"params": [a]}, {"params": [b], "momentum": 0.5, "learning_rate": 2.0}])
    for _ in range(2):
        one_step(opt, [a, b], GRADS)
    # v1 = g, v2 = m * g + g
    np.testing.assert_allclose(a.numpy(), a0 - 0.1 * (GRADS[0] + 1.9 * GRADS[0]), rtol=1e-12)
    np.testing.assert_allclose(b.numpy(), b0 - 0.2 * (GRADS[1] + 1.5 * GRADS[1]), rtol=1e-12)


def adam_ref(p, g, lr, b1, b2, eps, coeff=0.0):
    p = p * (1 - lr * coeff)
    m, v = (1 - b1) * g, (1 - b2) * g * g
    return p - lr * np.sqrt(1 - b2) / (1 - b1) * m / (np.sqrt(v) + eps * np.sqrt(1 - b2))


def test_adamw_group_weight_decay_is_the_decoupled_coefficient_and_betas_are_per_group():
    a, b = params()
    a0, b0 = a.numpy().copy(), b.numpy().copy()
    opt = optimizer.AdamW(0.01, parameters=[
        {"params": [a]},
        {"params": [b], "weight_decay": 0.5, "beta1": 0.5, "beta2": 0.9,
         "learning_rate": 0.1}], weight_decay=0.01)
    one_step(opt, [a, b], GRADS)
    np.testing.assert_allclose(a.numpy(), adam_ref(a0, GRADS[0], 0.01, 0.9, 0.999, 1e-8,
                                                   0.01), rtol=1e-10)
    np.testing.assert_allclose(b.numpy(), adam_ref(b0, GRADS[1], 0.001, 0.5, 0.9, 1e-8,
                                                   0.5), rtol=1e-10)


def adamax_ref(p, g, lr, b1, b2, eps, steps):
    m, u = np.zeros_like(p), np.zeros_like(p)
    for t in range(1, steps + 1):
        m = b1 * m + (1 - b1) * g
        u = np.maximum(b2 * u + eps, np.abs(g))
        p = p - lr / (1 - b1 ** t) * m / u
    return p


def test_adamax_groups_take_their_own_betas_and_epsilon():
    a, b = params()
    a0, b0 = a.numpy().copy(), b.numpy().copy()
    opt = optimizer.Adamax(0.01, parameters=[
        {"params": [a]}, {"params": [b], "beta1": 0.1, "beta2": 0.5, "epsilon": 0.25}])
    for _ in range(2):
        one_step(opt, [a, b], GRADS)
    np.testing.assert_allclose(a.numpy(), adamax_ref(a0, GRADS[0], 0.01, 0.9, 0.999, 1e-8,
                                                     2), rtol=1e-10)
    np.testing.assert_allclose(b.numpy(), adamax_ref(b0, GRADS[1], 0.01, 0.1, 0.5, 0.25,
                                                     2), rtol=1e-10)


def test_adagrad_groups_take_their_own_epsilon_and_initial_accumulator():
    a, b = params()
    a0, b0 = a.numpy().copy(), b.numpy().copy()
    opt = optimizer.Adagrad(0.1, parameters=[
        {"params": [a]}, {"params": [b], "epsilon": 0.5, "initial_accumulator_value": 3.0}])
    one_step(opt, [a, b], GRADS)
    g0, g1 = GRADS
    np.testing.assert_allclose(a.numpy(), a0 - 0.1 * g0 / (np.abs(g0) + 1e-6), rtol=1e-10)
    np.testing.assert_allclose(b.numpy(), b0 - 0.1 * g1 / (np.sqrt(3.0 + g1 * g1) + 0.5),
                               rtol=1e-10)


@pytest.mark.parametrize("make,match", [
    (lambda g: optimizer.Adamax(0.1, parameters=g(beta1=1.0)), r"group 1\): beta1 must be"),
    (lambda g: optimizer.Adam(0.1, parameters=g(beta2="x")), r"group 1\): beta2 must be"),
    (lambda g: optimizer.Adagrad(0.1, parameters=g(epsilon=-1.0)),
     r"group 1\): epsilon must be a finite number >= 0"),
    (lambda g: optimizer.Adagrad(0.1, parameters=g(initial_accumulator_value=float("inf"))),
     r"group 1\): initial_accumulator_value must be"),
    (lambda g: optimizer.Adagrad(0.1, parameters=g(beta1=0.5)),
     r"group 1 sets \['beta1'\], which Adagrad does not take per group"),
])
def test_bad_group_hyper_parameters_are_named(make, match):
    a, b = params()
    with pytest.raises(ValueError, match=match):
        make(lambda **options: [{"params": [a]}, {"params": [b], **options}])


def test_adam_groups_and_state_dict_cover_every_parameter():
    a, b = params()
    opt = optimizer.Adam(0.01, parameters=[{"params": [a]},
                                           {"params": [b], "learning_rate": 0.0}])
    b0 = b.numpy().copy()
    one_step(opt, [a, b], GRADS)
    np.testing.assert_array_equal(b.numpy(), b0)           # scale 0: not moved
    assert sorted(k for k in opt.state_dict() if k.endswith("moment1")) == \
        ["param_0_moment1", "param_1_moment1"]


def test_a_group_grad_clip_clips_only_its_group():
    a, b = params()
    a0, b0 = a.numpy().copy(), b.numpy().copy()
    opt = optimizer.SGD(1.0, parameters=[
        {"params": [a]}, {"params": [b], "grad_clip": fastop.nn.ClipGradByValue(0.25)}])
    one_step(opt, [a, b], GRADS)
    np.testing.assert_allclose(a.numpy(), a0 - GRADS[0], rtol=1e-12)
    np.testing.assert_allclose(b.numpy(), b0 + 0.25, rtol=1e-12)


def test_static_minimize_applies_group_scales():
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            x = static.data("x", [None, 2], "float32")
            w1 = static.create_parameter([2, 1], "float32", name="gw1",
                                         initializer=fastop.nn.initializer.Constant(1.0))
            w2 = static.create_parameter([2, 1], "float32", name="gw2",
                                         initializer=fastop.nn.initializer.Constant(1.0))
            loss = (fastop.matmul(x, w1) + fastop.matmul(x, w2)).sum()
            optimizer.SGD(0.1, parameters=[{"params": [w1]},
                                           {"params": [w2], "learning_rate": 0.5}]
                          ).minimize(loss)
        exe = static.Executor()
        exe.run(startup)
        exe.run(main, feed={"x": np.ones((1, 2), "float32")})
        scope = static.global_scope()
        np.testing.assert_allclose(np.asarray(scope.find_var("gw1")), 0.9, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(scope.find_var("gw2")), 0.95, rtol=1e-6)
    finally:
        fastop.disable_static()


@pytest.mark.parametrize("kind", [optimizer.SGD, optimizer.Momentum, optimizer.Adam,
                                  optimizer.AdamW])
def test_learning_rate_none_is_a_value_error(kind):
    with pytest.raises(ValueError, match=f"{kind.__name__}: learning_rate is not set"):
        kind(learning_rate=None, parameters=params(1))


@pytest.mark.parametrize("groups,error,match", [
    (lambda a, b: [{"params": [a]}, [b]], TypeError, r"group 1 is list"),
    (lambda a, b: [{"param": [a]}], ValueError, r"group 0 has no 'params' entry"),
    (lambda a, b: [{"params": [a], "lr": 0.1}], ValueError,
     r"group 0 sets \['lr'\], which SGD does not take per group"),
    (lambda a, b: [{"params": [a]}, {"params": [a, b]}], ValueError,
     r"more than one parameter group"),
    (lambda a, b: [{"params": [a], "learning_rate": -1.0}], ValueError,
     r"group 0\): learning_rate \(a scale of the optimizer's rate\) must be"),
    (lambda a, b: [{"params": [a], "weight_decay": "x"}], TypeError,
     r"group 0\): weight_decay must be a float"),
    (lambda a, b: [{"params": [a]}, {"params": [[b]]}], TypeError,
     r"item 0 is list, not a Tensor"),
])
def test_bad_groups_are_named(groups, error, match):
    with pytest.raises(error, match=match):
        optimizer.SGD(0.1, parameters=groups(*params()))


def test_add_param_group_after_construction():
    a, b, c = params(3)
    b0, c0 = b.numpy().copy(), c.numpy().copy()
    opt = optimizer.SGD(0.1, parameters=[a])
    opt._add_param_group({"params": [b], "learning_rate": 2.0, "weight_decay": 0.0})
    opt._add_param_group({"params": c})
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt._add_param_group({"params": [a]})
    one_step(opt, [a, b, c], [GRADS[0], GRADS[1], GRADS[0]])
    np.testing.assert_allclose(b.numpy(), b0 - 0.2 * GRADS[1], rtol=1e-12)
    np.testing.assert_allclose(c.numpy(), c0 - 0.1 * GRADS[0], rtol=1e-12)


def test_param_attr_learning_rate_scales_and_regularizer_overrides_weight_decay():
    """PaddlePaddle's ParamAttr(learning_rate=, regularizer=): a factor on the
    optimizer's (and the group's) rate, and the parameter's own weight decay in place of
    the optimizer's."""
    from fastop import nn
    from fastop.regularizer import L1Decay, L2Decay
    layer = nn.Linear(3, 2, weight_attr=nn.ParamAttr(learning_rate=0.5,
                                                     regularizer=L1Decay(0.25)))
    w0, b0 = layer.weight.numpy().copy(), layer.bias.numpy().copy()
    opt = optimizer.Momentum(0.1, momentum=0.0, parameters=[
        {"params": [layer.weight], "learning_rate": 0.2}, {"params": [layer.bias]}],
        weight_decay=L2Decay(0.75))
    gw, gb = np.full((3, 2), 0.5, "float32"), np.full(2, -1.0, "float32")
    layer.weight.grad, layer.bias.grad = fastop.to_tensor(gw), fastop.to_tensor(gb)
    opt.step()
    np.testing.assert_allclose(layer.weight.numpy(),
                               w0 - 0.1 * 0.2 * 0.5 * (gw + 0.25 * np.sign(w0)), rtol=1e-6,
                               atol=1e-7)      # float32: a random weight may end near 0
    np.testing.assert_allclose(layer.bias.numpy(), b0 - 0.1 * (gb + 0.75 * b0), rtol=1e-6)


def test_param_attr_options_apply_in_static_mode_too():
    from fastop import nn
    fastop.enable_static()
    try:
        main, startup = static.Program(), static.Program()
        with static.program_guard(main, startup):
            x = static.data("x", [None, 2], "float32")
            layer = nn.Linear(2, 1, weight_attr=nn.ParamAttr(
                initializer=nn.initializer.Constant(1.0), learning_rate=0.5),
                bias_attr=False)
            loss = fastop.mean(layer(x))
            optimizer.SGD(0.1).minimize(loss)
        exe = static.Executor()
        scope = static.Scope()
        exe.run(startup, scope=scope)
        exe.run(main, feed={"x": np.ones((4, 2), "float32")}, scope=scope)
        w = scope.find_var(layer.weight.name)
    finally:
        fastop.disable_static()
    np.testing.assert_allclose(np.asarray(w).ravel(), [1 - 0.1 * 0.5, 1 - 0.1 * 0.5],
                               rtol=1e-6)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(learning_rate=-1.0), ValueError, r"ParamAttr: learning_rate .* >= 0, got -1.0"),
    (dict(regularizer=0.1), TypeError, "ParamAttr: regularizer must be a fastop.regular"),
])
def test_param_attr_bad_options(kwargs, error, match):
    from fastop import nn
    with pytest.raises(error, match=match):
        nn.ParamAttr(**kwargs)


def test_momentum_takes_paddles_precision_flags_with_the_same_numbers():
    a, = params(1)
    b = fastop.to_tensor(a.numpy().copy(), stop_gradient=False)
    plain = optimizer.Momentum(0.1, parameters=[a])
    flagged = optimizer.Momentum(0.1, parameters=[b], multi_precision=True,
                                 use_multi_tensor=True)
    for _ in range(2):
        one_step(plain, [a], GRADS[:1])
        one_step(flagged, [b], GRADS[:1])
    np.testing.assert_array_equal(a.numpy(), b.numpy())

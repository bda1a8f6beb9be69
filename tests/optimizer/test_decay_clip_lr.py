"""Weight decay, gradient clipping and learning-rate schedules in the optimizers.

Every optimizer x weight-decay kind x gradient clip, over several steps, against a numpy
re-implementation of PaddlePaddle's pipeline (clip, then add the decay term, then the
update; AdamW's decay decoupled), in float32 and float64, with eager ``step()`` and
static ``minimize`` giving the same parameters; AdamW against torch's. An LRScheduler as
``learning_rate=`` drives eager steps and static runs (the program's run hook writes the
rate before each Executor.run), and the state_dict carries it through fastop.save/load.
"""
import numpy as np
import pytest

import fastop
from fastop import nn, optimizer, static
from fastop.optimizer import lr as schedules
from fastop.regularizer import L1Decay, L2Decay

TOL = {"float32": dict(rtol=2e-5, atol=2e-6), "float64": dict(rtol=1e-11, atol=1e-13)}
SHAPES = [(4, 3), (3,)]
STEPS = 3

OPTIMIZERS = {   # kind -> (constructor, learning rate, hyper-parameters)
    "sgd": (optimizer.SGD, 0.1, {}),
    "momentum": (optimizer.Momentum, 0.1, {"momentum": 0.8}),
    "nesterov": (optimizer.Momentum, 0.1, {"momentum": 0.8, "use_nesterov": True}),
    "adam": (optimizer.Adam, 0.05, {"beta1": 0.8, "beta2": 0.95, "epsilon": 1e-7}),
    "adamw": (optimizer.AdamW, 0.05, {"beta1": 0.8, "beta2": 0.95, "epsilon": 1e-7}),
}
DECAYS = {"none": None, "float": 0.05, "L2Decay": L2Decay(0.05), "L1Decay": L1Decay(0.05)}
CLIPS = {"none": None, "value": nn.ClipGradByValue(0.5), "norm": nn.ClipGradByNorm(1.0),
         "global": nn.ClipGradByGlobalNorm(1.0)}
MATRIX = [(k, d) for k in OPTIMIZERS for d in DECAYS
          if k != "adamw" or d in ("none", "float")]    # AdamW's decay is a float


def start_values(dtype):
    rng = np.random.default_rng(1)
    return [rng.standard_normal(s).astype(dtype) for s in SHAPES]


def step_grads(dtype):
    rng = np.random.default_rng(2)
    return [[(2 * rng.standard_normal(s)).astype(dtype) for s in SHAPES] for _ in range(STEPS)]


def make(kind, decay, clip, parameters, **extra):
    cls, lr, hp = OPTIMIZERS[kind]
    if kind == "adamw":
        extra.setdefault("weight_decay", 0.0 if decay is None else decay)
    else:
        extra["weight_decay"] = decay
    return cls(learning_rate=extra.pop("learning_rate", lr), parameters=parameters,
               grad_clip=clip, **hp, **extra)


# -- the numpy re-implementation -------------------------------------------------------------

def clip_numpy(clip, grads):
    if clip is None:
        return grads
    if isinstance(clip, nn.ClipGradByValue):
        return [np.clip(g, clip.min, clip.max) for g in grads]
    if isinstance(clip, nn.ClipGradByNorm):
        return [g * clip.clip_norm / max(np.linalg.norm(g), clip.clip_norm) for g in grads]
    norm = np.sqrt(sum(np.sum(g * g) for g in grads))
    return [g * clip.clip_norm / max(norm, clip.clip_norm) for g in grads]


def decay_term(decay, p):
    if decay is None or isinstance(decay, float) and decay == 0:
        return 0.0
    if isinstance(decay, L1Decay):
        return decay.coeff * np.sign(p)
    return (decay.coeff if isinstance(decay, L2Decay) else decay) * p


def paddle_numpy(kind, decay, clip, values, grads_per_step, lrs):
    """The parameters after PaddlePaddle's steps, in float64."""
    _, _, hp = OPTIMIZERS[kind]
    values = [v.astype("float64") for v in values]
    state = [dict(v=np.zeros_like(p), m=np.zeros_like(p)) for p in values]
    for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
        grads = clip_numpy(clip, [g.astype("float64") for g in grads])
        for i, (p, g) in enumerate(zip(values, grads)):
            s = state[i]
            if kind == "adamw":
                p = p * (1 - lr * (decay or 0.0))
            else:
                g = g + decay_term(decay, p)
            if kind == "sgd":
                p = p - lr * g
            elif kind in ("momentum", "nesterov"):
                s["v"] = hp["momentum"] * s["v"] + g
                p = p - lr * (g + hp["momentum"] * s["v"] if hp.get("use_nesterov") else s["v"])
            else:
                b1, b2, eps = hp["beta1"], hp["beta2"], hp["epsilon"]
                s["m"] = b1 * s["m"] + (1 - b1) * g
                s["v"] = b2 * s["v"] + (1 - b2) * g * g
                mhat, vhat = s["m"] / (1 - b1 ** t), s["v"] / (1 - b2 ** t)
                p = p - lr * mhat / (np.sqrt(vhat) + eps)
            values[i] = p
    return values


# -- fastop, eager and static ----------------------------------------------------------------

def loss_of(params, coefficients):
    """sum(p * c) over the parameters: its gradient with respect to p is c."""
    total = None
    for p, c in zip(params, coefficients):
        term = (p * c).sum()
        total = term if total is None else total + term
    return total


def run_eager(build, dtype, scheduler_steps=False):
    params = [fastop.to_tensor(v, stop_gradient=False) for v in start_values(dtype)]
    opt = build(params)
    for grads in step_grads(dtype):
        loss_of(params, [fastop.to_tensor(g) for g in grads]).backward()
        opt.step()
        opt.clear_grad()
        if scheduler_steps:
            opt._learning_rate.step()
    return [p.numpy() for p in params]


def run_static(build, dtype, scheduler_steps=False, scope=None):
    main, startup = static.Program(), static.Program()
    scope = scope or static.Scope()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup), static.scope_guard(scope):
            params = [static.create_parameter(list(s), dtype, name=f"w{i}")
                      for i, s in enumerate(SHAPES)]
            feeds = [static.data(f"c{i}", list(s), dtype) for i, s in enumerate(SHAPES)]
            opt = build(None)
            opt.minimize(loss_of(params, feeds))
            exe = static.Executor()
            exe.run(startup)
            for i, v in enumerate(start_values(dtype)):
                scope.set(f"w{i}", v)
            for grads in step_grads(dtype):
                exe.run(main, feed={f"c{i}": g for i, g in enumerate(grads)})
                if scheduler_steps:
                    opt._learning_rate.step()
            return [scope[f"w{i}"] for i in range(len(SHAPES))]
    finally:
        fastop.disable_static()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("clip", list(CLIPS))
@pytest.mark.parametrize("kind,decay", MATRIX, ids=[f"{k}-{d}" for k, d in MATRIX])
def test_matches_paddle_formulas_eager_and_static(kind, decay, clip, dtype):
    def build(params):
        return make(kind, DECAYS[decay], CLIPS[clip], params)

    eager = run_eager(build, dtype)
    want = paddle_numpy(kind, DECAYS[decay], CLIPS[clip], start_values(dtype),
                        step_grads(dtype), [OPTIMIZERS[kind][1]] * STEPS)
    for got, exp in zip(eager, want):
        np.testing.assert_allclose(got, exp, **TOL[dtype])
    for e, s in zip(eager, run_static(build, dtype)):
        np.testing.assert_array_equal(e, s)


@pytest.mark.parametrize("clip", list(CLIPS))
def test_a_strided_gradient_updates_like_a_contiguous_one(clip):
    g = np.arange(12.0).reshape(3, 4) - 5
    results = []
    for grad in (fastop.to_tensor(np.ascontiguousarray(g.T)), fastop.to_tensor(g).T):
        p = fastop.to_tensor(np.ones((4, 3)), stop_gradient=False)
        p.grad = grad
        make("adam", 0.05, CLIPS[clip], [p]).step()
        results.append(p.numpy())
    np.testing.assert_array_equal(*results)


def test_decay_float_and_l2decay_are_the_same():
    a = run_eager(lambda ps: make("momentum", 0.05, None, ps), "float64")
    b = run_eager(lambda ps: make("momentum", L2Decay(0.05), None, ps), "float64")
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_static_minimize_returns_the_clip_and_update_ops():
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            w = static.create_parameter([3], "float32", name="w")
            loss = (w * static.data("c", [3], "float32")).sum()
            ops, params_grads = optimizer.SGD(0.1, grad_clip=nn.ClipGradByNorm(1.0)).minimize(loss)
    finally:
        fastop.disable_static()
    assert [op.type for op in ops] == ["fastop::squared_l2_norm", "fastop::sqrt",
                                       "fastop::maximum", "fastop::divide",
                                       "fastop::sgd_update"]
    assert ops[-1].input("grad_scale") is ops[-2].outputs[0]
    assert [p.name for p, _ in params_grads] == ["w"]


# -- AdamW -----------------------------------------------------------------------------------

def test_adamw_apply_decay_param_fun_picks_the_decaying_parameters():
    names = ["w", "b"]

    def build(decays):
        def make_opt(params):
            for p, n in zip(params, names):
                p.name = n
            return optimizer.AdamW(0.05, parameters=params, weight_decay=0.1,
                                   apply_decay_param_fun=lambda name: name in decays)
        return make_opt

    both, none, only_w = (run_eager(build(d), "float64") for d in (names, [], ["w"]))
    np.testing.assert_array_equal(only_w[0], both[0])
    np.testing.assert_array_equal(only_w[1], none[1])
    assert not np.array_equal(both[1], none[1])


@pytest.mark.parametrize("mode", ["eager", "static"])
def test_adamw_lr_ratio_scales_each_parameters_rate(mode):
    run = run_eager if mode == "eager" else run_static
    ratios = {(4, 3): 0.5, (3,): 2.0}
    got = run(lambda ps: make("adamw", 0.1, None, ps,
                              lr_ratio=lambda p: ratios[tuple(p.shape)]), "float64")
    for i, ratio in enumerate(ratios.values()):
        want = run(lambda ps: make("adamw", 0.1, None, ps, learning_rate=0.05 * ratio),
                   "float64")
        np.testing.assert_allclose(got[i], want[i], rtol=1e-14)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(weight_decay=L2Decay(0.1)), TypeError, "AdamW: weight_decay must be a float"),
    # PaddlePaddle takes a float (or Tensor) only: an int coefficient is a TypeError
    (dict(weight_decay=1), TypeError, "AdamW: weight_decay must be a float .* got int 1"),
    (dict(weight_decay=-1.0), ValueError, "AdamW: weight_decay must be finite and "),
    (dict(lr_ratio=0.5), TypeError, "AdamW: lr_ratio must be callable"),
    (dict(apply_decay_param_fun="w"), TypeError, "apply_decay_param_fun must be callable"),
    (dict(epsilon=-1e-8), ValueError, "AdamW: epsilon must be >= 0"),
    (dict(beta1=1.0), ValueError, r"AdamW: beta1 must be in \[0, 1\)"),
])
def test_adamw_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        optimizer.AdamW(parameters=[fastop.to_tensor(np.ones(2), stop_gradient=False)],
                        **kwargs)


def test_adamw_defaults_are_paddles():
    opt = optimizer.AdamW(parameters=[fastop.to_tensor(np.ones(2), stop_gradient=False)])
    assert (opt.get_lr(), opt._beta1, opt._beta2, opt._epsilon, opt._coeff) == \
        (0.001, 0.9, 0.999, 1e-8, 0.01)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("clip", ["none", "global", "value"])
def test_adamw_matches_torch(clip, dtype):
    torch = pytest.importorskip("torch")
    tparams = [torch.nn.Parameter(torch.from_numpy(v.copy())) for v in start_values(dtype)]
    topt = torch.optim.AdamW(tparams, lr=0.05, betas=(0.8, 0.95), eps=1e-7, weight_decay=0.1)
    for grads in step_grads(dtype):
        for p, g in zip(tparams, grads):
            p.grad = torch.from_numpy(g.copy())
        if clip == "global":
            torch.nn.utils.clip_grad_norm_(tparams, 1.0)
        elif clip == "value":
            torch.nn.utils.clip_grad_value_(tparams, 0.5)
        topt.step()
    got = run_eager(lambda ps: make("adamw", 0.1, CLIPS[clip], ps), dtype)
    # torch divides by the global norm + 1e-6 where Paddle divides by the norm
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == "float32" else dict(rtol=1e-6, atol=1e-9)
    for g, p in zip(got, tparams):
        np.testing.assert_allclose(g, p.detach().numpy(), **tol)


# -- learning-rate schedules ---------------------------------------------------------------

def step_decay():
    return schedules.StepDecay(learning_rate=0.2, step_size=1, gamma=0.5)


RATES = [0.2 * 0.5 ** t for t in range(STEPS)]     # the rate of each of the STEPS steps


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam", "adamw"])
def test_scheduler_drives_eager_and_static_steps(kind):
    def build(params):
        return make(kind, 0.05, None, params, learning_rate=step_decay())

    eager = run_eager(build, "float64", scheduler_steps=True)
    want = paddle_numpy(kind, 0.05, None, start_values("float64"), step_grads("float64"),
                        RATES)
    for got, exp in zip(eager, want):
        np.testing.assert_allclose(got, exp, rtol=1e-11, atol=1e-13)
    for e, s in zip(eager, run_static(build, "float64", scheduler_steps=True)):
        np.testing.assert_array_equal(e, s)


def test_eager_step_reads_the_rate_at_each_step():
    p = fastop.to_tensor(np.zeros(2), stop_gradient=False)
    sched = schedules.MultiStepDecay(learning_rate=1.0, milestones=[1, 3], gamma=0.1)
    opt = optimizer.SGD(sched, parameters=[p])
    moved = []
    for _ in range(4):
        assert opt.get_lr() == sched()
        before = p.numpy().copy()
        p.grad = fastop.to_tensor(np.ones(2))
        opt.step()
        moved.append(before[0] - p.numpy()[0])
        sched.step()
    np.testing.assert_allclose(moved, [1.0, 0.1, 0.1, 0.01], rtol=1e-12)


def test_static_rate_follows_a_scheduler_stepped_before_the_first_run():
    main, startup, scope = static.Program(), static.Program(), static.Scope()
    sched = step_decay()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup), static.scope_guard(scope):
            w = static.create_parameter([2], "float64", name="w")
            optimizer.SGD(sched).minimize(loss_of([w], [static.data("c", [2], "float64")]))
            exe = static.Executor()
            exe.run(startup)
            scope.set("w", np.zeros(2))
            sched.step()                         # before any run: 0.1 applies to the first
            exe.run(main, feed={"c": np.ones(2)})
            np.testing.assert_allclose(scope["w"], [-0.1, -0.1], rtol=1e-12)
            other = static.Scope()               # another scope gets the rate as well
            with static.scope_guard(other):
                exe.run(startup)
                other.set("w", np.zeros(2))
                sched.step()
                exe.run(main.clone(), feed={"c": np.ones(2)})   # a clone keeps the hook
            np.testing.assert_allclose(other["w"], [-0.05, -0.05], rtol=1e-12)
    finally:
        fastop.disable_static()


def test_a_program_registers_one_hook_per_learning_rate():
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            w = static.create_parameter([2], "float32", name="w")
            opt = optimizer.Adam(step_decay())
            opt.minimize((w * static.data("c", [2], "float32")).sum())
            assert len(main._run_hooks) == 1
            optimizer.SGD(0.1).minimize((w * 2.0).sum())    # a float rate: no hook
    finally:
        fastop.disable_static()
    assert len(main._run_hooks) == 1 and main._run_hooks[0].name == f"{opt._name}.learning_rate"


def test_set_lr_is_refused_with_a_scheduler():
    opt = optimizer.SGD(step_decay(), parameters=[fastop.to_tensor(np.ones(2))])
    with pytest.raises(RuntimeError, match=r"SGD.set_lr: the learning rate comes from an "
                                           r"LRScheduler \(\w+\); step the scheduler "
                                           r"instead"):
        opt.set_lr(0.1)
    assert opt.get_lr() == 0.2


def test_bad_learning_rate_type_names_the_scheduler_option():
    with pytest.raises(TypeError, match="learning_rate must be a non-negative float or an "
                                        "LRScheduler, got str 'fast'"):
        optimizer.Adam("fast", parameters=[fastop.to_tensor(np.ones(2))])


@pytest.mark.parametrize("kind", ["momentum", "adamw"])
def test_state_dict_with_scheduler_resumes_identically(kind, tmp_path):
    grads = step_grads("float64") * 2                # 2 * STEPS steps

    def train(params, opt, steps):
        for g in steps:
            for p, gi in zip(params, g):
                p.grad = fastop.to_tensor(gi)
            opt.step()
            opt.clear_grad()
            opt._learning_rate.step()

    params = [fastop.to_tensor(v, stop_gradient=False) for v in start_values("float64")]
    opt = make(kind, 0.05, None, params, learning_rate=step_decay())
    train(params, opt, grads[:STEPS])
    state = opt.state_dict()
    assert "LR" not in state and state["LR_Scheduler"] == {"last_epoch": STEPS,
                                                           "last_lr": 0.2 * 0.5 ** STEPS}
    fastop.save({"params": {str(i): p for i, p in enumerate(params)}, "opt": state},
                tmp_path / "ckpt.pdopt")
    train(params, opt, grads[STEPS:])
    expected = [p.numpy().copy() for p in params]

    ckpt = fastop.load(tmp_path / "ckpt.pdopt")
    resumed = [fastop.to_tensor(ckpt["params"][str(i)].numpy(), stop_gradient=False)
               for i in range(len(SHAPES))]
    sched = step_decay()
    opt2 = make(kind, 0.05, None, resumed, learning_rate=sched)
    opt2.set_state_dict(ckpt["opt"])
    assert (sched.last_epoch, opt2.get_lr()) == (STEPS, 0.2 * 0.5 ** STEPS)
    assert type(sched.last_epoch) is int
    train(resumed, opt2, grads[STEPS:])
    for p, w in zip(resumed, expected):
        np.testing.assert_array_equal(p.numpy(), w)

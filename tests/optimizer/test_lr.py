"""Learning-rate schedules against their formulas (Paddle's documented ones) and hand
tables, plus state round trips and bad arguments."""
import math

import numpy as np
import pytest

import fastop
from fastop.optimizer import lr


def _rates(scheduler, epochs):
    """The rate of epochs 0 .. epochs-1 (read, then step, as a training loop does)."""
    out = []
    for _ in range(epochs):
        out.append(scheduler())
        scheduler.step()
    return out


def test_submodule_is_exported_from_fastop_optimizer():
    assert fastop.optimizer.lr is lr
    assert "lr" in fastop.optimizer.__all__


# ------------------------------------------------------------------ formulas, epoch by epoch

FORMULAS = [
    (lambda: lr.NoamDecay(d_model=0.01, warmup_steps=100, learning_rate=2.0),
     lambda e: 2.0 * 0.01 ** -0.5 * min(1 if e == 0 else e ** -0.5, e * 100 ** -1.5)),
    (lambda: lr.NaturalExpDecay(0.5, gamma=0.1), lambda e: 0.5 * math.exp(-0.1 * e)),
    (lambda: lr.InverseTimeDecay(0.5, gamma=0.1), lambda e: 0.5 / (1 + 0.1 * e)),
    (lambda: lr.PolynomialDecay(0.5, decay_steps=20),
     lambda e: (0.5 - 1e-4) * (1 - min(e, 20) / 20) + 1e-4),
    (lambda: lr.PolynomialDecay(0.5, decay_steps=7, end_lr=0.01, power=2.0, cycle=True),
     lambda e: (0.49 * (1 - e / (7 * max(math.ceil(e / 7), 1))) ** 2) + 0.01),
    (lambda: lr.ExponentialDecay(0.5, gamma=0.9), lambda e: 0.5 * 0.9 ** e),
    (lambda: lr.StepDecay(0.5, step_size=3, gamma=0.5), lambda e: 0.5 * 0.5 ** (e // 3)),
    (lambda: lr.MultiStepDecay(0.5, milestones=[2, 5, 9], gamma=0.8),
     lambda e: 0.5 * 0.8 ** sum(e >= m for m in (2, 5, 9))),
    (lambda: lr.LambdaDecay(0.5, lr_lambda=lambda e: 1 / (1 + e)), lambda e: 0.5 / (1 + e)),
    (lambda: lr.MultiplicativeDecay(0.5, lr_lambda=lambda e: 0.9 if e % 2 else 1.0),
     lambda e: 0.5 * 0.9 ** ((e + 1) // 2)),
    (lambda: lr.CosineAnnealingDecay(0.5, T_max=10, eta_min=0.05),
     lambda e: 0.05 + 0.45 * (1 + math.cos(math.pi * e / 10)) / 2),
    (lambda: lr.LinearLR(0.5, total_steps=8, start_factor=0.25, end_factor=0.75),
     lambda e: 0.5 * (0.25 + 0.5 * min(e, 8) / 8)),
    (lambda: lr.LinearWarmup(0.3, warmup_steps=5, start_lr=0.0, end_lr=0.3),
     lambda e: 0.3 * e / 5 if e < 5 else 0.3),
    (lambda: lr.PiecewiseDecay(boundaries=[3, 6, 9], values=[0.1, 0.2, 0.3, 0.4]),
     lambda e: [0.1, 0.2, 0.3, 0.4][sum(e >= b for b in (3, 6, 9))]),
]


@pytest.mark.parametrize("make, formula", FORMULAS)
def test_schedule_follows_its_formula(make, formula):
    epochs = 45
    got = _rates(make(), epochs)
    np.testing.assert_allclose(got, [formula(e) for e in range(epochs)], rtol=1e-12,
                               atol=1e-15)


@pytest.mark.parametrize("make, formula", FORMULAS)
def test_jumping_to_an_epoch_gives_its_rate(make, formula):
    scheduler = make()
    for epoch in (7, 3, 30, 0, 12):
        scheduler.step(epoch)
        assert scheduler.last_epoch == epoch
        assert scheduler() == pytest.approx(formula(epoch), rel=1e-12, abs=1e-15)


# ------------------------------------------------------------------ tables from Paddle's docs

def test_tables_computed_from_the_documented_formulas():
    step = lr.StepDecay(0.5, step_size=30, gamma=0.1)
    step.step(29), step.step(30)
    assert step() == pytest.approx(0.05)
    step.step(60)
    assert step() == pytest.approx(0.005)
    multi = lr.MultiStepDecay(0.5, milestones=[30, 50], gamma=0.1)
    assert [multi.step(e) or round(multi(), 10) for e in (29, 30, 49, 50)] == \
        [0.5, 0.05, 0.05, 0.005]
    assert _rates(lr.LambdaDecay(0.5, lambda e: 0.95 ** e), 3) == \
        pytest.approx([0.5, 0.475, 0.45125])
    assert _rates(lr.MultiplicativeDecay(0.5, lambda e: 0.95), 3) == \
        pytest.approx([0.5, 0.475, 0.45125])
    noam = lr.NoamDecay(d_model=2, warmup_steps=200, learning_rate=0.01)
    noam.step(20)
    assert noam() == pytest.approx(5e-5)          # 0.01 * 2**-0.5 * 200**-1.5 * 20
    assert _rates(lr.PolynomialDecay(0.5, decay_steps=4, end_lr=0.1), 7) == \
        pytest.approx([0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1])
    cyc = lr.PolynomialDecay(0.5, decay_steps=4, end_lr=0.1, cycle=True)
    assert [cyc.step(e) or cyc() for e in (0, 4, 5)] == pytest.approx([0.5, 0.1, 0.25])
    assert _rates(lr.ExponentialDecay(0.5, 0.9), 4) == \
        pytest.approx([0.5, 0.45, 0.405, 0.3645])


# ------------------------------------------------------------------ the base class

def test_a_new_scheduler_is_at_epoch_zero_and_call_is_the_rate():
    s = lr.ExponentialDecay(0.5, gamma=0.5)
    assert (s.last_epoch, s.last_lr, s(), s.base_lr) == (0, 0.5, 0.5, 0.5)
    s.step()
    assert (s.last_epoch, s()) == (1, 0.25)
    resumed = lr.ExponentialDecay(0.5, gamma=0.5, last_epoch=2)
    assert (resumed.last_epoch, resumed()) == (3, 0.0625)


def test_state_dict_round_trip_resumes_the_schedule():
    s = lr.CosineAnnealingDecay(1.0, T_max=5)
    for _ in range(3):
        s.step()
    state = s.state_dict()
    assert state == {"last_epoch": 3, "last_lr": s()}
    t = lr.CosineAnnealingDecay(1.0, T_max=5)
    t.set_state_dict(state)
    assert _rates(t, 6) == pytest.approx(_rates(s, 6))
    with pytest.raises(RuntimeError, match=r"the state has no \['last_lr'\]"):
        t.set_state_dict({"last_epoch": 1})
    with pytest.warns(UserWarning, match=r"unused entries \['extra'\]"):
        t.set_dict({**state, "extra": 1})


def test_verbose_prints_each_update(capsys):
    s = lr.StepDecay(0.5, step_size=1, gamma=0.5, verbose=True)
    s.step()
    assert capsys.readouterr().out.splitlines() == [
        "Epoch 0: StepDecay set learning rate to 0.5.",
        "Epoch 1: StepDecay set learning rate to 0.25."]


def test_a_subclass_defines_get_lr():
    class Constant(lr.LRScheduler):
        def get_lr(self):
            return self.base_lr
    assert Constant(0.3)() == 0.3
    with pytest.raises(NotImplementedError, match="must define get_lr"):
        lr.LRScheduler(0.1)


@pytest.mark.parametrize("make, error, message", [
    (lambda: lr.StepDecay("0.1", 2), TypeError, "learning_rate must be a float or int"),
    (lambda: lr.StepDecay(-0.1, 2), ValueError, "learning_rate must be non-negative"),
    (lambda: lr.StepDecay(0.1, 2.0), TypeError, "step_size must be an int"),
    (lambda: lr.StepDecay(0.1, 0), ValueError, "step_size must be a positive integer"),
    (lambda: lr.StepDecay(0.1, 2, gamma=1.0), ValueError, "gamma must be < 1.0"),
    (lambda: lr.StepDecay(0.1, 2, last_epoch=-2), ValueError, "last_epoch must be"),
    (lambda: lr.ExponentialDecay(0.1, 1.5), ValueError, r"gamma must be in \(0, 1\)"),
    (lambda: lr.NaturalExpDecay(0.1, 0.0), ValueError, "gamma must be positive"),
    (lambda: lr.NoamDecay(0, 10), ValueError, "d_model must be positive"),
    (lambda: lr.PiecewiseDecay([], [0.1]), ValueError, "boundaries must not be empty"),
    (lambda: lr.PiecewiseDecay([2], [0.1]), ValueError, "one more entry than boundaries"),
    (lambda: lr.PiecewiseDecay([3, 2], [1, 2, 3]), ValueError, "boundaries must increase"),
    (lambda: lr.PolynomialDecay(0.1, 0), ValueError, "decay_steps must be a positive"),
    (lambda: lr.PolynomialDecay(0.1, 5, power=0), ValueError, "power must be positive"),
    (lambda: lr.MultiStepDecay(0.1, 5), TypeError, "milestones must be a list or tuple"),
    (lambda: lr.MultiStepDecay(0.1, [5, 5]), ValueError, "milestones must increase"),
    (lambda: lr.LambdaDecay(0.1, 0.9), TypeError, "lr_lambda must be a function"),
    (lambda: lr.MultiplicativeDecay(0.1, None), TypeError, "lr_lambda must be a function"),
    (lambda: lr.LinearWarmup(0.1, 5, 0.2, 0.1), ValueError, "must be greater than start_lr"),
    (lambda: lr.LinearWarmup("x", 5, 0.0, 0.1), TypeError, "learning_rate must be a float"),
    (lambda: lr.CosineAnnealingDecay(0.1, 5.0), TypeError, "T_max must be an int"),
    (lambda: lr.LinearLR(0.1, 5, start_factor=0), ValueError, "start_factor must be in"),
    (lambda: lr.LinearLR(0.1, 0), ValueError, "total_steps must be a positive"),
    (lambda: lr.OneCycleLR(1.0, 10, phase_pct=1), TypeError, "phase_pct must be a float"),
    (lambda: lr.OneCycleLR(1.0, 10, anneal_strategy="exp"), ValueError, "'cos' or 'linear'"),
    (lambda: lr.OneCycleLR(1.0, 10, phase_pct=0.6, three_phase=True), ValueError,
     "must be < 0.5 with three_phase"),
    (lambda: lr.OneCycleLR(1.0, 10, phase_pct=0.1), ValueError, "phase .* at least"),
    (lambda: lr.CyclicLR(0.1, 1.0, 2, mode="sine"), ValueError, "mode must be"),
    (lambda: lr.CyclicLR(0.1, 1.0, 2, exp_gamma=1), TypeError, "exp_gamma must be a float"),
    # Paddle type-checks these counts (TypeError) before their sign (ValueError)
    (lambda: lr.OneCycleLR(0.1, total_steps="20"), TypeError, "total_steps must be an int"),
    (lambda: lr.OneCycleLR(0.1, total_steps=-10), ValueError, "total_steps must be a positive"),
    (lambda: lr.CyclicLR(0.5, 1.0, step_size_up="10"), TypeError, "step_size_up must be an int"),
    (lambda: lr.CyclicLR(0.5, 1.0, step_size_up=-1), ValueError, "step_size_up must be a pos"),
    (lambda: lr.CyclicLR(0.5, 1.0, 5, step_size_down=2.0), TypeError,
     "step_size_down must be an int"),
    (lambda: lr.CyclicLR(0.5, 1.0, 5, step_size_down=-1), ValueError,
     "step_size_down must be a positive"),
    (lambda: lr.StepDecay(0.5, step_size=2.0), TypeError, "step_size must be an int"),
    (lambda: lr.CosineAnnealingWarmRestarts(0.1, T_0=0), ValueError, "T_0 must be a positive"),
    (lambda: lr.ReduceOnPlateau(0.1, mode="low"), ValueError, "mode must be 'min' or 'max'"),
    (lambda: lr.ReduceOnPlateau(0.1, factor=1.0), ValueError, "factor must be < 1.0"),
    (lambda: lr.ReduceOnPlateau(0.1, threshold_mode="x"), ValueError, "threshold_mode"),
])
def test_bad_arguments_name_the_scheduler_and_argument(make, error, message):
    with pytest.raises(error, match=message) as info:
        make()
    assert str(info.value).split(":")[0] in {c for c in lr.__all__}


# ------------------------------------------------------------------ LinearWarmup

def test_linear_warmup_hands_over_to_a_scheduler_from_its_epoch_zero():
    inner = lr.StepDecay(0.4, step_size=2, gamma=0.5)
    s = lr.LinearWarmup(inner, warmup_steps=4, start_lr=0.0, end_lr=0.4)
    assert _rates(s, 9) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.4, 0.2, 0.2, 0.1])
    state = s.state_dict()
    assert state["LinearWarmup_LR"] == {"last_epoch": 5, "last_lr": 0.1}
    fresh = lr.LinearWarmup(lr.StepDecay(0.4, step_size=2, gamma=0.5), 4, 0.0, 0.4)
    fresh.set_state_dict(state)
    assert _rates(fresh, 3) == pytest.approx(_rates(s, 3))
    with pytest.raises(RuntimeError, match="'LinearWarmup_LR'"):
        fresh.set_state_dict({"last_epoch": 1, "last_lr": 0.1})


# ------------------------------------------------------------------ MultiplicativeDecay

def test_multiplicative_decay_calls_the_factor_once_per_epoch_in_order():
    calls = []

    def factor(epoch):
        calls.append(epoch)
        return 0.5
    s = lr.MultiplicativeDecay(1.0, factor)
    _rates(s, 5)
    assert calls == [1, 2, 3, 4, 5]
    s.step(2)                                      # a jump back recomputes from the start
    assert s() == 0.25


# ------------------------------------------------------------------ ReduceOnPlateau

def test_reduce_on_plateau_cuts_after_patience_then_cools_down():
    s = lr.ReduceOnPlateau(1.0, factor=0.5, patience=2, cooldown=1)
    rates = []
    for loss in [5, 4, 4, 4, 4, 4, 4, 4, 4]:
        s.step(loss)
        rates.append(s())
    # bad epochs 1, 2, 3 (> patience) -> cut; 1 epoch cooldown; bad 1, 2, 3 -> cut again
    assert rates == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.25]
    assert s.last_epoch == 9
    assert set(s.state_dict()) == {"cooldown_counter", "best", "num_bad_epochs",
                                   "last_epoch", "last_lr"}


@pytest.mark.parametrize("mode, threshold_mode, threshold, metrics, cut", [
    ("min", "rel", 0.1, [10.0, 9.5, 9.4], True),     # 9.5 is not below 10 - 1.0
    ("min", "rel", 0.01, [10.0, 9.5, 9.0], False),
    ("min", "abs", 0.6, [10.0, 9.5, 9.45], True),    # neither is below 10 - 0.6
    ("max", "rel", 0.1, [1.0, 1.05, 1.09], True),
    ("max", "abs", 0.01, [1.0, 1.05, 1.1], False),
])
def test_reduce_on_plateau_improvement_rules(mode, threshold_mode, threshold, metrics, cut):
    s = lr.ReduceOnPlateau(1.0, mode=mode, factor=0.5, patience=1, threshold=threshold,
                           threshold_mode=threshold_mode)
    for m in metrics:
        s.step(m)
    assert s() == (0.5 if cut else 1.0)


def test_reduce_on_plateau_respects_min_lr_and_epsilon_and_takes_tensors():
    s = lr.ReduceOnPlateau(1.0, factor=0.1, patience=0, min_lr=0.05)
    for m in [fastop.to_tensor([3.0]), np.array(3.0), 3.0, 3]:
        s.step(m)
    assert s() == 0.05
    tiny = lr.ReduceOnPlateau(1e-9, factor=0.5, patience=0)
    tiny.step(1.0), tiny.step(1.0)
    assert tiny() == 1e-9                           # a cut smaller than epsilon is skipped
    with pytest.raises(ValueError, match="metrics must hold one value, got 2"):
        s.step(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="metrics must be a number"):
        s.step("low")


# ------------------------------------------------------------------ cyclic schedules

def test_one_cycle_two_phases():
    s = lr.OneCycleLR(max_learning_rate=1.0, total_steps=10, phase_pct=0.3,
                      anneal_strategy="linear", end_learning_rate=0.0)
    rates = _rates(s, 10)
    # up from 1/25 to 1 over steps 0..2, then down to 0 over steps 2..9
    expected = [0.04 + 0.96 * e / 2 for e in range(3)] + [1.0 - (e - 2) / 7 for e in
                                                           range(3, 10)]
    assert rates == pytest.approx(expected)
    assert s.last_epoch == 10                     # stepping to total_steps is allowed
    with pytest.raises(ValueError, match="past total_steps=10"):
        s.step()


def test_one_cycle_cosine_and_three_phases():
    s = lr.OneCycleLR(2.0, total_steps=21, divide_factor=4.0, end_learning_rate=0.01,
                      phase_pct=0.25, three_phase=True)
    rates = _rates(s, 21)
    up_end, down_end = 0.25 * 21 - 1, 2 * 0.25 * 21 - 2
    assert rates[0] == pytest.approx(0.5)
    cos = lambda a, b, p: b + (a - b) / 2 * (math.cos(math.pi * p) + 1)  # noqa: E731
    for e, rate in enumerate(rates):
        if e <= up_end:
            want = cos(0.5, 2.0, e / up_end)
        elif e <= down_end:
            want = cos(2.0, 0.5, (e - up_end) / (down_end - up_end))
        else:
            want = cos(0.5, 0.01, (e - down_end) / (20 - down_end))
        assert rate == pytest.approx(want)
    assert rates[-1] == pytest.approx(0.01)


@pytest.mark.parametrize("mode, expected", [
    ("triangular", [0.5, 0.75, 1.0, 0.75, 0.5, 0.75, 1.0, 0.75, 0.5]),
    ("triangular2", [0.5, 0.75, 1.0, 0.75, 0.5, 0.625, 0.75, 0.625, 0.5]),
])
def test_cyclic_lr_triangles(mode, expected):
    s = lr.CyclicLR(0.5, 1.0, step_size_up=2, mode=mode)
    assert _rates(s, 9) == pytest.approx(expected)


def test_cyclic_lr_exp_range_and_custom_scale():
    s = lr.CyclicLR(0.5, 1.0, step_size_up=1, step_size_down=3, mode="exp_range",
                    exp_gamma=0.9)
    heights = [0, 1, 2 / 3, 1 / 3, 0, 1]
    assert _rates(s, 6) == pytest.approx([0.5 + 0.5 * h * 0.9 ** e
                                          for e, h in enumerate(heights)])
    custom = lr.CyclicLR(0.5, 1.0, 2, scale_fn=lambda x: 1 / x, scale_mode="cycle")
    assert _rates(custom, 7)[6] == pytest.approx(0.5 + 0.5 / 2)


def test_cosine_warm_restarts_periods_grow_and_state_resumes():
    s = lr.CosineAnnealingWarmRestarts(1.0, T_0=2, T_mult=2, eta_min=0.0)
    rates = _rates(s, 8)
    # periods: epochs 0-1 (T=2), 2-5 (T=4), 6-13 (T=8)
    positions = [(0, 2), (1, 2), (0, 4), (1, 4), (2, 4), (3, 4), (0, 8), (1, 8)]
    assert rates == pytest.approx([(1 + math.cos(math.pi * c / t)) / 2 for c, t in positions])
    state = s.state_dict()
    assert (state["T_cur"], state["T_i"]) == (2, 8)
    t = lr.CosineAnnealingWarmRestarts(1.0, T_0=2, T_mult=2)
    t.set_state_dict(state)
    assert _rates(t, 3) == pytest.approx(_rates(s, 3))
    s.step(4.5)                                     # fractional: within epoch 4
    assert s.last_epoch == 4 and s() == pytest.approx((1 + math.cos(math.pi * 2.5 / 4)) / 2)
    with pytest.raises(ValueError, match="epoch must be non-negative"):
        s.step(-1)


def test_docstring_examples():
    import doctest
    result = doctest.testmod(lr, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

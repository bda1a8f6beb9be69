"""fastop.regularizer: L1Decay/L2Decay's decay terms (eager and static), their
arguments, and how the optimizers read them (a float weight_decay is L2Decay)."""
import numpy as np
import pytest

import fastop
from fastop import optimizer
from fastop.regularizer import L1Decay, L2Decay, WeightDecayRegularizer


def test_decay_terms_eager():
    x = np.array([-2.0, 0.0, 0.5, 3.0])
    np.testing.assert_array_equal(L2Decay(0.5)(fastop.to_tensor(x)).numpy(), 0.5 * x)
    np.testing.assert_array_equal(L1Decay(0.5)(fastop.to_tensor(x)).numpy(),
                                  [-0.5, 0.0, 0.5, 0.5])


@pytest.mark.parametrize("cls", [L1Decay, L2Decay])
def test_decay_terms_static_match_eager(cls, run_static):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    eager = cls(0.1)(fastop.to_tensor(x)).numpy()
    np.testing.assert_array_equal(run_static(cls(0.1), x)[0], eager)


def test_defaults_names_and_kinds():
    assert L2Decay().coeff == 0.0 and L1Decay(0.25).coeff == 0.25
    assert (L2Decay.method, L1Decay.method) == ("l2_decay", "l1_decay")
    assert isinstance(L1Decay(), WeightDecayRegularizer)
    assert str(L2Decay(0.5)) == "L2Decay, coeff=0.500000"
    assert repr(L1Decay(0.5)) == "L1Decay(coeff=0.5)"
    assert fastop.regularizer.L2Decay is L2Decay


@pytest.mark.parametrize("coeff,error,match", [
    ("0.1", TypeError, "L2Decay: coeff must be a float, got str"),
    (True, TypeError, "coeff must be a float"),
    (-0.1, ValueError, "L2Decay: coeff must be a finite non-negative float, got -0.1"),
    (float("nan"), ValueError, "finite non-negative"),
])
def test_bad_coeff(coeff, error, match):
    with pytest.raises(error, match=match):
        L2Decay(coeff)


def test_optimizers_read_a_float_as_l2():
    params = [fastop.to_tensor(np.ones(3), stop_gradient=False)]
    assert optimizer.SGD(parameters=params, weight_decay=0.1).regularization.method == "l2_decay"
    assert optimizer.Adam(parameters=params, weight_decay=L1Decay(0.1)).regularization.coeff == 0.1
    assert optimizer.Momentum(parameters=params).regularization is None

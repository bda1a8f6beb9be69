"""Initializers: statistics, fans, determinism under fastop.seed, config round trip."""
import math

import numpy as np
import pytest

from fastop import _random
from fastop import initializer as I


def test_compute_fans_follow_paddle():
    assert I.compute_fans([]) == (1, 1)
    assert I.compute_fans([7]) == (7, 7)
    assert I.compute_fans([784, 256]) == (784, 256)
    assert I.compute_fans([16, 3, 5, 5]) == (75, 400)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_constant(dtype):
    out = I.Constant(2.5)([3, 2], dtype)
    assert out.dtype == np.dtype(dtype) and out.shape == (3, 2)
    assert (out == 2.5).all()


def test_uniform_range_and_mean():
    _random.seed(0)
    out = I.Uniform(-0.5, 1.5)([200, 100], "float64")
    assert out.min() >= -0.5 and out.max() < 1.5
    assert abs(out.mean() - 0.5) < 0.02


def test_normal_statistics():
    _random.seed(1)
    out = I.Normal(1.0, 2.0)([400, 100], "float64")
    assert abs(out.mean() - 1.0) < 0.03 and abs(out.std() - 2.0) < 0.03


def test_truncated_normal_stays_within_two_std():
    _random.seed(2)
    out = I.TruncatedNormal(0.0, 0.5)([300, 100], "float64")
    assert np.abs(out).max() <= 1.0
    assert out.std() < 0.5  # truncation narrows the spread


def test_xavier_uniform_limit():
    _random.seed(3)
    out = I.XavierUniform()([300, 200], "float64")
    limit = math.sqrt(6 / 500)
    assert np.abs(out).max() <= limit
    assert np.abs(out).max() > 0.99 * limit


def test_xavier_normal_std_with_gain_and_given_fans():
    _random.seed(4)
    out = I.XavierNormal(fan_in=10, fan_out=40, gain=2.0)([300, 300], "float64")
    assert abs(out.std() - 2.0 * math.sqrt(2 / 50)) < 0.01


@pytest.mark.parametrize("nonlinearity,gain", [("relu", math.sqrt(2)), ("tanh", 5 / 3),
                                               ("linear", 1.0)])
def test_kaiming_normal_std(nonlinearity, gain):
    _random.seed(5)
    out = I.KaimingNormal(nonlinearity=nonlinearity)([400, 300], "float64")
    assert abs(out.std() / (gain / math.sqrt(400)) - 1) < 0.02


def test_kaiming_uniform_limit_leaky_relu():
    _random.seed(6)
    out = I.KaimingUniform(negative_slope=0.2, nonlinearity="leaky_relu")([50, 4000], "float64")
    limit = math.sqrt(2 / 1.04) * math.sqrt(3 / 50)
    assert np.abs(out).max() <= limit and np.abs(out).max() > 0.99 * limit


def test_seed_makes_draws_reproducible():
    _random.seed(42)
    a = I.XavierUniform()([5, 4], "float32")
    _random.seed(42)
    b = I.XavierUniform()([5, 4], "float32")
    c = I.XavierUniform()([5, 4], "float32")
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(b, c)


def test_explicit_generator_is_used():
    a = I.Normal()([4], generator=np.random.default_rng(7))
    b = I.Normal()([4], generator=np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32


@pytest.mark.parametrize("init", [I.Constant(0.3), I.Normal(0.1, 0.2), I.Uniform(-2, 3),
                                  I.TruncatedNormal(0, 0.1), I.XavierUniform(gain=2.0),
                                  I.XavierNormal(fan_in=3), I.KaimingNormal(fan_in=9),
                                  I.KaimingUniform(nonlinearity="tanh")], ids=repr)
def test_config_round_trip(init):
    config = init.config()
    assert all(v is None or isinstance(v, (str, int, float)) for v in config.values())
    rebuilt = I.from_config(config)
    assert type(rebuilt) is type(init) and rebuilt == init
    np.testing.assert_array_equal(rebuilt([3, 4], generator=np.random.default_rng(0)),
                                  init([3, 4], generator=np.random.default_rng(0)))


def test_from_config_unknown_type_raises():
    with pytest.raises(ValueError, match="unknown initializer type 'Orthogonal'"):
        I.from_config({"type": "Orthogonal"})


def test_negative_shape_raises():
    with pytest.raises(ValueError, match=r"unknown or negative shape \[-1, 3\]"):
        I.Constant()([-1, 3])


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="low"):
        I.Uniform(1.0, 0.0)
    with pytest.raises(ValueError, match="unknown nonlinearity 'swishy'"):
        I.KaimingNormal(nonlinearity="swishy")

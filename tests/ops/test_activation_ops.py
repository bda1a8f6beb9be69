"""The activation ops (fastop::gelu, silu, leaky_relu, softplus and their _grad ops) as
registry ops: rules against finite differences in float64 (first and second order, each
attribute setting), eager against numpy and against static."""
import numpy as np
import pytest

import fastop
from fastop.ops import registry
from fastop.ops.checking import check_grad_rule
from ..reference import activation as ref

CASES = [("gelu", {}), ("gelu", {"approximate": True}), ("silu", {}),
         ("leaky_relu", {"negative_slope": 0.2}), ("softplus", {}),
         ("softplus", {"beta": 2.0, "threshold": 1.0})]
IDS = [n + "".join(f"-{k}={v}" for k, v in a.items()) for n, a in CASES]


def away_from_kinks(*shape, seed=1):
    x = np.random.default_rng(seed).uniform(0.1, 2.5, shape)
    return x * np.where(np.arange(x.size).reshape(shape) % 2, 1.0, -1.0)


@pytest.mark.parametrize("name,attrs", CASES, ids=IDS)
def test_rules_match_finite_differences(name, attrs):
    x = away_from_kinks(3, 4)
    check_grad_rule(f"fastop::{name}", [x], attrs)
    check_grad_rule(f"fastop::{name}_grad", [x, away_from_kinks(3, 4, seed=2)], attrs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,attrs", CASES, ids=IDS)
def test_eager_matches_numpy_and_static(name, attrs, dtype, run_static):
    x = (np.random.default_rng(3).standard_normal((4, 5)) * 3).astype(dtype)
    op = registry.get(f"fastop::{name}")
    eager = op(fastop.to_tensor(x), **attrs).numpy()
    np.testing.assert_allclose(eager, getattr(ref, name)(x, **attrs),
                               rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-6)
    np.testing.assert_array_equal(run_static(lambda v: op(v, **attrs), x)[0], eager)

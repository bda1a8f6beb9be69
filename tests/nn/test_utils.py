"""fastop.nn.utils (PaddlePaddle's paddle.nn.utils): clip_grad_norm_ / clip_grad_value_
scale or clamp the .grad of parameters in place, eager mode."""
import numpy as np
import pytest

import fastop
from fastop import nn, static
from fastop.nn.utils import clip_grad_norm_, clip_grad_value_

RNG = np.random.default_rng(5)


def with_grads(*grads):
    params = []
    for g in grads:
        p = fastop.to_tensor(np.zeros_like(g), stop_gradient=False)
        p.grad = fastop.to_tensor(g)
        params.append(p)
    return params


@pytest.mark.parametrize("norm_type", [2, 1, float("inf"), 0])
def test_clip_grad_norm_scales_all_gradients_by_one_total_norm(norm_type):
    g1, g2 = RNG.standard_normal((3, 4)), RNG.standard_normal(5)
    g2[0] = 0.0
    params = with_grads(g1, g2) + [fastop.ones([2], dtype="float64")]   # last: no grad
    both = np.concatenate([g1.ravel(), g2])
    total = {2: np.sqrt((both ** 2).sum()), 1: np.abs(both).sum(),
             float("inf"): np.abs(both).max(), 0: float(np.count_nonzero(both))}[norm_type]
    max_norm = total / 4
    got = clip_grad_norm_(params, max_norm=max_norm, norm_type=norm_type)
    assert got.shape == [] and got.dtype == fastop.float64
    np.testing.assert_allclose(float(got), total, rtol=1e-12)
    coef = max_norm / (total + 1e-6)
    np.testing.assert_allclose(params[0].grad.numpy(), g1 * coef, rtol=1e-12)
    np.testing.assert_allclose(params[1].grad.numpy(), g2 * coef, rtol=1e-12)
    assert params[2].grad is None


def test_clip_grad_norm_leaves_gradients_under_max_norm_and_takes_one_tensor():
    g = np.array([0.3, -0.4])
    p, = with_grads(g)
    assert float(clip_grad_norm_(p, max_norm=1.0)) == pytest.approx(0.5)
    np.testing.assert_array_equal(p.grad.numpy(), g)
    assert float(clip_grad_norm_([fastop.ones([2])], 1.0)) == 0.0       # no gradients


def test_clip_grad_norm_then_step_trains_with_the_clipped_gradient():
    layer = nn.Linear(3, 2)
    w0 = layer.weight.numpy().copy()
    (layer(fastop.ones([4, 3])) * 100.0).sum().backward()
    clip_grad_norm_(layer.parameters(), max_norm=1.0)
    grads = [p.grad.numpy() for p in layer.parameters()]
    assert np.sqrt(sum((g ** 2).sum() for g in grads)) == pytest.approx(1.0, rel=1e-5)
    fastop.optimizer.SGD(0.1, parameters=layer.parameters()).step()
    # float32 weights: an element near 0 carries the rounding of its float32 update
    np.testing.assert_allclose(layer.weight.numpy(), w0 - 0.1 * grads[0], rtol=1e-6,
                               atol=1e-7)


@pytest.mark.parametrize("call,error,match", [
    (lambda p: clip_grad_norm_(p, 1.0, norm_type=float("-inf")), ValueError,
     r"norm_type only supports \[inf, 0, 1, 2\], got -inf"),
    (lambda p: clip_grad_norm_(p, 1.0, norm_type=3), ValueError, "norm_type only supports"),
    (lambda p: clip_grad_norm_(3.0, 1.0), TypeError, "parameters must be a Tensor or an "),
    (lambda p: clip_grad_value_(p, -1), ValueError, r"clip_value must be >= 0 .* got -1"),
])
def test_clip_grad_norm_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call(with_grads(np.ones(2)))


def test_clip_grad_norm_error_if_nonfinite():
    p, = with_grads(np.array([np.inf, 1.0]))
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(p, 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(p.grad.numpy(), [np.inf, 1.0])       # untouched
    clip_grad_norm_(p, 1.0)                                              # allowed


def test_clip_grad_value_clamps_each_gradient():
    g = np.array([-3.0, -0.5, 0.2, 4.0])
    p, q = with_grads(g, g * 10)
    assert clip_grad_value_([p, q], 1.0) is None
    np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -1, 1))
    np.testing.assert_array_equal(q.grad.numpy(), np.clip(g * 10, -1, 1))


def test_eager_only():
    fastop.enable_static()
    try:
        with static.program_guard(static.Program(), static.Program()):
            with pytest.raises(RuntimeError, match="only run in dynamic"):
                clip_grad_norm_([], 1.0)
    finally:
        fastop.disable_static()


def test_reachable_as_paddle_spells_it():
    assert fastop.nn.utils.clip_grad_norm_ is clip_grad_norm_

"""LayerNorm and BatchNorm1D (and F.layer_norm / F.batch_norm): forward against numpy,
gradients by gradcheck, BatchNorm's running statistics against a numpy re-implementation
of PaddlePaddle's update, train/eval, state dicts through fastop.save/load, eager equal to
static, bad arguments."""
import os

import numpy as np
import pytest

import fastop
import fastop.nn.functional as F
from fastop import nn
from fastop.autograd import gradcheck, gradgradcheck
from ..reference import norm as ref

TOL = {"float32": dict(rtol=2e-5, atol=2e-5), "float64": dict(rtol=1e-10, atol=1e-12)}


def rand(*shape, dtype="float64", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def t(array, grad=False):
    return fastop.to_tensor(array, stop_gradient=not grad)


# ----------------------------------------------------------------------------- LayerNorm

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("normalized_shape", [5, [5], [4, 5]], ids=str)
def test_layer_norm_layer_matches_numpy(dtype, normalized_shape):
    layer = nn.LayerNorm(normalized_shape)
    layer.to(dtype=dtype)
    size = int(np.prod(normalized_shape))
    assert layer.weight.shape == [size] and layer.bias.shape == [size]   # Paddle's shapes
    assert (layer.weight.numpy() == 1).all() and (layer.bias.numpy() == 0).all()
    w, b = rand(size, dtype=dtype, seed=1), rand(size, dtype=dtype, seed=2)
    layer.weight.set_value(w)
    layer.bias.set_value(b)
    x = rand(3, 4, 5, dtype=dtype)
    begin = 3 - (1 if isinstance(normalized_shape, int) else len(normalized_shape))
    np.testing.assert_allclose(layer(t(x)).numpy(), ref.layer_norm(x, w, b, 1e-5, begin)[0],
                               **TOL[dtype])


def test_layer_norm_without_weight_or_bias_and_epsilon():
    layer = nn.LayerNorm(6, epsilon=0.5, weight_attr=False, bias_attr=False)
    assert layer.weight is None and layer.bias is None and layer.parameters() == []
    x = rand(2, 6)
    np.testing.assert_allclose(layer(t(x)).numpy(), ref.layer_norm(x, None, None, 0.5, 1)[0],
                               **TOL["float64"])


def test_layer_norm_gradients():
    x, w, b = t(rand(3, 4), True), t(rand(4, seed=1), True), t(rand(4, seed=2), True)
    fn = lambda x, w, b: F.layer_norm(x, 4, w, b)     # noqa: E731
    assert gradcheck(fn, [x, w, b], eps=1e-6, atol=1e-6, rtol=1e-4)
    assert gradgradcheck(fn, [x, w, b], eps=1e-6, atol=1e-5, rtol=1e-3)


def test_layer_norm_eager_equals_static(run_static):
    fastop.seed(3)
    eager = nn.LayerNorm([2, 3])
    eager.weight.set_value(rand(6, dtype="float32", seed=4))
    x = rand(4, 2, 3, dtype="float32")
    holder = {}

    def build(v):
        holder["layer"] = nn.LayerNorm([2, 3])
        return holder["layer"](v)

    def load(scope):
        for name, value in eager.state_dict().items():
            scope.set(getattr(holder["layer"], name).name, value.numpy())

    np.testing.assert_array_equal(run_static(build, x, before_run=load)[0], eager(t(x)).numpy())


@pytest.mark.parametrize("args,message", [
    (([5, 4], [3]), r"normalized_shape \[3\] must be the last dims of x"),
    (([5, 4], [5, 4, 1]), "must be the last dims"),
])
def test_layer_norm_shape_mismatch_names_the_function(args, message):
    with pytest.raises(ValueError, match=message):
        F.layer_norm(t(np.ones(args[0])), args[1])
    with pytest.raises(ValueError, match="LayerNorm: normalized_shape"):
        nn.LayerNorm([0])


# ----------------------------------------------------------------------------- BatchNorm1D

class PaddleBatchNorm:
    """numpy re-implementation of PaddlePaddle's batch_norm (training and inference)."""

    def __init__(self, channels, momentum=0.9, epsilon=1e-5):
        self.mean, self.var = np.zeros(channels), np.ones(channels)
        self.momentum, self.epsilon = momentum, epsilon

    def __call__(self, x, weight, bias, training, channel_axis=1):
        axes = tuple(d for d in range(x.ndim) if d != channel_axis)
        shape = [-1 if d == channel_axis else 1 for d in range(x.ndim)]
        if training:
            mean, var = x.mean(axis=axes), x.var(axis=axes)        # biased variance
            self.mean = self.mean * self.momentum + mean * (1 - self.momentum)
            self.var = self.var * self.momentum + var * (1 - self.momentum)
        else:
            mean, var = self.mean, self.var
        xhat = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + self.epsilon)
        return xhat * weight.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,data_format", [((8, 3), "NCL"), ((6, 3, 5), "NCL"),
                                               ((6, 5, 3), "NLC")], ids=str)
def test_batch_norm_training_and_running_statistics_follow_paddle(shape, data_format, dtype):
    bn = nn.BatchNorm1D(3, momentum=0.8, data_format=data_format)
    bn.to(dtype=dtype)
    w, b = rand(3, seed=1), rand(3, seed=2)
    bn.weight.set_value(w.astype(dtype))
    bn.bias.set_value(b.astype(dtype))
    model = PaddleBatchNorm(3, momentum=0.8)
    axis = 2 if data_format == "NLC" else 1
    for step in range(3):
        x = (rand(*shape, seed=10 + step) * 2 + 1).astype(dtype)
        np.testing.assert_allclose(bn(t(x)).numpy(), model(x, w, b, True, axis), **TOL[dtype])
        np.testing.assert_allclose(bn._mean.numpy(), model.mean, **TOL[dtype])
        np.testing.assert_allclose(bn._variance.numpy(), model.var, **TOL[dtype])
    bn.eval()
    x = rand(*shape, seed=20).astype(dtype)
    np.testing.assert_allclose(bn(t(x)).numpy(), model(x, w, b, False, axis), **TOL[dtype])
    np.testing.assert_allclose(bn._mean.numpy(), model.mean, **TOL[dtype])   # unchanged


def test_batch_norm_use_global_stats_and_fixed_affine():
    bn = nn.BatchNorm1D(2, weight_attr=False, bias_attr=False, use_global_stats=True)
    assert bn.weight.stop_gradient and bn.bias.stop_gradient
    bn._mean.set_value(np.array([1.0, -1.0], "float32"))
    x = rand(4, 2, dtype="float32")
    out = bn(t(x)).numpy()      # training mode, but the running statistics are used
    np.testing.assert_allclose(out, (x - [1.0, -1.0]) / np.sqrt(1 + 1e-5), rtol=1e-6)
    np.testing.assert_array_equal(bn._mean.numpy(), [1.0, -1.0])


def test_batch_norm_gradients():
    x, w, b = t(rand(5, 3), True), t(rand(3, seed=1), True), t(rand(3, seed=2), True)

    def fn(x, w, b):
        return F.batch_norm(x, fastop.zeros([3], "float64"), fastop.ones([3], "float64"), w, b,
                            training=True)
    assert gradcheck(fn, [x, w, b], eps=1e-6, atol=1e-6, rtol=1e-4)
    assert gradgradcheck(fn, [x, w, b], eps=1e-6, atol=1e-5, rtol=1e-3)


def test_batch_norm_state_dict_round_trips_through_save_and_load(tmp_path):
    bn = nn.BatchNorm1D(4)
    for step in range(2):
        bn(t(rand(8, 4, dtype="float32", seed=step)))
    state = bn.state_dict()
    assert list(state) == ["weight", "bias", "_mean", "_variance"]      # Paddle's keys
    path = os.path.join(tmp_path, "bn.pdparams")
    fastop.save(state, path)
    fresh = nn.BatchNorm1D(4)
    assert fresh.set_state_dict(fastop.load(path)) == ([], [])
    for key, value in state.items():
        np.testing.assert_array_equal(getattr(fresh, key).numpy(), value.numpy())
    fresh.eval()
    bn.eval()
    x = t(rand(3, 4, dtype="float32", seed=9))
    np.testing.assert_array_equal(fresh(x).numpy(), bn(x).numpy())


def test_batch_norm_static_training_updates_the_scope(run_static):
    x = (rand(6, 3, seed=1) * 3 + 2).astype("float32")
    holder = {}

    def build(v):
        holder["bn"] = nn.BatchNorm1D(3)
        return holder["bn"](v)

    runs = run_static(build, x, runs=2)
    eager = nn.BatchNorm1D(3)
    for out in runs:
        np.testing.assert_allclose(out[0], eager(t(x)).numpy(), rtol=1e-5, atol=1e-6)
    model = PaddleBatchNorm(3)
    model(x.astype("float64"), np.ones(3), np.zeros(3), True)
    model(x.astype("float64"), np.ones(3), np.zeros(3), True)
    np.testing.assert_allclose(eager._mean.numpy(), model.mean, rtol=1e-5)


def test_batch_norm_static_eval_program(run_static):
    x = rand(4, 3, dtype="float32")

    def build(v):
        bn = nn.BatchNorm1D(3)
        bn.eval()
        return bn(v)
    np.testing.assert_allclose(run_static(build, x)[0], x / np.sqrt(1 + 1e-5), rtol=1e-6)


@pytest.mark.parametrize("call,message", [
    (lambda: nn.BatchNorm1D(3)(t(np.ones((2, 3, 4, 5), "float32"))), "2-D or 3-D input"),
    (lambda: nn.BatchNorm1D(3, data_format="NHWC"), "data_format must be"),
    (lambda: nn.BatchNorm1D(3)(t(np.ones((2, 4), "float32"))), r"running_mean must have shape \[4\]"),
    (lambda: F.batch_norm(t(np.ones(3)), t(np.ones(3)), t(np.ones(3))), "batch and a channel"),
])
def test_batch_norm_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("shape,data_format", [([0, 3], "NCL"), ([0, 3, 4], "NCL"),
                                               ([2, 0, 3], "NLC")])
def test_batch_norm_refuses_an_empty_batch_in_training_and_keeps_its_statistics(
        shape, data_format):
    bn = nn.BatchNorm1D(3, data_format=data_format)
    bn(fastop.to_tensor(np.arange(12, dtype="float32").reshape(4, 3) if data_format == "NCL"
                        else np.ones((2, 2, 3), "float32")))
    mean, variance = bn._mean.numpy().copy(), bn._variance.numpy().copy()
    with pytest.raises(ValueError, match=rf"BatchNorm1D '{bn.full_name()}': training needs "
                                         rf"at least one value per channel .*got an input of "
                                         rf"shape \[{', '.join(map(str, shape))}\]"):
        bn(fastop.zeros(shape))
    np.testing.assert_array_equal(bn._mean.numpy(), mean)
    np.testing.assert_array_equal(bn._variance.numpy(), variance)
    with pytest.raises(ValueError, match=r"batch_norm: training needs at least one value"):
        F.batch_norm(fastop.zeros(shape), bn._mean, bn._variance, training=True,
                     data_format=data_format)
    assert not np.isnan(bn._mean.numpy()).any()
    bn.eval()
    assert bn(fastop.zeros(shape)).shape == shape        # running statistics: no batch needed

"""Dropout and Embedding (and F.dropout, F.embedding, F.one_hot): dropout's mask
statistics, its scaling in both modes, eval mode, axis, gradients; embedding against
numpy with padding rows that never train; eager equal to static; bad arguments."""
import math

import numpy as np
import pytest

import fastop
import fastop.nn.functional as F
from fastop import nn
from fastop.autograd import gradcheck


def t(array, grad=False):
    return fastop.to_tensor(np.asarray(array), stop_gradient=not grad)


# ----------------------------------------------------------------------------- Dropout

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_mask_statistics_and_scaling(p, dtype):
    n = 200_000
    out = nn.Dropout(p)(fastop.ones([n], dtype)).numpy()
    kept = out != 0
    assert abs(kept.mean() - (1 - p)) < 6 * math.sqrt(p * (1 - p) / n)
    np.testing.assert_allclose(out[kept], 1 / (1 - p), rtol=1e-6)     # upscale_in_train
    assert abs(out.mean() - 1.0) < 6 * math.sqrt(p / (1 - p) / n)     # unbiased


def test_dropout_modes_in_train_and_eval():
    x = t(np.random.default_rng(0).standard_normal((50, 40)).astype("float32"))
    up, down = nn.Dropout(0.25), nn.Dropout(0.25, mode="downscale_in_infer")
    out = down(x).numpy()
    kept = out != 0
    np.testing.assert_array_equal(out[kept], x.numpy()[kept])           # not scaled
    up.eval()
    down.eval()
    assert up(x) is x                                                     # the identity
    np.testing.assert_allclose(down(x).numpy(), x.numpy() * 0.75, rtol=1e-6)
    assert F.dropout(x, 0.0) is x and F.dropout(x, 0.5, training=False) is x


def test_dropout_is_fresh_per_call_and_reproducible_with_seed():
    x = fastop.ones([64, 64])
    layer = nn.Dropout(0.5)
    fastop.seed(11)
    first, second = layer(x).numpy(), layer(x).numpy()
    assert not np.array_equal(first, second)
    fastop.seed(11)
    np.testing.assert_array_equal(layer(x).numpy(), first)


def test_dropout_axis_shares_the_mask_along_the_other_dims():
    out = F.dropout(fastop.ones([6, 500]), 0.5, axis=1).numpy()
    assert (out == out[0]).all()                                          # one draw per column
    assert 0.35 < (out[0] != 0).mean() < 0.65
    out = F.dropout(fastop.ones([4, 3, 200]), 0.5, axis=[0, 2]).numpy()
    assert (out == out[:, :1, :]).all()


def test_dropout_gradient_flows_through_kept_elements_only():
    x = t(np.random.default_rng(1).standard_normal((20, 30)), grad=True)
    out = F.dropout(x, 0.4)
    (out * 3).sum().backward()
    kept = out.numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, 3 / 0.6, 0.0), rtol=1e-12)


def test_dropout_in_static_mode_draws_per_run_and_eval_is_identity(run_static):
    x = np.ones((16, 16), "float32")
    runs = run_static(lambda v: nn.Dropout(0.5)(v), x, runs=2)
    assert not np.array_equal(runs[0][0], runs[1][0])
    assert set(np.unique(runs[0][0])) <= {0.0, 2.0}

    def evaluated(v):
        layer = nn.Dropout(0.5)
        layer.eval()
        return layer(v) * 1.0
    np.testing.assert_array_equal(run_static(evaluated, x)[0], x)


@pytest.mark.parametrize("args,message", [
    ({"p": 1.5}, r"dropout: p must be a number in \[0, 1\]"),
    ({"p": 0.5, "mode": "scale"}, "dropout: mode must be one of"),
    ({"p": 0.5, "axis": 3}, "dropout: axis 3 is out of range"),
])
def test_dropout_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        F.dropout(fastop.ones([2, 2]), **args)
    if "axis" not in args:
        with pytest.raises(ValueError, match=message.replace("dropout", "Dropout", 1)):
            nn.Dropout(**args)


# ----------------------------------------------------------------------------- Embedding

@pytest.mark.parametrize("padding_idx", [None, 0, -1])
def test_embedding_lookup_and_padding_rows_that_never_train(padding_idx):
    layer = nn.Embedding(6, 3, padding_idx=padding_idx)
    table = layer.weight.numpy().copy()
    ids = np.array([[0, 5, 2], [5, 5, 1]])
    out = layer(t(ids))
    want = table[ids]
    pad = None if padding_idx is None else padding_idx % 6
    if pad is not None:
        want[ids == pad] = 0
    np.testing.assert_array_equal(out.numpy(), want)
    (out * t(np.arange(18.0).reshape(2, 3, 3).astype("float32"))).sum().backward()
    grad = layer.weight.grad.numpy()
    expect = np.zeros_like(table)
    np.add.at(expect, ids.reshape(-1), np.arange(18.0).reshape(6, 3))
    if pad is not None:
        expect[pad] = 0
    np.testing.assert_allclose(grad, expect)


def test_embedding_gradient_check_and_static(run_static):
    w = t(np.random.default_rng(2).standard_normal((5, 2)), grad=True)
    ids = t(np.array([[4, 1], [1, 3]]))
    assert gradcheck(lambda w: F.embedding(ids, w, padding_idx=3), [w], eps=1e-6)
    np.testing.assert_array_equal(
        run_static(lambda i, v: F.embedding(i, v, padding_idx=3), ids.numpy(), w.numpy())[0],
        F.embedding(ids, w, padding_idx=3).numpy())


@pytest.mark.parametrize("norm_type", [2.0, 3.0, 1.0])
def test_embedding_max_norm_renormalizes_only_the_looked_up_rows_in_place(norm_type):
    rng = np.random.default_rng(3)
    table = (rng.standard_normal((6, 4)) * 3).astype("float32")
    table[4] = 0.01                                   # looked up but under max_norm
    layer = nn.Embedding(6, 4, max_norm=1.5, norm_type=norm_type)
    layer.weight.set_value(table)
    ids = np.array([[1, 4], [1, 2]])
    out = layer(t(ids))
    want = table.copy()
    for i in (1, 2, 4):
        norm = np.linalg.norm(table[i], ord=norm_type)
        if norm > 1.5:
            want[i] = table[i] * (1.5 / (norm + 1e-7))
    np.testing.assert_allclose(layer.weight.numpy(), want, rtol=1e-6)   # rows 0, 3, 5 kept
    np.testing.assert_array_equal(layer.weight.numpy()[[0, 3, 5]], table[[0, 3, 5]])
    np.testing.assert_allclose(out.numpy(), want[ids], rtol=1e-6)
    assert np.linalg.norm(layer.weight.numpy()[1], ord=norm_type) <= 1.5 + 1e-5
    out.sum().backward()                              # the renorm is not recorded
    expect = np.zeros_like(table)
    np.add.at(expect, ids.reshape(-1), 1.0)
    np.testing.assert_array_equal(layer.weight.grad.numpy(), expect)


def test_embedding_max_norm_is_eager_only(run_static):
    w = np.ones((3, 2), "float32")
    with pytest.raises(ValueError, match="max_norm .* eager mode only"):
        run_static(lambda i, v: F.embedding(i, v, max_norm=1.0), np.array([1]), w)


def test_one_hot():
    got = F.one_hot(t(np.array([[2, 0], [1, 1]])), num_classes=3)
    np.testing.assert_array_equal(got.numpy(), np.eye(3, dtype="float32")[[[2, 0], [1, 1]]])


@pytest.mark.parametrize("call,message", [
    (lambda: nn.Embedding(4, 2, padding_idx=4), r"padding_idx must be in \[-4, 4\)"),
    (lambda: nn.Embedding(0, 2), "must be positive"),
    (lambda: F.embedding(t([1]), fastop.ones([3, 2]), padding_idx=-5), "padding_idx must be"),
    (lambda: nn.Embedding(4, 2)(t([4])), r"fastop::embedding: each id must be in \[0, "),
])
def test_embedding_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_embedding_layer_eager_equals_static(run_static):
    eager = nn.Embedding(7, 3, padding_idx=1)
    ids = np.array([[1, 6], [0, 1]])
    holder = {}

    def build(i):
        holder["layer"] = nn.Embedding(7, 3, padding_idx=1)
        return holder["layer"](i)

    def load(scope):
        scope.set(holder["layer"].weight.name, eager.weight.numpy())

    np.testing.assert_array_equal(run_static(build, ids, before_run=load)[0],
                                  eager(t(ids)).numpy())

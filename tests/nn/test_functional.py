"""nn.functional and the loss/activation layers: forward vs numpy, backward vs numpy
and vs finite differences (float64)."""
import numpy as np
import pytest

import fastop
import fastop.nn.functional as F
from fastop import nn

TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-10, atol=1e-12)}


def t(array, grad=False):
    return fastop.to_tensor(np.asarray(array), stop_gradient=not grad)


def numeric_grad(f, x, eps=1e-6):
    """Central differences of the scalar f(x) with respect to the float64 array x."""
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        saved = flat[i]
        flat[i] = saved + eps
        up = f(x)
        flat[i] = saved - eps
        down = f(x)
        flat[i] = saved
        gflat[i] = (up - down) / (2 * eps)
    return grad


def np_log_softmax(x, axis=-1):
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))


rng = np.random.default_rng(0)


# -- linear and activations -------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_linear_forward_backward(dtype, bias):
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((5, 4), (4, 3), (3,)))
    tx, tw, tb = t(x, True), t(w, True), t(b, True) if bias else None
    y = F.linear(tx, tw, tb)
    want = x @ w + (b if bias else 0)
    np.testing.assert_allclose(y.numpy(), want, **TOL[dtype])
    dy = rng.standard_normal((5, 3)).astype(dtype)
    y.backward(t(dy))
    np.testing.assert_allclose(tx.grad.numpy(), dy @ w.T, **TOL[dtype])
    np.testing.assert_allclose(tw.grad.numpy(), x.T @ dy, **TOL[dtype])
    if bias:
        np.testing.assert_allclose(tb.grad.numpy(), dy.sum(0), **TOL[dtype])


def test_linear_layer_gradient_matches_finite_differences():
    layer = nn.Linear(3, 2).to(dtype="float64")
    x = rng.standard_normal((4, 3))
    F.mse_loss(layer(t(x)), t(np.zeros((4, 2))), "sum").backward()
    w = layer.weight.numpy().copy()
    b = layer.bias.numpy()
    num = numeric_grad(lambda wv: float(((x @ wv + b) ** 2).sum()), w)
    np.testing.assert_allclose(layer.weight.grad.numpy(), num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("activation", ["tanh", "relu", "sigmoid"])
def test_fused_linear_activation(activation):
    x, w, b = (rng.standard_normal(s) for s in ((6, 5), (5, 4), (4,)))
    act = {"tanh": np.tanh, "relu": lambda z: np.maximum(z, 0),
           "sigmoid": lambda z: 1 / (1 + np.exp(-z))}[activation]
    tw = t(w, True)
    y = F.linear(t(x), tw, t(b), activation=activation)
    np.testing.assert_allclose(y.numpy(), act(x @ w + b), **TOL["float64"])
    y.sum().backward()
    num = numeric_grad(lambda wv: float(act(x @ wv + b).sum()), w.copy())
    np.testing.assert_allclose(tw.grad.numpy(), num, rtol=1e-6, atol=1e-7)


def test_linear_bad_activation_raises():
    with pytest.raises(ValueError, match="activation must be one of"):
        F.linear(t(np.ones((1, 2))), t(np.ones((2, 2))), activation="gelu")


@pytest.mark.parametrize("name,layer,ref", [
    ("relu", nn.ReLU, lambda x: np.maximum(x, 0)),
    ("tanh", nn.Tanh, np.tanh),
    ("sigmoid", nn.Sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    ("softmax", nn.Softmax, lambda x: np.exp(np_log_softmax(x))),
    ("log_softmax", nn.LogSoftmax, np_log_softmax),
])
def test_activations_forward_and_gradient(name, layer, ref):
    x = rng.standard_normal((4, 5))
    weights = rng.standard_normal((4, 5))
    np.testing.assert_allclose(getattr(F, name)(t(x)).numpy(), ref(x), **TOL["float64"])
    tx = t(x, True)
    (layer()(tx) * t(weights)).sum().backward()
    num = numeric_grad(lambda v: float((ref(v) * weights).sum()), x.copy())
    np.testing.assert_allclose(tx.grad.numpy(), num, rtol=1e-6, atol=1e-7)


def test_softmax_axis_and_dtype():
    x = rng.standard_normal((3, 4)).astype("float32")
    y = F.softmax(t(x), axis=0, dtype="float64")
    assert y.dtype == fastop.float64
    np.testing.assert_allclose(y.numpy(), np.exp(np_log_softmax(x.astype("float64"), 0)),
                               **TOL["float64"])


def test_flatten():
    x = rng.standard_normal((2, 3, 4))
    assert nn.Flatten()(t(x)).shape == [2, 12]
    assert F.flatten(t(x)).shape == [24]
    assert F.flatten(t(x), 0, 1).shape == [6, 4]
    with pytest.raises(ValueError, match="must not come after"):
        F.flatten(t(x), 2, 1)


# -- cross-entropy ---------------------------------------------------------------------

def np_ce(logits, labels, reduction="mean", use_softmax=True):
    logp = np_log_softmax(logits) if use_softmax else np.log(logits)
    loss = -np.take_along_axis(logp, labels.reshape(-1, 1), axis=-1)
    return {"mean": loss.mean(), "sum": loss.sum(), "none": loss}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("label_shape", ["[N]", "[N,1]"])
def test_cross_entropy_hard_labels(reduction, label_shape):
    logits = rng.standard_normal((6, 5))
    labels = rng.integers(0, 5, 6)
    lab = labels if label_shape == "[N]" else labels.reshape(6, 1)
    tx = t(logits, True)
    loss = nn.CrossEntropyLoss(reduction=reduction)(tx, t(lab))
    want = np_ce(logits, labels, reduction)
    assert loss.shape == list(np.shape(want))
    np.testing.assert_allclose(loss.numpy(), want, **TOL["float64"])
    loss.sum().backward() if reduction == "none" else loss.backward()
    onehot = np.eye(5)[labels]
    scale = 1 / 6 if reduction == "mean" else 1.0
    np.testing.assert_allclose(tx.grad.numpy(), scale * (np.exp(np_log_softmax(logits))
                                                          - onehot), **TOL["float64"])


def test_cross_entropy_float32_int32_labels():
    logits = rng.standard_normal((8, 10)).astype("float32")
    labels = rng.integers(0, 10, 8).astype("int32")
    loss = F.cross_entropy(t(logits), t(labels))
    assert loss.dtype == fastop.float32
    np.testing.assert_allclose(loss.numpy(), np_ce(logits.astype("float64"), labels),
                               rtol=1e-5)


def test_cross_entropy_applies_softmax_to_probabilities_like_paddle():
    """The seeds feed softmax outputs to CrossEntropyLoss: softmax is applied again."""
    probs = np.exp(np_log_softmax(rng.standard_normal((4, 3))))
    labels = np.array([0, 2, 1, 1])
    got = nn.CrossEntropyLoss()(t(probs), t(labels)).numpy()
    np.testing.assert_allclose(got, np_ce(probs, labels), **TOL["float64"])


def test_cross_entropy_without_softmax():
    probs = np.exp(np_log_softmax(rng.standard_normal((5, 4))))
    probs[0] *= 0.5   # not normalized: the loss is still -log p[label]
    labels = rng.integers(0, 4, 5)
    tp = t(probs, True)
    loss = F.cross_entropy(tp, t(labels), use_softmax=False, reduction="sum")
    np.testing.assert_allclose(loss.numpy(), np_ce(probs, labels, "sum", False),
                               **TOL["float64"])
    loss.backward()
    num = numeric_grad(lambda p: float(np_ce(p, labels, "sum", False)), probs.copy())
    np.testing.assert_allclose(tp.grad.numpy(), num, rtol=1e-6, atol=1e-7)


def test_cross_entropy_soft_labels():
    logits = rng.standard_normal((4, 3))
    soft = np.exp(np_log_softmax(rng.standard_normal((4, 3))))
    tx = t(logits, True)
    loss = F.cross_entropy(tx, t(soft), soft_label=True)
    want = lambda z: float((-(soft * np_log_softmax(z)).sum(-1)).mean())
    np.testing.assert_allclose(loss.numpy(), want(logits), **TOL["float64"])
    loss.backward()
    np.testing.assert_allclose(tx.grad.numpy(), numeric_grad(want, logits.copy()),
                               rtol=1e-6, atol=1e-8)


def test_cross_entropy_ignore_index_mean_over_valid_rows():
    logits = rng.standard_normal((5, 4))
    labels = np.array([1, 3, 0, 3, 2])
    loss = F.cross_entropy(t(logits), t(labels), ignore_index=3)
    per_row = np_ce(logits, labels, "none").ravel()
    np.testing.assert_allclose(loss.numpy(), per_row[[0, 2, 4]].mean(), **TOL["float64"])
    rows = F.cross_entropy(t(logits), t(labels), ignore_index=3, reduction="none").numpy()
    assert rows[1, 0] == 0 and rows[3, 0] == 0


@pytest.mark.parametrize("kwargs", [dict(use_softmax=False), dict(label_smoothing=0.2)],
                         ids=["no-softmax", "smoothing"])
def test_cross_entropy_ignored_rows_are_zero(kwargs):
    probs = np.exp(np_log_softmax(rng.standard_normal((4, 3)))) * 0.7
    labels = np.array([2, -100, 0, -100])
    tp = t(probs, True)
    rows = F.cross_entropy(tp, t(labels), reduction="none", **kwargs)
    assert rows.numpy()[1, 0] == 0 and rows.numpy()[3, 0] == 0
    assert (rows.numpy()[[0, 2], 0] != 0).all()
    rows.sum().backward()
    np.testing.assert_array_equal(tp.grad.numpy()[[1, 3]], 0)


def test_cross_entropy_label_smoothing():
    logits = rng.standard_normal((4, 5))
    labels = rng.integers(0, 5, 4)
    eps = 0.1
    soft = (1 - eps) * np.eye(5)[labels] + eps / 5
    tx = t(logits, True)
    loss = F.cross_entropy(tx, t(labels), label_smoothing=eps)
    want = lambda z: float((-(soft * np_log_softmax(z)).sum(-1)).mean())
    np.testing.assert_allclose(loss.numpy(), want(logits), **TOL["float64"])
    loss.backward()
    np.testing.assert_allclose(tx.grad.numpy(), numeric_grad(want, logits.copy()),
                               rtol=1e-6, atol=1e-8)


def test_cross_entropy_class_axis_1():
    logits = rng.standard_normal((2, 4, 3))            # classes on axis 1
    labels = rng.integers(0, 4, (2, 3))
    loss = F.cross_entropy(t(logits), t(labels), axis=1, reduction="none")
    logp = np_log_softmax(logits, axis=1)
    want = -np.take_along_axis(logp, labels[:, None, :], axis=1)
    assert loss.shape == [2, 1, 3]
    np.testing.assert_allclose(loss.numpy(), want, **TOL["float64"])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_class_weight(reduction):
    logits = rng.standard_normal((6, 4))
    labels = np.array([0, 3, 3, 1, 2, 3])
    weight = np.array([0.5, 2.0, 1.0, 3.0])
    tx = t(logits, True)
    loss = nn.CrossEntropyLoss(weight=t(weight), reduction=reduction)(tx, t(labels))
    per = np_ce(logits, labels, "none") * weight[labels][:, None]
    want = {"mean": per.sum() / weight[labels].sum(), "sum": per.sum(), "none": per}
    np.testing.assert_allclose(loss.numpy(), want[reduction], **TOL["float64"])
    loss.sum().backward() if reduction == "none" else loss.backward()
    f = lambda z: float({"mean": lambda p: p.sum() / weight[labels].sum(),
                         "sum": np.sum, "none": np.sum}[reduction](
        np_ce(z, labels, "none") * weight[labels][:, None]))
    np.testing.assert_allclose(tx.grad.numpy(), numeric_grad(f, logits.copy()),
                               rtol=1e-6, atol=1e-8)


def test_cross_entropy_class_weight_skips_ignored_rows():
    logits = rng.standard_normal((4, 3))
    labels = np.array([[2], [-1], [0], [2]])
    weight = np.array([1.0, 2.0, 4.0])
    loss = F.cross_entropy(t(logits), t(labels), weight=t(weight), ignore_index=-1)
    valid = labels.ravel() != -1
    per = np_ce(logits[valid], labels.ravel()[valid], "none").ravel()
    w = weight[labels.ravel()[valid]]
    np.testing.assert_allclose(loss.numpy(), (per * w).sum() / w.sum(), **TOL["float64"])


def test_cross_entropy_soft_label_weight():
    logits = rng.standard_normal((3, 4))
    soft = np.exp(np_log_softmax(rng.standard_normal((3, 4))))
    weight = np.array([1.0, 0.5, 2.0, 1.5])
    loss = F.cross_entropy(t(logits), t(soft), weight=t(weight), soft_label=True,
                           reduction="sum")
    per = -(soft * np_log_softmax(logits)).sum(-1) * (soft * weight).sum(-1)
    np.testing.assert_allclose(loss.numpy(), per.sum(), **TOL["float64"])


def test_cross_entropy_bad_label_raises_naming_op():
    with pytest.raises(ValueError, match="softmax_cross_entropy"):
        F.cross_entropy(t(np.zeros((2, 3))), t(np.array([0, 3])))


def test_cross_entropy_bad_arguments():
    with pytest.raises(ValueError, match="reduction must be one of"):
        nn.CrossEntropyLoss(reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(t(np.zeros((2, 3))), t(np.array([0, 1])), label_smoothing=1.0)


def test_softmax_with_cross_entropy_returns_softmax():
    logits = rng.standard_normal((3, 4))
    labels = np.array([[1], [0], [3]])
    loss, sm = F.softmax_with_cross_entropy(t(logits), t(labels), return_softmax=True)
    np.testing.assert_allclose(loss.numpy(), np_ce(logits, labels.ravel(), "none"),
                               **TOL["float64"])
    np.testing.assert_allclose(sm.numpy(), np.exp(np_log_softmax(logits)), **TOL["float64"])


def test_softmax_with_cross_entropy_axis_0_soft_labels():
    logits = rng.standard_normal((4, 3))                # classes on axis 0
    soft = np.exp(np_log_softmax(rng.standard_normal((4, 3)), axis=0))
    loss, sm = F.softmax_with_cross_entropy(t(logits), t(soft), soft_label=True,
                                            return_softmax=True, axis=0)
    logp = np_log_softmax(logits, axis=0)
    assert loss.shape == [1, 3]
    np.testing.assert_allclose(loss.numpy(), -(soft * logp).sum(0, keepdims=True),
                               **TOL["float64"])
    np.testing.assert_allclose(sm.numpy(), np.exp(logp), **TOL["float64"])


# -- regression losses -------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("layer,ref,dref", [
    (nn.MSELoss, lambda d: d ** 2, lambda d: 2 * d),
    (nn.L1Loss, np.abs, np.sign),
], ids=["mse", "l1"])
def test_regression_losses(reduction, layer, ref, dref):
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    tx = t(x, True)
    loss = layer(reduction=reduction)(tx, t(y))
    per = ref(x - y)
    want = {"mean": per.mean(), "sum": per.sum(), "none": per}[reduction]
    np.testing.assert_allclose(loss.numpy(), want, **TOL["float64"])
    loss.sum().backward() if reduction == "none" else loss.backward()
    scale = 1 / 12 if reduction == "mean" else 1.0
    np.testing.assert_allclose(tx.grad.numpy(), scale * dref(x - y), **TOL["float64"])


def test_regression_loss_bad_reduction():
    with pytest.raises(ValueError, match="mse_loss: reduction"):
        F.mse_loss(t(np.zeros(2)), t(np.zeros(2)), reduction="avg")


@pytest.mark.parametrize("act", [nn.Tanh, nn.ReLU, nn.Sigmoid])
def test_sequential_fuses_linear_activation_with_same_results(act):
    fastop.seed(1)
    seq = nn.Sequential(nn.Linear(5, 4), act(), nn.Linear(4, 3)).to(dtype="float64")
    x = rng.standard_normal((6, 5))
    fused = seq(t(x))
    fused.sum().backward()
    grads = [p.grad.numpy().copy() for p in seq.parameters()]
    for p in seq.parameters():
        p.clear_grad(set_to_zero=False)
    unfused = seq[2](seq[1](seq[0](t(x))))
    unfused.sum().backward()
    np.testing.assert_allclose(fused.numpy(), unfused.numpy(), **TOL["float64"])
    for g, p in zip(grads, seq.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), **TOL["float64"])


def test_linear_broadcasts_a_0d_bias():
    """PaddlePaddle's F.linear takes a 0-D bias (added to every output); its gradient is
    the sum over the output."""
    x = fastop.to_tensor(np.arange(6, dtype="float64").reshape(2, 3))
    w = fastop.to_tensor(np.ones((3, 4)))
    b = fastop.to_tensor(0.5, dtype="float64", stop_gradient=False)
    out = F.linear(x, w, b)
    np.testing.assert_allclose(out.numpy(), x.numpy() @ w.numpy() + 0.5)
    out.sum().backward()
    assert b.grad.shape == [] and b.grad.item() == 8.0


def test_in_place_activations_write_x_and_follow_paddles_rules():
    import fastop.nn.functional as F
    x = fastop.to_tensor([[-1.0, 2.0], [0.5, -3.0]])
    assert F.relu_(x) is x
    np.testing.assert_array_equal(x.numpy(), [[0.0, 2.0], [0.5, 0.0]])
    assert F.softmax_(x, axis=1) is x
    np.testing.assert_allclose(x.numpy().sum(axis=1), [1.0, 1.0], rtol=1e-6)
    assert F.tanh_(x) is x
    w = fastop.to_tensor([[-1.0, 2.0]], stop_gradient=False)
    with pytest.raises(ValueError, match="relu_: .*Leaf Var"):
        F.relu_(w)
    y = w * 2.0
    F.relu_(y).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[0.0, 2.0]])

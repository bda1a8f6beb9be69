"""An MLP trained for 10 steps matches a hand-written numpy implementation to 1e-5."""
import numpy as np
import pytest

import fastop
from fastop import nn, optimizer

SIZES = (20, 32, 32, 10)
BATCH, STEPS = 16, 10


class NumpyMLP:
    """tanh MLP with softmax cross-entropy, forward and backward by hand."""

    def __init__(self, weights, biases):
        self.w = [w.astype("float64") for w in weights]
        self.b = [b.astype("float64") for b in biases]

    def loss_and_grads(self, x, labels):
        acts = [x]
        for i, (w, b) in enumerate(zip(self.w, self.b)):
            z = acts[-1] @ w + b
            acts.append(np.tanh(z) if i < len(self.w) - 1 else z)
        logits = acts[-1]
        z = logits - logits.max(1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        n = len(labels)
        loss = -np.log(p[np.arange(n), labels]).mean()
        d = p
        d[np.arange(n), labels] -= 1
        d /= n
        grads_w, grads_b = [], []
        for i in range(len(self.w) - 1, -1, -1):
            grads_w.insert(0, acts[i].T @ d)
            grads_b.insert(0, d.sum(0))
            if i:
                d = (d @ self.w[i].T) * (1 - acts[i] ** 2)
        return loss, grads_w, grads_b


def batches():
    rng = np.random.default_rng(7)
    for _ in range(STEPS):
        yield (rng.standard_normal((BATCH, SIZES[0])).astype("float32"),
               rng.integers(0, SIZES[-1], BATCH))


def build():
    fastop.seed(3)
    layers = []
    for i in range(len(SIZES) - 1):
        layers.append(nn.Linear(SIZES[i], SIZES[i + 1]))
        if i < len(SIZES) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def numpy_update(kind, params, grads, state, lr, t):
    for i, (p, g) in enumerate(zip(params, grads)):
        if kind == "sgd":
            p -= lr * g
        elif kind == "momentum":
            state.setdefault(i, np.zeros_like(p))
            state[i] = 0.9 * state[i] + g
            p -= lr * state[i]
        else:
            m, v = state.setdefault(i, [np.zeros_like(p), np.zeros_like(p)])
            m[...] = 0.9 * m + 0.1 * g
            v[...] = 0.999 * v + 0.001 * g * g
            p -= lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind,lr", [("sgd", 0.1), ("momentum", 0.05), ("adam", 0.01)])
def test_ten_steps_match_numpy(kind, lr, dtype):
    model = build().to(dtype=dtype)
    linears = [layer for layer in model if isinstance(layer, nn.Linear)]
    ref = NumpyMLP([l.weight.numpy() for l in linears], [l.bias.numpy() for l in linears])
    make = {"sgd": lambda: optimizer.SGD(lr, parameters=model.parameters()),
            "momentum": lambda: optimizer.Momentum(lr, momentum=0.9,
                                                   parameters=model.parameters()),
            "adam": lambda: optimizer.Adam(lr, parameters=model.parameters())}[kind]
    opt = make()
    loss_fn = nn.CrossEntropyLoss()
    ref_state: dict = {}
    for t, (x, labels) in enumerate(batches(), start=1):
        loss = loss_fn(model(fastop.to_tensor(x.astype(dtype))), fastop.to_tensor(labels))
        loss.backward()
        opt.step()
        opt.clear_grad()
        ref_loss, gw, gb = ref.loss_and_grads(x.astype("float64"), labels)
        numpy_update(kind, ref.w + ref.b, gw + gb, ref_state, lr, t)
        np.testing.assert_allclose(float(loss.numpy()), ref_loss, rtol=1e-5)
    for layer, w, b in zip(linears, ref.w, ref.b):
        np.testing.assert_allclose(layer.weight.numpy(), w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(layer.bias.numpy(), b, rtol=1e-5, atol=1e-5)


def test_training_reduces_the_loss():
    model = build()
    opt = optimizer.SGD(0.5, parameters=model.parameters())
    rng = np.random.default_rng(0)
    x = fastop.to_tensor(rng.standard_normal((64, SIZES[0])).astype("float32"))
    labels = fastop.to_tensor(rng.integers(0, SIZES[-1], 64))
    losses = []
    for _ in range(30):
        loss = nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()
        opt.clear_grad(set_to_zero=False)
        losses.append(float(loss.numpy()))
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("kind,lr", [("sgd", 0.1), ("momentum", 0.05), ("adam", 0.01)])
def test_static_minimize_matches_numpy(kind, lr):
    """The same layers and optimizers in static mode: minimize appends backward and
    update ops; the executor updates the parameters in the scope in place."""
    from fastop import static
    main, startup, scope = static.Program(), static.Program(), static.Scope()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            x = static.data("x", [None, SIZES[0]], "float32")
            y = static.data("y", [None], "int64")
            model = build()
            loss = nn.CrossEntropyLoss()(model(x), y)
            opt = {"sgd": lambda: optimizer.SGD(lr),
                   "momentum": lambda: optimizer.Momentum(lr, momentum=0.9),
                   "adam": lambda: optimizer.Adam(lr)}[kind]()
            _, params_grads = opt.minimize(loss)
    finally:
        fastop.disable_static()
    assert [p.name for p, _ in params_grads] == [p.name for p in model.parameters()]
    exe = static.Executor(fastop.CPUPlace())
    exe.run(startup, scope=scope)
    linears = [layer for layer in model if isinstance(layer, nn.Linear)]
    ref = NumpyMLP([scope[l.weight.name] for l in linears], [scope[l.bias.name] for l in linears])
    ref_state: dict = {}
    for t, (xb, labels) in enumerate(batches(), start=1):
        (got,) = exe.run(main, feed={"x": xb, "y": labels}, fetch_list=[loss], scope=scope)
        ref_loss, gw, gb = ref.loss_and_grads(xb.astype("float64"), labels)
        numpy_update(kind, ref.w + ref.b, gw + gb, ref_state, lr, t)
        np.testing.assert_allclose(float(got), ref_loss, rtol=1e-5)
    for layer, w, b in zip(linears, ref.w, ref.b):
        np.testing.assert_allclose(scope[layer.weight.name], w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(scope[layer.bias.name], b, rtol=1e-5, atol=1e-5)


def test_static_learning_rate_lives_in_the_scope():
    from fastop import static
    main, startup, scope = static.Program(), static.Program(), static.Scope()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            x = static.data("x", [None, SIZES[0]], "float32")
            y = static.data("y", [None], "int64")
            model = build()
            loss = nn.CrossEntropyLoss()(model(x), y)
            optimizer.SGD(0.1, name="sgd_lr").minimize(loss)
    finally:
        fastop.disable_static()
    exe = static.Executor(fastop.CPUPlace())
    exe.run(startup, scope=scope)
    np.testing.assert_allclose(scope["sgd_lr.learning_rate"], [0.1])
    scope.set("sgd_lr.learning_rate", np.zeros(1, "float32"))
    before = [scope[p.name].copy() for p in model.parameters()]
    xb, labels = next(batches())
    exe.run(main, feed={"x": xb, "y": labels}, fetch_list=[loss], scope=scope)
    for p, b in zip(model.parameters(), before):
        np.testing.assert_array_equal(scope[p.name], b)

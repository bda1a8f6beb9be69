"""Training steps of a 784-256-256-10 tanh MLP (batch 64, SGD, softmax cross-entropy):
fastop eager (nn.Sequential + CrossEntropyLoss + optimizer.SGD), a hand-written numpy
step, and PyTorch eager, each doing forward, backward and the in-place update.

A second case replaces fastop's built-in tanh by a numpy ``PyLayer`` (the seeds' way of
writing a Python op) and compares it with torch's built-in network. The ``optimizer``
group times the update alone (SGD, Adam) over the same parameters and gradients.
"""
import numpy as np

import fastop
from fastop import nn, optimizer
from fastop.autograd import PyLayer

SIZES = (784, 256, 256, 10)
BATCH = 64
LR = 0.01


class NumpyTanh(PyLayer):
    """tanh computed with numpy inside fastop's autograd (results wrapped zero-copy)."""

    @staticmethod
    def forward(ctx, x):
        y = np.tanh(x.numpy())
        ctx.save_for_backward(y)
        return fastop.from_numpy(y)

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensor()
        dx = y * y
        np.subtract(1.0, dx, out=dx)
        dx *= dy.numpy()
        return fastop.from_numpy(dx)


class PyLayerTanh(nn.Layer):
    def forward(self, x):
        return NumpyTanh.apply(x)


def fastop_model(act):
    fastop.seed(0)
    layers = []
    for i in range(len(SIZES) - 1):
        layers.append(nn.Linear(SIZES[i], SIZES[i + 1]))
        if i < len(SIZES) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def fastop_step(act, x, labels, set_to_zero=False):
    """One training step; ``set_to_zero=True`` is ``clear_grad()``'s default (Paddle's),
    False leaves the gradients None for the next backward to write fresh."""
    model = fastop_model(act)
    opt = optimizer.SGD(LR, parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    tx, tl = fastop.to_tensor(x), fastop.to_tensor(labels)

    def step():
        loss = loss_fn(model(tx), tl)
        loss.backward()
        opt.step()
        opt.clear_grad(set_to_zero=set_to_zero)
        return loss
    return step


def numpy_step(weights, biases, x, labels):
    """The same step by hand: forward, softmax cross-entropy, backward, SGD in place."""
    w = [a.copy() for a in weights]
    b = [a.copy() for a in biases]
    rows = np.arange(len(labels))
    scale = np.float32(1.0 / len(labels))

    def step():
        acts = [x]
        for i in range(len(w)):
            z = acts[-1] @ w[i]
            z += b[i]
            acts.append(np.tanh(z, out=z) if i < len(w) - 1 else z)
        z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
        e = np.exp(z)
        p = e / e.sum(axis=1, keepdims=True)
        loss = -np.log(p[rows, labels]).mean()
        d = p
        d[rows, labels] -= 1
        d *= scale
        for i in range(len(w) - 1, -1, -1):
            gw = acts[i].T @ d
            gb = d.sum(axis=0)
            if i:
                d = d @ w[i].T
                d *= 1 - acts[i] * acts[i]
            w[i] -= LR * gw
            b[i] -= LR * gb
        return loss
    return step


def torch_step(torch, weights, biases, x, labels):
    layers = []
    for i, (w, b) in enumerate(zip(weights, biases)):
        linear = torch.nn.Linear(*w.shape)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(w.T.copy()))
            linear.bias.copy_(torch.from_numpy(b))
        layers.append(linear)
        if i < len(weights) - 1:
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    tx, tl = torch.from_numpy(x), torch.from_numpy(labels)

    def step():
        loss = loss_fn(model(tx), tl)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def numpy_adam(params, grads, b1=0.9, b2=0.999, eps=1e-8):
    """Adam in place with numpy, reusing scratch buffers (no per-step allocation)."""
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    tmp = [np.empty_like(p) for p in params]
    t = [0]

    def step():
        t[0] += 1
        lr_t = LR * np.sqrt(1 - b2 ** t[0]) / (1 - b1 ** t[0])
        for p, g, mi, vi, s in zip(params, grads, m, v, tmp):
            mi *= b1
            mi += (1 - b1) * g
            np.multiply(g, g, out=s)
            vi *= b2
            s *= 1 - b2
            vi += s
            np.sqrt(vi, out=s)
            s += eps * np.sqrt(1 - b2 ** t[0])
            np.divide(mi, s, out=s)
            s *= lr_t
            p -= s
    return step


def register_optimizer_cases(suite, weights, biases):
    rng = np.random.default_rng(1)
    arrays = [a.copy() for a in weights + biases]
    grads = [rng.standard_normal(a.shape).astype(np.float32) for a in arrays]
    n = sum(a.size for a in arrays)
    params = [fastop.to_tensor(a, stop_gradient=False) for a in arrays]
    for p, g in zip(params, grads):
        p.grad = fastop.to_tensor(g)
    torch = suite.torch
    if torch:
        tparams = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in arrays]
        for p, g in zip(tparams, grads):
            p.grad = torch.from_numpy(g)
    np_params = [a.copy() for a in arrays]
    sgd = optimizer.SGD(LR, parameters=params)
    suite.add("optimizer", f"SGD step {n} params f32", fastop=sgd.step,
              numpy=lambda: [p.__isub__(LR * g) for p, g in zip(np_params, grads)],
              torch=torch.optim.SGD(tparams, lr=LR).step if torch else None,
              target="≥ 1.0× numpy")
    adam = optimizer.Adam(LR, parameters=params)
    suite.add("optimizer", f"Adam step {n} params f32", fastop=adam.step,
              numpy=numpy_adam(np_params, grads),
              torch=torch.optim.Adam(tparams, lr=LR).step if torch else None,
              target="≥ 1.0× numpy")


def mlp_data():
    """A batch, its labels, and the weights and biases of fastop_model (seed 0) as numpy
    arrays: the numpy and torch steps start from the same parameters as fastop's."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    labels = rng.integers(0, SIZES[-1], BATCH).astype(np.int64)
    linears = [layer for layer in fastop_model(nn.Tanh) if isinstance(layer, nn.Linear)]
    return (x, labels, [layer.weight.numpy().copy() for layer in linears],
            [layer.bias.numpy().copy() for layer in linears])


def add_mlp_case(suite, group, name, act, target, set_to_zero=False):
    """The training step of the MLP in fastop (activation layer ``act``), numpy, torch."""
    x, labels, weights, biases = mlp_data()
    torch = suite.torch
    suite.add(group, name, fastop=fastop_step(act, x, labels, set_to_zero),
              numpy=numpy_step(weights, biases, x, labels),
              torch=torch_step(torch, weights, biases, x, labels) if torch else None,
              target=target)
    return weights, biases


def register(suite):
    name = "MLP 784-256-256-10 tanh b64 SGD f32"
    weights, biases = add_mlp_case(suite, "training", name, nn.Tanh, "≥ 1.2× torch")
    add_mlp_case(suite, "training", name + " (tanh: numpy PyLayer)", PyLayerTanh,
                 "≥ 1.1× torch")
    register_optimizer_cases(suite, weights, biases)

"""The static executor: per-run cost of small programs, per-op overhead in a compiled
chain of tiny ops, and a training step of seed 001's network.

Reference (the issue, PaddlePaddle 3.3.1 static, same kind of machine): tanh → mean →
gradients on (2,3): 330 µs per run built-in, 430 µs with py_func; 100 tiny ops ~12 µs/op;
seed network step (784, 4× fc-200 + py_func tanh, fc-10 softmax, cross-entropy, SGD,
batch 64): 6.2 ms (torch eager 1.5 ms, numpy 1.17 ms).
"""
import numpy as np

import fastop
from fastop import nn, optimizer, static
from fastop.autograd import PyLayer
from fastop.ops import registry

SEED_SIZES = (784, 200, 200, 200, 200, 10)
BATCH = 64
LR = 0.01
CHAIN = 100
LONG_CHAIN = 10_000


def tanh(x):
    return np.tanh(x)


def tanh_grad(y, dy):
    return np.array(dy) * (1 - np.square(np.array(y)))


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ----------------------------------------------------------------------------- small programs

def small_program(use_py_func):
    """tanh → mean → gradient w.r.t. x on a (2, 3) input; returns (run, numpy, torch)."""
    main, startup = static.Program(), static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            x = static.data("x", [2, 3], "float32")
            if use_py_func:
                y = main.current_block().create_var(name="y", dtype="float32", shape=[2, 3])
                y = static.py_func(tanh, x, y, backward_func=tanh_grad,
                                   skip_vars_in_backward_input=x)
            else:
                y = registry.get("fastop::tanh")(x)
            loss = y.mean()
            (dx,) = static.gradients([loss], [x])
    finally:
        fastop.disable_static()
    exe = static.Executor(static.CPUPlace())
    feed = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype("float32")}
    fetch = [loss, dx]
    return lambda: exe.run(main, feed=feed, fetch_list=fetch), feed["x"]


def numpy_small(x):
    def run():
        y = np.tanh(x)
        return y.mean(), (1 - y * y) / y.size
    return run


def torch_small(torch, x):
    tx = torch.from_numpy(x)

    def run():
        t = tx.detach().requires_grad_()
        loss = torch.tanh(t).mean()
        (g,) = torch.autograd.grad(loss, t)
        return loss.detach().numpy(), g.numpy()
    return run


def chain_program(op_name):
    """`CHAIN` tiny (2, 3) ops in a row."""
    main = static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, static.Program()):
            x = static.data("x", [2, 3], "float32")
            h = x
            op = registry.get(op_name)
            for _ in range(CHAIN):
                h = op(h)
    finally:
        fastop.disable_static()
    exe = static.Executor()
    feed = {"x": np.full((2, 3), 0.5, "float32")}
    return lambda: exe.run(main, feed=feed, fetch_list=[h])


def first_run_of_a_chain(n):
    """The first ``Executor.run`` of a chain ``h = h + 1.0`` of `n` ops: a fresh
    executor each call, so every call compiles, traces and lays out the arena."""
    main = static.Program()
    fastop.enable_static()
    try:
        with static.program_guard(main, static.Program()):
            h = static.data("x", [4], "float32")
            for _ in range(n):
                h = h + 1.0
    finally:
        fastop.disable_static()
    feed = {"x": np.ones(4, "float32")}
    return lambda: static.Executor().run(main, feed=feed, fetch_list=[h])


# ----------------------------------------------------------------------------- seed network

def seed_static_step():
    """Seed 001's network as a static program, trained with SGD; its initial params."""
    main, startup, scope = static.Program(), static.Program(), static.Scope()
    fastop.enable_static()
    try:
        with static.program_guard(main, startup):
            fastop.seed(0)
            x = static.data("x", [None, SEED_SIZES[0]], "float32")
            label = static.data("label", [None], "int64")
            hidden = x
            for idx, size in enumerate(SEED_SIZES[1:-1]):
                hidden = static.nn.fc(hidden, size=size)
                new_hidden = main.current_block().create_var(
                    name=f"hidden_{idx}", dtype=hidden.dtype, shape=hidden.shape)
                hidden = static.py_func(func=tanh, x=hidden, out=new_hidden,
                                        backward_func=tanh_grad,
                                        skip_vars_in_backward_input=hidden)
            prediction = static.nn.fc(hidden, size=SEED_SIZES[-1], activation="softmax")
            loss = nn.CrossEntropyLoss()(prediction, label)
            optimizer.SGD(learning_rate=LR).minimize(loss)
    finally:
        fastop.disable_static()
    exe = static.Executor()
    exe.run(startup, scope=scope)
    params = [np.array(scope[p.name]) for p in main.all_parameters()]

    def make(x, labels):
        feed = {"x": x, "label": labels}
        return lambda: exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    return make, params[0::2], params[1::2]


class NumpyTanh(PyLayer):
    """The eager twin of the seed's py_func tanh."""

    @staticmethod
    def forward(ctx, x):
        y = fastop.to_tensor(np.tanh(x.numpy()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensor()
        return fastop.to_tensor(tanh_grad(y.numpy(), dy.numpy()))


def eager_step(weights, biases, x, labels):
    layers = []
    for w, b in zip(weights, biases):
        layer = nn.Linear(*w.shape)
        layer.weight.set_value(w)
        layer.bias.set_value(b)
        layers.append(layer)
    opt = optimizer.SGD(LR, parameters=[p for layer in layers for p in layer.parameters()])
    loss_fn = nn.CrossEntropyLoss()
    tx, tl = fastop.to_tensor(x), fastop.to_tensor(labels)

    def step():
        h = tx
        for layer in layers[:-1]:
            h = NumpyTanh.apply(layer(h))
        loss = loss_fn(nn.functional.softmax(layers[-1](h)), tl)
        loss.backward()
        opt.step()
        opt.clear_grad(set_to_zero=False)
        return loss
    return step


def numpy_step(weights, biases, x, labels):
    """The seed step by hand: fc+tanh ×4, fc, softmax, cross-entropy (with its own
    softmax, as CrossEntropyLoss applies one), backward, SGD."""
    w = [a.copy() for a in weights]
    b = [a.copy() for a in biases]
    rows = np.arange(len(labels))
    scale = np.float32(1.0 / len(labels))

    def step():
        acts = [x]
        for i in range(len(w) - 1):
            z = acts[-1] @ w[i]
            z += b[i]
            acts.append(np.tanh(z, out=z))
        p = _softmax(acts[-1] @ w[-1] + b[-1])
        q = _softmax(p)
        loss = -np.log(q[rows, labels]).mean()
        dp = q
        dp[rows, labels] -= 1
        dp *= scale
        d = p * (dp - (dp * p).sum(axis=1, keepdims=True))
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
    linears = []
    for w, b in zip(weights, biases):
        linear = torch.nn.Linear(*w.shape)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(w.T.copy()))
            linear.bias.copy_(torch.from_numpy(b))
        linears.append(linear)
    params = [p for linear in linears for p in linear.parameters()]
    opt = torch.optim.SGD(params, lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    tx, tl = torch.from_numpy(x), torch.from_numpy(labels)

    def step():
        h = tx
        for linear in linears[:-1]:
            h = torch.tanh(linear(h))
        loss = loss_fn(torch.softmax(linears[-1](h), dim=-1), tl)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def _have(*ops):
    """Whether the built-in ops a case appends are registered (kernel families land
    one by one; a case whose ops are missing is not registered)."""
    return all(f"fastop::{op}" in registry for op in ops)


def register(suite):
    torch = suite.torch
    for use_py_func, target in ((False, "≤ 20 µs/run (Paddle 330 µs)"),
                                (True, "≤ 20 µs/run (Paddle 430 µs)")):
        if not _have("multiply", *(() if use_py_func else ("tanh", "tanh_grad"))):
            continue
        run, x = small_program(use_py_func)
        name = "tanh→mean→grad (2,3) f32" + (" py_func" if use_py_func else "")
        suite.add("static", name,
                  fastop=run, numpy=numpy_small(x),
                  torch=torch_small(torch, x) if torch else None, target=target)

    if not _have("tanh", "multiply", "divide", "full_like"):
        return
    x6 = np.full((2, 3), 0.5, "float32")
    tx6 = torch.from_numpy(x6) if torch else None

    def numpy_chain():
        h = x6
        for _ in range(CHAIN):
            h = np.tanh(h)
        return h

    def torch_chain():
        h = tx6
        for _ in range(CHAIN):
            h = torch.tanh(h)
        return h
    suite.add("static", f"chain of {CHAIN} tanh (2,3) f32",
              fastop=chain_program("fastop::tanh"),
              numpy=numpy_chain, torch=torch_chain if torch else None,
              target="≤ 0.25 µs/op executor overhead (Paddle ~12 µs/op)")

    long_chain = 2_000 if suite.quick else LONG_CHAIN
    suite.add("static", f"first run (compile) of a chain of {long_chain} adds",
              fastop=first_run_of_a_chain(long_chain),
              target=f"≤ 0.5 s for {LONG_CHAIN} ops")

    make, weights, biases = seed_static_step()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SEED_SIZES[0])).astype(np.float32)
    labels = rng.integers(0, SEED_SIZES[-1], BATCH).astype(np.int64)
    name = "seed net 784-4x200 py_func tanh-10 b64 SGD f32"
    suite.add("static", name, fastop=make(x, labels),
              numpy=numpy_step(weights, biases, x, labels),
              torch=torch_step(torch, weights, biases, x, labels) if torch else None,
              target="≤ 1.25 ms/step (Paddle 6.2 ms)")
    suite.add("static", name + " (eager)", fastop=eager_step(weights, biases, x, labels),
              numpy=numpy_step(weights, biases, x, labels),
              torch=torch_step(torch, weights, biases, x, labels) if torch else None,
              target="static step faster than this")

"""Seed 001's network (4 fc layers with a py_func tanh, fc-10 softmax, cross-entropy)
trained with SGD: the loss falls, and every step matches the eager version of the same
network started from the same parameters."""
import numpy as np
import pytest

import fastop
from fastop import nn, static
from fastop.autograd import PyLayer

LR = 2.0     # the double softmax (fc softmax, then the loss's) makes gradients small


def tanh(x):
    return np.tanh(x)


def tanh_grad(y, dy):
    return np.array(dy) * (1 - np.square(np.array(y)))


def static_net(main, sizes):
    x = static.data("x", [None, sizes[0]], "float32")
    y = static.data("y", [None], "int64")
    hidden = x
    for idx, size in enumerate(sizes[1:-1]):
        hidden = static.nn.fc(hidden, size=size, name=f"fc{idx}")
        new_hidden = main.current_block().create_var(name=f"hidden_{idx}", dtype=hidden.dtype,
                                                     shape=hidden.shape)
        hidden = static.py_func(func=tanh, x=hidden, out=new_hidden, backward_func=tanh_grad,
                                skip_vars_in_backward_input=hidden)
    prediction = static.nn.fc(hidden, size=sizes[-1], activation="softmax", name="out")
    return nn.CrossEntropyLoss()(prediction, y)


class NumpyTanh(PyLayer):
    """The py_func's tanh as an eager PyLayer: the same numpy math, bit for bit."""

    @staticmethod
    def forward(ctx, x):
        y = fastop.to_tensor(tanh(x.numpy()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensor()
        return fastop.to_tensor(tanh_grad(y.numpy(), dy.numpy()))


EAGER_TANH = {"pylayer": NumpyTanh.apply, "builtin": fastop.tanh}


def eager_net(layers, x, y, activation=fastop.tanh):
    hidden = fastop.to_tensor(x)
    for layer in layers[:-1]:
        hidden = activation(layer(hidden))
    prediction = nn.functional.softmax(layers[-1](hidden))
    return nn.CrossEntropyLoss()(prediction, fastop.to_tensor(y))


# With the py_func's own numpy tanh as an eager PyLayer, both modes run the same kernels
# and must agree to rounding at every step. With fastop's built-in SIMD tanh (within 3 ulp
# of numpy's) the two trajectories drift apart by a few ulp per step, so that comparison
# checks the losses step by step and the weights at the end, at a looser tolerance.
@pytest.mark.parametrize("eager_tanh, weight_atol", [("pylayer", 1e-6), ("builtin", 5e-4)])
def test_seed_network_trains_like_eager(static_env, exe, eager_tanh, weight_atol):
    main, startup, scope = static_env
    sizes = [32, 20, 20, 20, 20, 10]
    fastop.seed(1)
    loss = static_net(main, sizes)
    fastop.optimizer.SGD(learning_rate=LR).minimize(loss)
    exe.run(startup)
    params = {p.name: np.array(scope[p.name]) for p in main.all_parameters()}

    fastop.disable_static()
    layers = [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
    names = [f"fc{i}" for i in range(4)] + ["out"]
    for layer, name in zip(layers, names):
        layer.weight.set_value(params[name + ".w_0"])
        layer.bias.set_value(params[name + ".b_0"])
    opt = fastop.optimizer.SGD(learning_rate=LR,
                               parameters=[p for layer in layers for p in layer.parameters()])

    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((sizes[0], sizes[-1])).astype("float32")
    x = rng.standard_normal((16, sizes[0])).astype("float32")
    y = np.argmax(x @ teacher, axis=1).astype("int64")
    losses = []
    for step in range(30):
        (static_loss,) = exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss])
        eager_loss = eager_net(layers, x, y, EAGER_TANH[eager_tanh])
        eager_loss.backward()
        opt.step()
        opt.clear_grad()
        np.testing.assert_allclose(static_loss, eager_loss.numpy(), rtol=1e-4, atol=1e-6)
        losses.append(float(static_loss))
        if eager_tanh == "pylayer":
            for layer, name in zip(layers, names):
                np.testing.assert_allclose(scope[name + ".w_0"], layer.weight.numpy(),
                                           atol=weight_atol, err_msg=f"step {step}")
    for layer, name in zip(layers, names):
        np.testing.assert_allclose(scope[name + ".w_0"], layer.weight.numpy(), atol=weight_atol)
        np.testing.assert_allclose(scope[name + ".b_0"], layer.bias.numpy(), atol=weight_atol)
    assert losses[-1] < losses[0] - 0.1

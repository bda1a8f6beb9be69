"""Eager-mode overhead: op dispatch and autograd recording, and Python ops (PyLayer).

* ``x = x + 1`` repeated 100 times on a (4,) float32 tensor: the per-op cost of eager
  dispatch, without and with autograd (``stop_gradient=False``), against numpy and torch.
* The seed's ``cus_tanh`` PyLayer with numpy inside, forward + backward, against the same
  layer as a ``torch.autograd.Function`` (numpy inside too) and plain numpy math.
"""
import numpy as np

import fastop
from fastop.autograd import PyLayer

CHAIN = 100


class NumpyTanh(PyLayer):
    """The seed's cus_tanh, computing with numpy."""

    @staticmethod
    def forward(ctx, x):
        y = fastop.from_numpy(np.tanh(x.numpy()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        y, = ctx.saved_tensor()
        return fastop.from_numpy(dy.numpy() * (1 - np.square(y.numpy())))


def _torch_tanh_function(torch):
    class TorchNumpyTanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.from_numpy(np.tanh(x.detach().numpy()))
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):
            y, = ctx.saved_tensors
            return torch.from_numpy(dy.numpy() * (1 - np.square(y.numpy())))
    return TorchNumpyTanh


def _chain(x):
    for _ in range(CHAIN):
        x = x + 1
    return x


def _register_chain(suite):
    torch = suite.torch
    a = np.ones(4, dtype=np.float32)
    plain = fastop.to_tensor(a)
    tracked = fastop.to_tensor(a, stop_gradient=False)
    t_plain = torch.from_numpy(a.copy()) if torch else None
    t_tracked = torch.from_numpy(a.copy()).requires_grad_() if torch else None
    suite.add("eager", f"x+1 chain x{CHAIN} (4,) f32",
              fastop=lambda: _chain(plain), numpy=lambda: _chain(a),
              torch=(lambda: _chain(t_plain)) if torch else None,
              work=CHAIN, unit="op",
              target="≤ 0.6 µs/op (numpy 0.57, torch 4.2 µs/op on the reference machine)")
    suite.add("eager", f"x+1 chain x{CHAIN} (4,) f32 autograd",
              fastop=lambda: _chain(tracked), numpy=lambda: _chain(a),
              torch=(lambda: _chain(t_tracked)) if torch else None,
              work=CHAIN, unit="op",
              target="≤ 1.0 µs/op (torch 3.1 µs/op with autograd)")


def _register_pylayer(suite, shape):
    torch = suite.torch
    rng = np.random.default_rng(0)
    a, g = rng.standard_normal(shape), np.ones(shape)
    x, dz = fastop.to_tensor(a, stop_gradient=False), fastop.to_tensor(g)

    def fastop_step():
        NumpyTanh.apply(x).backward(dz)
        x.grad = None

    def numpy_step():
        y = np.tanh(a)
        return g * (1 - np.square(y))

    torch_step = None
    if torch:
        fn = _torch_tanh_function(torch)
        tx, tg = torch.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(g)

        def torch_step():
            fn.apply(tx).backward(tg)
            tx.grad = None

    suite.add("pylayer", f"numpy tanh fwd+bwd {shape[0]}x{shape[1]} f64",
              fastop=fastop_step, numpy=numpy_step, torch=torch_step,
              work=a.size, unit="elem",
              target="≥ 3× torch.autograd.Function (33 µs at 2x3 on the reference machine)")


def register(suite):
    _register_chain(suite)
    for shape in ((2, 3), (64, 256)):
        _register_pylayer(suite, shape)

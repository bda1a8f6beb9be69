"""Eager mode on the paths users take: op dispatch, autograd, Python ops.

* ``x = x + 1`` repeated 100 times on a (4,) float32 tensor: the per-op cost of the
  operator path, without and with autograd (``stop_gradient=False``); and the same with
  the profiler off and on (group ``profiler``: each call of the "on" row is one
  profiling session of its 100 ops, started and stopped, so nothing records between
  samples; the start and stop are in the figure).
* The rows the dispatch-spine issue asks for, measured as its check measures them, on
  (2, 3) float32 unless named: a registry Python-kernel op (``bench::identity``, whose
  kernel returns its input, against the kernel called alone and a ``torch.library``
  custom op); the plugin op ``activations::swish`` with ``.sum().backward()`` (against its
  two numpy kernels alone and a ``torch.autograd.Function`` doing the same numpy work);
  ``fastop.tanh(x)`` (the function path); ``x.reshape([3, 2])``;
  ``fastop.tanh(x).sum().backward()``; seed 004's ``cus_tanh`` PyLayer with numpy inside
  and ``.mean().backward()``; ``nn.functional.cross_entropy(logits, label).backward()``;
  and the training step of the 784-256-256-10 MLP with ``clear_grad()``'s default.
"""
import sys

import numpy as np

import fastop
from fastop import nn
from fastop.autograd import PyLayer

from bench_reduce import numpy_cross_entropy
from bench_training import add_mlp_case

CHAIN = 100
SHAPE = (2, 3)


class cus_tanh(PyLayer):
    """Seed 004's cus_tanh, computing with numpy."""

    @staticmethod
    def forward(ctx, x):
        y = fastop.to_tensor(np.tanh(x.numpy()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        y, = ctx.saved_tensor()
        return fastop.to_tensor(dy.numpy() * (1 - np.square(y.numpy())))


def _swish_kernels():
    """The plugin's own numpy kernels of ``activations::swish``, forward and backward,
    as the registry holds them (beta=1): timed alone and inside torch's twin."""
    registry = fastop.ops.registry
    forward = registry.get("activations::swish").kernel_for("float32")
    backward = registry.get("activations::swish_grad").kernel_for("float32")
    return (lambda x: forward(x, 1.0)), (lambda x, dy: backward(x, dy, 1.0))


def _torch_functions(torch, swish_kernel, swish_grad_kernel):
    """The torch twins of the Python ops: autograd Functions doing the same numpy work."""
    class TorchTanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.from_numpy(np.tanh(x.detach().numpy()))
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, dy):
            y, = ctx.saved_tensors
            return torch.from_numpy(dy.numpy() * (1 - np.square(y.numpy())))

    class TorchSwish(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.from_numpy(swish_kernel(x.detach().numpy()))

        @staticmethod
        def backward(ctx, dy):
            x, = ctx.saved_tensors
            return torch.from_numpy(swish_grad_kernel(x.numpy(), dy.numpy()))
    return TorchTanh, TorchSwish


def identity_kernel(x):
    return x


def _identity_op():
    registry = fastop.ops.registry
    name = "bench::identity"
    if name in registry:    # registered by an earlier load in this process
        return registry.get(name)
    op = registry.define(name, inputs=["x"], outputs=["y"], meta=lambda x: x)
    op.kernel()(identity_kernel)
    return op


def _torch_identity_op(torch):
    """``bench::identity`` as a torch custom op (defined once per process)."""
    if not hasattr(torch.ops.fastop_bench, "identity"):
        @torch.library.custom_op("fastop_bench::identity", mutates_args=())
        def identity(x: torch.Tensor) -> torch.Tensor:
            return x.clone()   # a torch custom op may not return its input
    return torch.ops.fastop_bench.identity


def _chain(x):
    for _ in range(CHAIN):
        x = x + 1
    return x


def _register_profiler(suite):
    from fastop.profiler import Profiler
    torch = suite.torch
    a = np.ones(4, dtype=np.float32)
    plain = fastop.to_tensor(a)
    t_plain = torch.from_numpy(a.copy()) if torch else None
    prof = Profiler()

    def profiled():
        with prof:
            _chain(plain)
    for state, fn, target in (
            ("off", lambda: _chain(plain),
             "≤ 2 % over a build without the hook (docs/profiling.md)"),
            ("on", profiled, "≤ 1 µs/op over the profiler-off row")):
        suite.add("profiler", f"x+1 chain x{CHAIN} (4,) f32, profiler {state}", fastop=fn,
                  numpy=lambda: _chain(a), torch=(lambda: _chain(t_plain)) if torch else None,
                  target=target)


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
              target="≤ 0.6 µs/op (numpy 0.57, torch 4.2 µs/op on the reference machine)")
    suite.add("eager", f"x+1 chain x{CHAIN} (4,) f32 autograd",
              fastop=lambda: _chain(tracked), numpy=lambda: _chain(a),
              torch=(lambda: _chain(t_tracked)) if torch else None,
              target="≤ 1.0 µs/op (torch 3.1 µs/op with autograd)")


class _Inputs:
    """One float32 array and its fastop and torch twins (tracked ones require grad)."""

    def __init__(self, torch, shape, seed=0, tracked=False):
        self.a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        self.x = fastop.to_tensor(self.a, stop_gradient=not tracked)
        self.t = None
        if torch:
            self.t = torch.tensor(self.a, requires_grad=tracked)

    def fastop_step(self, fn):
        """``fn(x)`` then clear x's gradient: a forward + backward step."""
        def step():
            fn(self.x)
            self.x.grad = None
        return step

    def torch_step(self, fn):
        if self.t is None:
            return None

        def step():
            fn(self.t)
            self.t.grad = None
        return step


def _register_spine(suite):
    torch = suite.torch
    plain, tracked = _Inputs(torch, SHAPE), _Inputs(torch, SHAPE, tracked=True)
    shape = "x".join(map(str, SHAPE))
    has_swish = "activations::swish" in fastop.ops.registry
    swish_kernel, swish_grad_kernel = _swish_kernels() if has_swish else (None, None)
    if torch:
        TorchTanh, TorchSwish = _torch_functions(torch, swish_kernel, swish_grad_kernel)
        torch_identity = _torch_identity_op(torch)
    identity = _identity_op()
    suite.add("eager", f"registry Python op identity {shape} f32",
              fastop=lambda: identity(plain.x), numpy=lambda: identity_kernel(plain.a),
              torch=(lambda: torch_identity(plain.t)) if torch else None,
              target="≤ kernel alone (numpy column) + 0.6 µs, ≤ 1.0 µs")

    if not has_swish:
        print("bench_eager: fastop-activations is not installed: no swish row",
              file=sys.stderr)
    else:
        swish, ones = fastop.ops.activations.swish, np.ones(SHAPE, np.float32)
        suite.add("eager", f"plugin swish + .sum().backward() {shape} f32",
                  fastop=tracked.fastop_step(lambda x: swish(x).sum().backward()),
                  numpy=lambda: (swish_kernel(tracked.a), swish_grad_kernel(tracked.a, ones)),
                  torch=tracked.torch_step(lambda x: TorchSwish.apply(x).sum().backward()),
                  target="overhead over the numpy kernels ≤ 1/4 of torch's")

    suite.add("eager", f"fastop.tanh(x) {shape} f32",
              fastop=lambda: fastop.tanh(plain.x), numpy=lambda: np.tanh(plain.a),
              torch=(lambda: torch.tanh(plain.t)) if torch else None)
    suite.add("eager", f"x.reshape([3, 2]) {shape} f32",
              fastop=lambda: plain.x.reshape([3, 2]), numpy=lambda: plain.a.reshape(3, 2),
              torch=(lambda: plain.t.reshape(3, 2)) if torch else None,
              target="≤ 0.6 µs")

    def numpy_tanh_sum_grad(a=tracked.a):
        y = np.tanh(a)
        return y.sum(), 1 - y * y
    suite.add("eager", f"tanh(x).sum().backward() {shape} f32",
              fastop=tracked.fastop_step(lambda x: fastop.tanh(x).sum().backward()),
              numpy=numpy_tanh_sum_grad,
              torch=tracked.torch_step(lambda x: torch.tanh(x).sum().backward()),
              target="≥ 3× torch, ≤ 4 µs")

    def numpy_tanh_mean_grad(a=tracked.a):
        y = np.tanh(a)
        return y.mean(), np.full_like(a, 1 / a.size) * (1 - np.square(y))
    suite.add("eager", f"PyLayer cus_tanh (numpy) .mean().backward() {shape} f32",
              fastop=tracked.fastop_step(lambda x: cus_tanh.apply(x).mean().backward()),
              numpy=numpy_tanh_mean_grad,
              torch=tracked.torch_step(lambda x: TorchTanh.apply(x).mean().backward()),
              target="≥ 3× torch.autograd.Function")


def _register_cross_entropy(suite):
    torch = suite.torch
    shapes = [(64, 10), (512, 1000)] if suite.quick else [(64, 10), (4096, 1000)]
    for (n, c), target in zip(shapes, ("≥ 3× torch, ≥ 2× numpy", "≥ 1.5× torch")):
        logits = _Inputs(torch, (n, c), seed=1, tracked=True)
        label = np.random.default_rng(2).integers(0, c, n)
        flabel = fastop.to_tensor(label)
        tlabel = torch.from_numpy(label) if torch else None
        dloss, rows = np.float32(1.0 / n), np.arange(n)

        def numpy_ce(a=logits.a, label=label, dloss=dloss, rows=rows):
            loss, grad = numpy_cross_entropy(a, label, dloss, rows)
            return loss.mean(), grad
        def fastop_ce(x, label=flabel):
            nn.functional.cross_entropy(x, label).backward()

        def torch_ce(t, label=tlabel):
            torch.nn.functional.cross_entropy(t, label).backward()
        suite.add("eager", f"cross_entropy(logits, label).backward() {n}x{c} f32",
                  fastop=logits.fastop_step(fastop_ce), numpy=numpy_ce,
                  torch=logits.torch_step(torch_ce), target=target)


def register(suite):
    _register_chain(suite)
    _register_profiler(suite)
    _register_spine(suite)
    _register_cross_entropy(suite)
    add_mlp_case(suite, "eager", "MLP 784-256-256-10 train step b64 SGD, clear_grad() f32",
                 nn.Tanh, "≥ 1.3× torch", set_to_zero=True)

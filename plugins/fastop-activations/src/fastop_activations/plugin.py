"""The plugin module named by the ``fastop`` entry point: defines the ``activations``
namespace. Every op is a numpy forward kernel plus a numpy backward kernel that declares
which forward values it needs (OneFlow's ``InputBind``).

``user_relu_forward`` / ``user_relu_backward`` are OneFlow's Python-kernel example op
bound as its ``REGISTER_USER_OP_GRAD`` binds them: the backward is an op of its own, and
the forward's gradient rule calls it with the forward's output and output gradient."""
import numpy as np

import fastop

FLOATS = ("float32", "float64")


def _same(x, **attrs):
    return x


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))   # overflow-free logistic


def _register_user_relu(registry):
    """OneFlow's ``user_relu``: ``REGISTER_USER_OP("user_relu_forward").Input("in")
    .Output("out")`` and ``user_relu_backward(y, dy) -> dx``."""
    backward = registry.define("activations::user_relu_backward", inputs=["y", "dy"],
                               outputs=["dx"], meta=lambda y, dy: dy,
                               differentiable=["dy"],
                               doc="dx = dy where y > 0, else 0 (user_relu_forward's backward)")

    @backward.kernel(*FLOATS)
    def user_relu_backward(y, dy):
        return np.where(y > 0, dy, 0)

    # linear in dy: its gradient is the same op on the incoming gradient
    @backward.grad(needs=["y"], reads={"dy": ("y",)})
    def user_relu_backward_grad(y, ddx):
        return None, backward(y, ddx)

    forward = registry.define("activations::user_relu_forward", inputs=["in"],
                              outputs=["out"], meta=_same,
                              doc="out = max(in, 0): OneFlow's Python-kernel relu")

    @forward.kernel(*FLOATS)
    def user_relu_forward(x):
        return np.maximum(x, 0)   # the seed's (x > 0) * x, without its -0.0

    # REGISTER_USER_OP_GRAD: InputBind("y", output "out"), InputBind("dy", its gradient),
    # and the backward op's "dx" bound as the gradient of input "in"
    @forward.grad(needs=["out"], reads={"in": ("out",)})
    def user_relu_forward_grad(out, dout):
        return (backward(out, dout),)


@fastop.hookimpl
def fastop_register_ops(registry):
    _register_user_relu(registry)

    swish = registry.define("activations::swish", inputs=["x"], outputs=["y"],
                            attrs={"beta": 1.0}, meta=_same,
                            doc="y = x * sigmoid(beta * x)")

    @swish.kernel(*FLOATS)
    def swish_forward(x, beta):
        return (x * _sigmoid(beta * x)).astype(x.dtype, copy=False)

    @swish.grad_kernel(needs=["x", "dy"])
    def swish_backward(x, dy, beta):
        s = _sigmoid(beta * x)
        return (dy * (s + beta * x * s * (1.0 - s))).astype(x.dtype, copy=False)

    softplus = registry.define("activations::softplus", inputs=["x"], outputs=["y"],
                               attrs={"beta": 1.0, "threshold": 20.0}, meta=_same,
                               doc="y = log(1 + exp(beta * x)) / beta, linear above threshold")

    @softplus.kernel(*FLOATS)
    def softplus_forward(x, beta, threshold):
        z = beta * x
        return np.where(z > threshold, x, np.logaddexp(0.0, z) / beta).astype(x.dtype, copy=False)

    @softplus.grad_kernel(needs=["x", "dy"])
    def softplus_backward(x, dy, beta, threshold):
        z = beta * x
        return np.where(z > threshold, dy, dy * _sigmoid(z)).astype(x.dtype, copy=False)

    mish = registry.define("activations::mish", inputs=["x"], outputs=["y"], meta=_same,
                           doc="y = x * tanh(softplus(x))")

    @mish.kernel(*FLOATS)
    def mish_forward(x):
        return (x * np.tanh(np.logaddexp(0.0, x))).astype(x.dtype, copy=False)

    @mish.grad_kernel(needs=["x", "dy"])
    def mish_backward(x, dy):
        t = np.tanh(np.logaddexp(0.0, x))
        return (dy * (t + x * (1.0 - t * t) * _sigmoid(x))).astype(x.dtype, copy=False)

    gelu = registry.define("activations::gelu", inputs=["x"], outputs=["y"], meta=_same,
                           doc="y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))")
    c = np.sqrt(2.0 / np.pi)

    @gelu.kernel(*FLOATS)
    def gelu_forward(x):
        return (0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x ** 3)))).astype(x.dtype, copy=False)

    @gelu.grad_kernel(needs=["x", "dy"])
    def gelu_backward(x, dy):
        u = c * (x + 0.044715 * x ** 3)
        t = np.tanh(u)
        du = c * (1.0 + 3 * 0.044715 * x * x)
        return (dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)).astype(x.dtype, copy=False)

    leaky = registry.define("activations::leaky_relu", inputs=["x"], outputs=["y"],
                            attrs={"negative_slope": 0.01}, meta=_same,
                            doc="y = x if x > 0 else negative_slope * x")

    @leaky.kernel(*FLOATS)
    def leaky_forward(x, negative_slope):
        return np.where(x > 0, x, negative_slope * x).astype(x.dtype, copy=False)

    @leaky.grad_kernel(needs=["x", "dy"])
    def leaky_backward(x, dy, negative_slope):
        return np.where(x > 0, dy, negative_slope * dy).astype(x.dtype, copy=False)


@fastop.hookimpl
def fastop_op_samples():
    """Inputs for fastop.testing.opcheck (fastop's test suite checks every op with
    them): away from the kinks of relu and leaky_relu at 0 (finite differences step
    1e-6 over them), and past softplus's threshold."""
    from fastop.testing import Sample

    rng = np.random.default_rng(0)

    def away_from_zero(*shape, dtype="float64"):
        x = rng.uniform(0.1, 3.0, shape) * rng.choice([-1.0, 1.0], shape)
        return x.astype(dtype)

    def relu_backward_sample(*shape, dtype="float64"):
        # y as user_relu_forward gives it: zeros where the input was negative (every
        # other element)
        signs = np.where(np.arange(np.prod(shape)).reshape(shape) % 2, 1.0, -1.0)
        y = np.maximum(np.abs(away_from_zero(*shape)) * signs, 0).astype(dtype)
        return [y, rng.standard_normal(shape).astype(dtype)]

    common = [[away_from_zero(3, 4)], [away_from_zero(5, dtype="float32")],
              [away_from_zero(2, 1, 3)]]
    return {
        "activations::user_relu_forward": common,
        "activations::user_relu_backward": [relu_backward_sample(3, 4),
                                            relu_backward_sample(5, dtype="float32"),
                                            relu_backward_sample(2, 1, 3)],
        "activations::swish": common + [Sample(away_from_zero(4), beta=1.7)],
        "activations::softplus": common + [Sample(away_from_zero(6) * 4, beta=2.0,
                                                  threshold=5.0)],
        "activations::mish": common,
        "activations::gelu": common,
        "activations::leaky_relu": common + [Sample(away_from_zero(4), negative_slope=0.2)],
    }

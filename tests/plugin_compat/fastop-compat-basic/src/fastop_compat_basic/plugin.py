"""compat_basic: ops written from docs/plugins.md, docs/python-ops.md and
``Registry.define``'s docstring, one documented pattern each.

- ``scaled_tanh``: one output, a defaulted float attribute, ``meta=``, float kernels, a
  backward kernel that needs only the output (``needs=["y", "dy"]``).
- ``split_sign``: two floating outputs, ``@op.meta``, a backward kernel taking both
  output gradients.
- ``poly``: a required float attribute, a defaulted int and a list (tuple default)
  attribute.
- ``cube``: a ``"*"`` kernel (any dtype) next to a float64 kernel, and a composite
  gradient (double backward).
- ``sigmoid_scaled``: a composite gradient with ``reads=``.
- ``select``: ``differentiable=`` and ``promotes=`` (a bool condition takes no part).
- ``reciprocal``: ``int_to_float=True``.
- ``twice_and_square``: two floating outputs, ``materialize_grads=False``.
"""
import numpy as np

import fastop

__version__ = "0.1.0"


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@fastop.hookimpl
def fastop_register_ops(registry):
    multiply = fastop.ops.get("fastop::multiply")
    add = fastop.ops.get("fastop::add")
    subtract = fastop.ops.get("fastop::subtract")
    square = fastop.ops.get("fastop::square")
    neg = fastop.ops.get("fastop::neg")

    # -- one output, defaulted attribute, backward kernel on the output --------------------
    scaled_tanh = registry.define(
        "compat_basic::scaled_tanh", inputs=["x"], outputs=["y"], attrs={"scale": 1.0},
        meta=lambda x, scale: x, doc="y = scale * tanh(x)")

    @scaled_tanh.kernel("float32", "float64")
    def scaled_tanh_forward(x, scale):
        return (scale * np.tanh(x)).astype(x.dtype)

    @scaled_tanh.grad_kernel(needs=["y", "dy"])
    def scaled_tanh_backward(y, dy, scale):
        t = y / scale
        return (dy * scale * (1.0 - t * t)).astype(y.dtype)

    # -- several floating outputs, @op.meta ---------------------------------------------
    split_sign = registry.define(
        "compat_basic::split_sign", inputs=["x"], outputs=["pos", "neg"],
        doc="pos = max(x, 0); neg = min(x, 0)")

    @split_sign.meta
    def split_sign_meta(x):
        return [x, x]

    @split_sign.kernel("float32", "float64")
    def split_sign_forward(x):
        return np.maximum(x, 0).astype(x.dtype), np.minimum(x, 0).astype(x.dtype)

    @split_sign.grad_kernel(needs=["x", "dpos", "dneg"])
    def split_sign_backward(x, dpos, dneg):
        return np.where(x > 0, dpos, dneg).astype(x.dtype)

    # -- typed, defaulted and required attributes -----------------------------------------
    poly = registry.define(
        "compat_basic::poly", inputs=["x"], outputs=["y"],
        attrs={"shift": float, "power": 2, "coeffs": (1.0, 1.0)},
        meta=lambda x, shift, power, coeffs: x,
        doc="y = coeffs[0] * x ** power + coeffs[1] * x + shift")

    @poly.kernel("float32", "float64")
    def poly_forward(x, shift, power, coeffs):
        return (coeffs[0] * x ** power + coeffs[1] * x + shift).astype(x.dtype)

    @poly.grad_kernel(needs=["x", "dy"])
    def poly_backward(x, dy, shift, power, coeffs):
        return (dy * (coeffs[0] * power * x ** (power - 1) + coeffs[1])).astype(x.dtype)

    # -- a "*" kernel and a float64 one; composite gradient (double backward) -------------
    cube = registry.define(
        "compat_basic::cube", inputs=["x"], outputs=["y"], meta=lambda x: x,
        kernels={"*": lambda x: x * x * x}, doc="y = x ** 3")

    @cube.kernel("float64")
    def cube_float64(x):
        return np.power(x, 3)

    @cube.grad(needs=["x"])
    def cube_grad(x, dy):
        return multiply(multiply(square(x), 3.0), dy)

    # -- composite gradient declaring what it reads ---------------------------------------
    sigmoid_scaled = registry.define(
        "compat_basic::sigmoid_scaled", inputs=["x"], outputs=["y"], attrs={"t": 1.0},
        meta=lambda x, t: x, doc="y = sigmoid(t * x)")

    @sigmoid_scaled.kernel("float32", "float64")
    def sigmoid_scaled_forward(x, t):
        return _sigmoid(t * x).astype(x.dtype)

    @sigmoid_scaled.grad(needs=["y"], reads={"x": ("y",)})
    def sigmoid_scaled_grad(y, dy, t):
        # t * y * (1 - y) * dy, as -(y * (y - 1)) * dy * t
        return multiply(multiply(dy, neg(multiply(y, subtract(y, 1.0)))), t)

    # -- differentiable= and promotes=: the condition is not promoted and takes no grad ---
    select = registry.define(
        "compat_basic::select", inputs=["cond", "x", "y"], outputs=["out"],
        meta=lambda cond, x, y: x, differentiable=["x", "y"], promotes=["x", "y"],
        doc="out = x where cond else y")

    @select.kernel()
    def select_forward(cond, x, y):
        return np.where(cond, x, y)

    @select.grad_kernel(needs=["cond", "dout"])
    def select_backward(cond, dout):
        zero = np.zeros_like(dout)
        return np.where(cond, dout, zero), np.where(cond, zero, dout)

    # -- int_to_float: integer inputs compute in float32 ----------------------------------
    reciprocal = registry.define(
        "compat_basic::reciprocal", inputs=["x"], outputs=["y"], meta=lambda x: x,
        int_to_float=True, doc="y = 1 / x")

    @reciprocal.kernel("float32", "float64")
    def reciprocal_forward(x):
        return (1.0 / x).astype(x.dtype)

    @reciprocal.grad_kernel(needs=["y", "dy"])
    def reciprocal_backward(y, dy):
        return (-dy * y * y).astype(y.dtype)

    # -- materialize_grads=False: None for an output no gradient flows into ---------------
    twice_and_square = registry.define(
        "compat_basic::twice_and_square", inputs=["x"], outputs=["twice", "sq"],
        meta=lambda x: [x, x], doc="twice = 2 * x; sq = x * x")

    @twice_and_square.kernel("float32", "float64")
    def twice_and_square_forward(x):
        return (2 * x).astype(x.dtype), (x * x).astype(x.dtype)

    @twice_and_square.grad(needs=["x"], materialize_grads=False)
    def twice_and_square_grad(x, dtwice, dsq):
        dx = None
        if dtwice is not None:
            dx = multiply(dtwice, 2.0)
        if dsq is not None:
            term = multiply(multiply(x, 2.0), dsq)
            dx = term if dx is None else add(dx, term)
        return dx


@fastop.hookimpl
def fastop_op_samples():
    from fastop.testing import Sample
    rng = np.random.default_rng(0)

    def away(*shape):
        """Values with |v| in [0.5, 1.5]: away from the kinks at 0."""
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 1.5, shape)

    cond = rng.random((3, 4)) > 0.5
    return {
        "compat_basic::scaled_tanh": [[rng.standard_normal((3, 4))],
                                      [rng.standard_normal(5).astype("float32")],
                                      Sample(rng.standard_normal(4), scale=2.0)],
        "compat_basic::split_sign": [[away(3, 4)], [away(5).astype("float32")]],
        "compat_basic::poly": [Sample(rng.standard_normal((2, 3)), shift=0.5),
                               Sample(rng.standard_normal(4).astype("float32"), shift=1.0),
                               Sample(rng.standard_normal(4), shift=-1.0, power=3,
                                      coeffs=(0.5, 2.0))],
        "compat_basic::cube": [[rng.standard_normal((3, 4))],
                               [rng.standard_normal(5).astype("float32")]],
        "compat_basic::sigmoid_scaled": [[rng.standard_normal((3, 4))],
                                         [rng.standard_normal(5).astype("float32")],
                                         Sample(rng.standard_normal(4), t=0.5)],
        "compat_basic::select": [[cond, rng.standard_normal((3, 4)),
                                  rng.standard_normal((3, 4))],
                                 [cond[0], rng.standard_normal(4).astype("float32"),
                                  rng.standard_normal(4).astype("float32")]],
        "compat_basic::reciprocal": [[away(3, 4)], [away(5).astype("float32")]],
        "compat_basic::twice_and_square": [[rng.standard_normal((3, 4))],
                                           [rng.standard_normal(5).astype("float32")]],
    }
